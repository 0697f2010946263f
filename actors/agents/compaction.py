"""Context management at a turn's start (the agent's side, with I/O): ask the server
for the window when nothing says it, and summarise the older conversation when the next
request would pass ``context.compact_at`` of it.

Each answer is stored as an event (``context.window``, ``context.compacted``) and the
turn goes on with the `TurnInput` that event makes, so the request sent now is the one
the folded log gives (`actors.agents.context.model_view`). The summary is emitted only
once every summariser call is done: a turn cut in the middle of one stores none of it.
Compaction runs before the turn's first model call only (a goal run's turn that
continues without new input included), never while a tool batch waits for its results.
"""

from __future__ import annotations

import asyncio
from typing import Any

import attrs

from spine import Event, Kind, Usage

from ..spec import ContextView, TurnInput
from .base import AgentError, TurnOutput
from .context import (
    SUMMARY_SYSTEM,
    Plan,
    chars_of,
    chunks,
    due,
    model_view,
    plan,
    summary_budget,
    summary_request_text,
)
from .governance import Requirement, Verdict
from .model_call import UsageTally, _fault_of, completed
from .window import known_window
from .wire import Message, ModelRequest, TextDelta, UsageSeen

__all__ = ["ContextOverflow", "compact", "is_due", "prepare"]


class ContextOverflow(AgentError):
    """The request cannot fit the model's context window even after compaction."""


class SummaryFailed(Exception):
    """A summariser call was refused or failed."""


async def prepare(
    agent: Any, turn: TurnInput, out: TurnOutput, tally: UsageTally, extra: int
) -> TurnInput:
    """``turn`` with its window known and, when its request (with ``extra`` characters
    of tool definitions) is due, the older part summarised (the events saying so
    emitted)."""
    ctx = turn.context
    if ctx is None or (turn.resume and model_view(turn, agent.spec.system)[2]):
        return turn  # a tool batch still open: its results are on the way
    if ctx.window <= 0:
        turn = await _discover(agent, turn, out)
    if ctx.force or is_due(agent, turn, extra):
        turn = await compact(agent, turn, out, tally, keep=ctx.keep_recent)
        if is_due(agent, turn, extra):
            # The recent turns alone pass the threshold: summarise them too.
            turn = await compact(agent, turn, out, tally, keep=0)
    return turn


def is_due(agent: Any, turn: TurnInput, extra: int) -> bool:
    """Whether ``turn``'s first request passes its compaction threshold."""
    assert turn.context is not None
    system, msgs, _ = model_view(turn, agent.spec.system)
    reserve = agent.spec.max_output_tokens or 0
    return due(turn.context, chars_of(system, msgs) + extra, reserve)


async def _discover(agent: Any, turn: TurnInput, out: TurnOutput) -> TurnInput:
    ctx = turn.context
    assert ctx is not None
    ask = getattr(agent.provider, "context_window", None)
    answer = await ask(agent.spec.model) if ask is not None else None
    tokens, source = answer if answer is not None else known_window(agent.spec.model)
    out.emit(
        Event(
            kind=Kind.CONTEXT_WINDOW,
            extra={"tokens": tokens, "source": source, "key": ctx.window_key},
        )
    )
    return attrs.evolve(turn, context=attrs.evolve(ctx, window=tokens, window_source=source))


async def compact(
    agent: Any, turn: TurnInput, out: TurnOutput, tally: UsageTally, keep: int
) -> TurnInput:
    """Summarise the span `plan` names (nothing to do: ``turn`` as it was). A summary
    that cannot be written still ends the span's place in the view, stored as a
    compaction without a summary: the session goes on without that part rather than
    failing every turn at the window."""
    ctx = turn.context
    assert ctx is not None
    p = plan(turn, keep)
    if p is None:
        return turn
    used = Usage()
    error = ""
    try:
        summary, used = await _summarise(agent, ctx, p, out, tally)
    except SummaryFailed as exc:
        summary, error = "", str(exc)
    extra: dict[str, Any] = {"fromSeq": p.first, "toSeq": p.last, "model": _model(agent, ctx)}
    if error:
        extra["error"] = error
    out.emit(
        Event(
            kind=Kind.CONTEXT_COMPACTED,
            text=summary,
            usage=used if not used.is_zero() else None,
            extra=extra,
        )
    )
    new = attrs.evolve(ctx, summary=summary, covered=(p.first, p.last))
    return attrs.evolve(turn, context=new)


def _model(agent: Any, ctx: ContextView) -> str:
    return ctx.summary_model or str(agent.spec.model)


async def _summarise(
    agent: Any, ctx: ContextView, p: Plan, out: TurnOutput, tally: UsageTally
) -> tuple[str, Usage]:
    """A rolling summary: the summary in force, then each piece of the span folded into
    it by one call whose input is bounded (`summary_budget`)."""
    in_chars, out_tokens = summary_budget(ctx)
    room = max(256, in_chars - len(SUMMARY_SYSTEM) - 400)
    summary = p.previous
    used = Usage()
    for piece in chunks(p.entries, room // 2):
        # The summary so far is itself bounded by the output cap; cut it if a model
        # ignored the cap, so the input never grows past the budget.
        summary = summary[: room // 2]
        text = summary_request_text(summary, piece, p.first, p.last)
        summary, u = await _call(agent, ctx, text, out_tokens, out, tally)
        used = used + u
    return summary, used


async def _call(
    agent: Any, ctx: ContextView, text: str, max_tokens: int, out: TurnOutput, tally: UsageTally
) -> tuple[str, Usage]:
    verdict, call, fault = await asyncio.wrap_future(out.govern("model", "", "", Requirement()))
    if verdict != Verdict.ADMIT:
        raise SummaryFailed(f"governance refused the summary call: {fault or 'rejected'}")
    req = ModelRequest(
        model=_model(agent, ctx),
        messages=(Message(role="user", text=text),),
        system=SUMMARY_SYSTEM,
        max_output_tokens=max_tokens,
        include_usage=agent.spec.include_usage,
    )
    words: list[str] = []
    seen: UsageSeen | None = None
    try:
        async for ev in agent.provider.stream(req):
            if isinstance(ev, TextDelta):
                words.append(ev.text)
            elif isinstance(ev, UsageSeen):
                seen = ev
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        used = seen.usage if seen is not None else None
        out.emit(completed(call, "model", "", _fault_of(exc), usage=used))
        raise SummaryFailed(f"the summary call failed: {exc}") from None
    out.emit(completed(call, "model", "", "", usage=seen.usage if seen is not None else None))
    if seen is not None:
        tally.add(seen)
        tally.report(UsageSeen(usage=Usage(), raw={}), out)
    summary = "".join(words).strip()
    if not summary:
        raise SummaryFailed("the summary call answered nothing")
    return summary, seen.usage if seen is not None else Usage()
