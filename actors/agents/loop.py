"""The tool loop: model -> tool calls -> results -> model, until the model stops.

`ModelAgent` is the `Agent` every provider runs under. A turn is a coroutine on the
process's provider loop (one asyncio loop on a daemon thread, started on first use),
so an interrupt cancels the in-flight request from the session's thread at once; the
turn worker's thread just waits for the coroutine's result.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol, runtime_checkable

import attrs

from ..spec import AgentSpec, TurnInput
from .base import TurnOutput
from .compaction import ContextOverflow, compact, is_due, prepare
from .context import (
    chars_of,
    elide,
    estimate,
    is_overflow,
    leaves_out,
    model_view,
    tool_limit,
    tools_chars,
)
from .governance import Fault, Requirement, Verdict
from .model_call import Flusher, UsageTally, completed, drain_now, stream_reply
from .provider_loop import provider_loop
from .replayed import Replayed
from .tool_run import run_tool
from .toolnames import WireNames
from .tools import FINISH, RECALL, ToolContext, ToolRegistry
from .wire import (
    Message,
    ModelRequest,
    Stopped,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallDone,
    ToolSpec,
    UsageSeen,
)

__all__ = ["FINISHED", "ModelAgent", "Provider", "provider_loop"]

#: The stop reason of a turn ended by its goal run's ``finish`` tool.
FINISHED = "finish"

#: A call's result the session stored itself (given by hand): not handed back to store.
_STORED: Mapping[str, Any] = {"stored": True}


@runtime_checkable
class Provider(Protocol):
    """One model server's wire format: stream one model call as `StreamEvent`s (text and
    reasoning deltas as they come; tool calls, usage and the stop reason at the end).
    Cancelled by cancelling the task that iterates it."""

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]: ...


def refused_text(fault: str) -> str:
    """What the model hears about a call the gate did not let run."""
    if fault == Fault.IN_DOUBT:
        return (
            "not run again: this call ran before and its outcome is unknown "
            "(the session restarted while it ran)"
        )
    return f"not run: refused by governance ({fault or 'rejected'})"


def _steers(out: TurnOutput) -> tuple[str, ...]:
    take = getattr(out, "take_steers", None)
    return tuple(take()) if take is not None else ()


class ModelAgent:
    """An `Agent` that drives a `Provider` through the tool loop.

    Parallel tool calls in one response run concurrently; each gets its ``tool.call``
    and ``tool.result`` under the provider's call id, and each result goes back matched
    by that id. After ``spec.max_tool_rounds`` rounds, further calls are answered with
    an error result (not run) and the turn ends with stop reason ``max_tool_rounds``.
    """

    def __init__(
        self,
        spec: AgentSpec,
        provider: Provider,
        tools: ToolRegistry | None = None,
        flush_interval: float = 0.02,
        mcp: Any = None,
    ) -> None:
        self.spec = spec
        self.provider = provider
        self.tools = tools if tools is not None else ToolRegistry()
        self.flush_interval = flush_interval
        #: The MCP servers' tools (`mcp_client.McpTools`), listed at each turn's start.
        self.mcp = mcp

    def run(self, turn: TurnInput, out: TurnOutput) -> str:
        fut = asyncio.run_coroutine_threadsafe(self.turn(turn, out), provider_loop())
        out.on_cancel(fut.cancel)
        try:
            return fut.result()
        except concurrent.futures.CancelledError:
            return "cancelled"

    def _request(
        self,
        msgs: list[Message],
        specs: tuple[ToolSpec, ...],
        system: str | None,
        names: WireNames | None = None,
    ) -> ModelRequest:
        spec = self.spec
        messages: tuple[Message, ...] = tuple(msgs)
        if names is not None:  # the wire's tool names (`toolnames`)
            specs, messages = names.specs(specs), names.messages(messages)
        return ModelRequest(
            model=spec.model,
            messages=messages,
            tools=specs,
            system=system,
            temperature=spec.temperature,
            max_output_tokens=spec.max_output_tokens,
            thinking_level=spec.thinking_level,
            include_usage=spec.include_usage,
        )

    def instant(self, turn: TurnInput, out: TurnOutput) -> str | None:
        """Run the turn here and now if its answer needs no waiting, else None (having
        touched nothing): a provider that says so (``instant``, the scripted one) whose
        stream completes without suspending, with no tool call, on a turn whose model call
        the session admitted up front. Such a turn costs no thread and no hand-back; what
        it stores is what `turn` would store."""
        if not getattr(self.provider, "instant", False) or turn.resume or not turn.model_call:
            return None
        if self.mcp is not None:
            return None  # listing the servers' tools may wait
        specs = self.tools.specs()
        if turn.context is not None and (
            turn.context.window <= 0
            or turn.context.force
            or leaves_out(turn)
            or is_due(self, turn, tools_chars(self.tools.with_tool(RECALL).specs()))
        ):
            return None  # a compaction to run first, or recall to offer: the loop's
        system, msgs, _ = model_view(turn, self.spec.system)
        req = self._request(list(msgs), specs, system)
        events = drain_now(self.provider.stream(req))
        if events is None or any(isinstance(ev, ToolCallDone) for ev in events):
            return None
        stop = "end_turn"
        used = None
        for ev in events:
            if isinstance(ev, TextDelta):
                out.text(ev.text)
            elif isinstance(ev, UsageSeen):
                out.usage(ev.usage, (ev.raw,) if ev.raw else ())
                used = ev.usage
            elif isinstance(ev, Stopped):
                stop = ev.reason
        out.emit(completed(turn.model_call, "model", "", "", usage=used))
        return stop

    async def turn(self, turn: TurnInput, out: TurnOutput) -> str:
        # A goal run that ends with the finish tool offers it for its turns only.
        tools = self.tools.with_tool(FINISH) if turn.finish else self.tools
        if self.mcp is not None:
            tools = await self.mcp.registry(tools, out.emit)
        ctx = ToolContext(
            emit=out.emit,
            egress_allow=turn.egress_allow,
            delegate=getattr(out, "delegate", None),
            recall=getattr(out, "recall", None),
            schedule=getattr(out, "schedule", None),
            ask=getattr(out, "ask", None),
            session_id=turn.session_id,
        )
        flusher = Flusher(out, self.flush_interval)
        tally = UsageTally()
        try:
            # What the tools add to a request, counting recall whether or not it is offered.
            most = tools.with_tool(RECALL) if turn.context is not None else tools
            extra = tools_chars(most.specs())
            turn = await prepare(self, turn, out, tally, extra)
            view = _View(turn, extra, self.spec.system)
            rounds = 0
            if view.todo:
                # A turn paused for an approval: answer the calls still open, then go on.
                rounds = 1
                if await self._answer(
                    view.todo, out, ctx, view, view.offered(tools), announce=False
                ):
                    return FINISHED
            return await self._rounds(rounds, out, ctx, view, tools, flusher, tally)
        finally:
            flusher.cancel()

    async def _rounds(
        self,
        rounds: int,
        out: TurnOutput,
        ctx: ToolContext,
        view: _View,
        tools: ToolRegistry,
        flusher: Flusher,
        tally: UsageTally,
    ) -> str:
        """Model calls, each through the gate (the turn's first, when set, admitted up
        front), and each response's tool calls, until the model stops, a call is refused,
        the turn runs out of tool rounds or an offered ``finish`` ran; ``rounds`` already
        ran. A call the server refuses as over its context window is answered by one
        compaction and one retry."""
        first = view.turn.model_call
        while True:
            offered = view.offered(tools)
            if first:
                verdict, call, fault = str(Verdict.ADMIT), first, ""
                first = 0
            else:
                verdict, call, fault = await self._govern(out, "model", "", "", Requirement())
            if verdict != Verdict.ADMIT:
                return fault or "rejected"
            # The safe point: steers the session delivered with this admission.
            view.msgs.extend(Message(role="user", text=t) for t in _steers(out))
            names = WireNames.of(offered.tools)
            req = self._request(view.msgs, offered.specs(), view.system, names)
            try:
                reply = await stream_reply(
                    self.provider, req, out, call, tally, flusher, view.measure()
                )
            except Exception as exc:
                if not view.may_retry(exc):
                    raise
                await view.overflowed(self, out, tally, exc)
                continue
            if not reply.calls:
                return reply.stop
            calls = tuple(attrs.evolve(c, name=names.registry_name(c.name)) for c in reply.calls)
            thinking = tuple(getattr(self.provider, "last_thinking", ()))
            view.msgs.append(
                Message(role="assistant", text=reply.text, tool_calls=calls, thinking=thinking)
            )
            if rounds >= self.spec.max_tool_rounds:
                return self._out_of_rounds(calls, out)
            rounds += 1
            if await self._answer(calls, out, ctx, view, offered, announce=True):
                return FINISHED

    def _out_of_rounds(self, calls: tuple[ToolCall, ...], out: TurnOutput) -> str:
        """Answer the calls of a response past the turn's limit of tool rounds with an
        error result, not run: the turn ends there."""
        why = (
            "not run: the turn reached its limit of "
            f"{self.spec.max_tool_rounds} tool rounds (ore.model.max_tool_rounds)"
        )
        for c in calls:
            out.tool_call(c.name, c.id, c.arguments)
        for c in calls:
            out.tool_result(c.name, c.id, why, True)
        return "max_tool_rounds"

    async def _govern(
        self, out: TurnOutput, action: str, tool_use_id: str, input_json: str, need: Requirement
    ) -> tuple[str, int, str]:
        return await asyncio.wrap_future(out.govern(action, tool_use_id, input_json, need))

    async def _answer(
        self,
        calls: tuple[ToolCall, ...],
        out: TurnOutput,
        ctx: ToolContext,
        view: _View,
        tools: ToolRegistry,
        *,
        announce: bool,
    ) -> bool:
        """Run one response's tool calls (each through the gate, concurrently; each result
        stored as soon as its call ends) and add their results to the conversation, in the
        calls' order. True when one of them was an offered ``finish`` that ran: the turn
        ends there."""
        if announce:
            for c in calls:
                out.tool_call(c.name, c.id, c.arguments)
        replayed = view.replayed
        results = await asyncio.gather(
            *(self._answered(c, out, ctx, tools, replayed) for c in calls)
        )
        finished = False
        for c, (result, is_error) in zip(calls, results, strict=True):
            view.msgs.append(
                Message(
                    role="tool",
                    # Stored whole; the model gets at most its share of the window.
                    text=elide(result, view.limit),
                    tool_use_id=c.id,
                    tool_name=c.name,
                    is_error=is_error,
                )
            )
            finished = finished or (not is_error and tools.get(c.name) is FINISH)
        return finished

    async def _answered(
        self,
        call: ToolCall,
        out: TurnOutput,
        ctx: ToolContext,
        tools: ToolRegistry,
        replayed: Replayed | None,
    ) -> tuple[str, bool]:
        """One call's result, stored the moment it is known: a sibling still waiting (for a
        human, say) must not hold back the outcome of a call that has run."""
        result, is_error, extra = await self._governed(call, out, ctx, tools, replayed)
        if extra is _STORED:
            return result, is_error
        if extra:  # an MCP call's record
            out.tool_result(call.name, call.id, result, is_error, extra=extra)
        else:
            out.tool_result(call.name, call.id, result, is_error)
        return result, is_error

    async def _governed(
        self,
        call: ToolCall,
        out: TurnOutput,
        ctx: ToolContext,
        tools: ToolRegistry,
        replayed: Replayed | None,
    ) -> tuple[str, bool, Mapping[str, Any]]:
        if call.error:
            return call.error, True, {}
        tool = tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(tools.tools)) or "none"
            return f"unknown tool {call.name!r}; the tools are: {known}", True, {}
        need = tool.requirement
        if tool.idempotent and not need.idempotent:
            need = attrs.evolve(need, idempotent=True)
        verdict, cid, fault = await self._govern(out, call.name, call.id, call.arguments, need)
        if verdict != Verdict.ADMIT:
            given = getattr(out, "given_result", None) if fault == Fault.RESOLVED else None
            hand = given(call.name, call.id) if given is not None else None
            if hand is not None:
                # A human told the session this call's outcome; it is stored already.
                return hand[0], hand[1], _STORED
            # The model hears why, so it can do without; the tool never runs.
            return refused_text(fault), True, {}
        if replayed is not None:
            # A replay: the stored result, and the tool never runs.
            result, is_error = replayed.answer(call.name, call.arguments)
            out.emit(completed(cid, call.name, call.id, "tool_error" if is_error else ""))
            return result, is_error, {}
        key_of = getattr(out, "idempotency_key", None)
        key = key_of(call.name, call.id) if key_of is not None else ""
        here = attrs.evolve(ctx, tool_use_id=call.id, idempotency_key=key)
        result, is_error, extra = await run_tool(call, here, tool)
        out.emit(completed(cid, call.name, call.id, "tool_error" if is_error else ""))
        return result, is_error, extra


class _View:
    """What a turn's model calls carry: the view of the log it started with (`model_view`),
    then the turn's own messages; replaced once if the server refuses it as too long."""

    def __init__(self, turn: TurnInput, extra: int, system: str | None) -> None:
        self.extra = extra
        self.spec_system = system
        self.retried = False
        #: A replay's recorded calls, answered in place of running a tool.
        self.replayed = Replayed(turn.recorded) if turn.recorded is not None else None
        self.msgs: list[Message] = []
        self.base = 0
        self._reset(turn)

    def _reset(self, turn: TurnInput) -> None:
        own = self.msgs[self.base :]
        self.turn = turn
        self.system, start, self.todo = model_view(turn, self.spec_system)
        self.base = len(start)
        self.msgs[:] = [*start, *own]
        self.limit = tool_limit(turn.context) if turn.context is not None else 0

    def offered(self, tools: ToolRegistry) -> ToolRegistry:
        """``tools``, with ``recall`` while the view leaves part of the log out."""
        return tools.with_tool(RECALL) if leaves_out(self.turn) else tools

    def measure(self) -> int:
        """The characters of the next request (0: the turn manages no context)."""
        if self.turn.context is None:
            return 0
        return chars_of(self.system, self.msgs) + self.extra

    def may_retry(self, exc: Exception) -> bool:
        """Whether ``exc`` is the server refusing the request as over its window (the
        first time, a compaction and a retry; the second, a `ContextOverflow`)."""
        return self.turn.context is not None and is_overflow(exc)

    async def overflowed(
        self, agent: ModelAgent, out: TurnOutput, tally: UsageTally, exc: Exception
    ) -> None:
        """Summarise all the older conversation and go on with that view, or fail the turn
        saying the request cannot fit."""
        new = self.turn if self.retried else await compact(agent, self.turn, out, tally, keep=0)
        self.retried = True
        ctx = self.turn.context
        assert ctx is not None
        if new is self.turn:
            raise ContextOverflow(
                f"the request does not fit the model's context window ({ctx.window} tokens, "
                f"{ctx.window_source or 'unknown source'}; estimated "
                f"{estimate(ctx, self.measure())}) even with the older conversation "
                f"summarised: {exc}"
            ) from None
        self._reset(new)
