"""One model call of a turn: its stream drained into text, tool calls, stop reason and
usage (the output flushed on a timer meanwhile), closed by its ``action.completed`` event."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from spine import Event, Kind, Usage

from .base import TurnOutput
from .wire import (
    ModelRequest,
    ReasoningDelta,
    Stopped,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallDone,
    UsageSeen,
)

if TYPE_CHECKING:
    from .loop import Provider

__all__ = ["Flusher", "Reply", "UsageTally", "completed", "drain_now", "stream_reply"]


class Flusher:
    """Flushes a turn's output on a timer armed when text or usage arrives."""

    def __init__(self, out: TurnOutput, interval: float) -> None:
        self._out = out
        self._interval = interval
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None

    def arm(self) -> None:
        if self._timer is None:
            self._timer = self._loop.call_later(self._due(), self._flushed)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _flushed(self) -> None:
        self._timer = None
        self._out.flush()

    def _due(self) -> float:
        # When the output wants its text flushed (a worker knows; others: the interval).
        nxt = getattr(self._out, "next_flush", None)
        return float(nxt()) if nxt is not None else self._interval


class UsageTally:
    """The usage of a turn's finished model calls, and the provider's raw reports of it."""

    def __init__(self) -> None:
        self.total = Usage()
        self.raws: list[Mapping[str, Any]] = []

    def report(self, seen: UsageSeen, out: TurnOutput) -> None:
        """Tell ``out`` the turn's usage so far, the call still streaming included."""
        raw = (*self.raws, seen.raw) if seen.raw else tuple(self.raws)
        out.usage(self.total + seen.usage, raw)

    def add(self, seen: UsageSeen) -> None:
        self.total = self.total + seen.usage
        if seen.raw:
            self.raws.append(seen.raw)


class Reply(NamedTuple):
    """What one model call answered."""

    text: str
    calls: tuple[ToolCall, ...]
    stop: str


async def stream_reply(
    provider: Provider,
    req: ModelRequest,
    out: TurnOutput,
    call: int,
    tally: UsageTally,
    flusher: Flusher,
    measure: int = 0,
) -> Reply:
    """Stream model call ``call``: text to ``out`` as it comes, usage reported as it is
    seen and added to ``tally`` once the call completed; its ``action.completed`` names
    the fault of a call that failed, and for a request of ``measure`` characters the
    input tokens the provider counted for it (the session calibrates its estimate so)."""
    text: list[str] = []
    calls: list[ToolCall] = []
    stop = "end_turn"
    seen: UsageSeen | None = None
    try:
        async for ev in provider.stream(req):
            if isinstance(ev, TextDelta):
                text.append(ev.text)
                out.text(ev.text)
                # Whatever the worker holds back goes out within one interval, even if the
                # stream goes quiet now.
                flusher.arm()
            elif isinstance(ev, ToolCallDone):
                calls.append(ev.call)
            elif isinstance(ev, UsageSeen):
                seen = ev
                tally.report(ev, out)
                flusher.arm()
            elif isinstance(ev, Stopped):
                stop = ev.reason
            elif isinstance(ev, ReasoningDelta):
                pass  # counted in usage; not part of the conversation
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        out.emit(completed(call, "model", "", _fault_of(exc), usage=_used(seen)))
        raise
    counted = seen.usage.input_tokens if seen is not None else 0
    extra = {"context": {"chars": measure, "inputTokens": counted}} if measure and counted else None
    out.emit(completed(call, "model", "", "", extra, _used(seen)))
    if seen is not None:
        tally.add(seen)
    return Reply("".join(text), tuple(calls), stop)


def drain_now(stream: AsyncIterator[StreamEvent]) -> list[StreamEvent] | None:
    """Every event of ``stream`` if it yields them all without suspending; None if it
    would wait for anything (or fails): then it is closed and nothing was done."""
    got: list[StreamEvent] = []
    while True:
        step = stream.__anext__()
        try:
            step.send(None)  # type: ignore[attr-defined]
        except StopIteration as done:
            got.append(done.value)
            continue
        except StopAsyncIteration:
            return got
        except Exception:
            return None
        step.close()  # type: ignore[attr-defined]
        return None


def completed(
    call: int,
    action: str,
    tool_use_id: str,
    fault: str,
    extra: Mapping[str, Any] | None = None,
    usage: Usage | None = None,
) -> Event:
    """The ``action.completed`` event of governed call ``call`` (a model call or a tool);
    a model call's carries what the call used, stored as it ends, so the spend of a turn
    a crash cuts short still counts it."""
    return Event(
        kind=Kind.ACTION_COMPLETED,
        usage=usage if usage is not None and not usage.is_zero() else None,
        call=call,
        action=action,
        tool=action if action != "model" else "",
        tool_use_id=tool_use_id,
        fault=fault,
        extra=extra or {},
    )


def _used(seen: UsageSeen | None) -> Usage | None:
    return seen.usage if seen is not None else None


def _fault_of(exc: BaseException) -> str:
    """The failure class of a model call that ran and failed (``fault`` on its
    ``action.completed``)."""
    text = str(exc)
    if "sent nothing for" in text or "timed out" in text:
        return "timeout"
    if any(
        w in text for w in ("cannot connect", "broke off", "closed the connection", " answered 5")
    ):
        return "transient"
    return "error"
