"""Traces from the log: a session's events folded into spans of the OpenTelemetry GenAI
semantic conventions, as plain records (no OpenTelemetry import here; `actors.otel` turns
them into OTLP).

One ``invoke_agent`` span per turn (INTERNAL, the root of its own trace), one
``chat {model}`` span per model call (CLIENT) and one ``execute_tool {name}`` span per tool
call under it, and one ``invoke_agent {child}`` span per spawned child session; a child's
own turns carry a link to that span. Ids are hashes of the session id and the seq of the
event that opened the span, and times are the events' times, so the same log always yields
the same trace, byte for byte.

The attribute names are our own constants: the upstream Python ones are deprecated and
moving between releases.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

import attrs
import orjson

from spine import Event, Kind, Usage

from ._metadata import MODEL_NAME, MODEL_PROVIDER, model_value, reduce_metadata

# The GenAI semantic conventions' attribute names.
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_AGENT_ID = "gen_ai.agent.id"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS = "gen_ai.usage.reasoning.output_tokens"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
ERROR_TYPE = "error.type"
# Ours, for what the conventions have no name for.
VERTEBRA_SEQ = "vertebra.seq"
VERTEBRA_TURN = "vertebra.turn"
VERTEBRA_TURN_OUTCOME = "vertebra.turn.outcome"
VERTEBRA_STOP_REASON = "vertebra.turn.stop_reason"
VERTEBRA_REASON = "vertebra.reason"
VERTEBRA_CALL = "vertebra.governance.call"
VERTEBRA_DECISION = "vertebra.governance.decision"
VERTEBRA_FAULT = "vertebra.governance.fault"
VERTEBRA_TRUST = "vertebra.governance.trust"
VERTEBRA_APPROVED = "vertebra.governance.approved"
VERTEBRA_EGRESS_HOST = "vertebra.egress.host"
VERTEBRA_EGRESS_ALLOWED = "vertebra.egress.allowed"
VERTEBRA_CHILD_ID = "vertebra.child.id"
VERTEBRA_GOAL = "vertebra.goal"
VERTEBRA_LINK = "vertebra.link"
# Span event names.
EVENT_APPROVAL_REQUESTED = "vertebra.approval.requested"
EVENT_APPROVAL = "vertebra.approval"
EVENT_EGRESS = "vertebra.egress"

#: Span kinds and statuses, spelled as OTLP's enums without their prefixes.
INTERNAL = "INTERNAL"
CLIENT = "CLIENT"
UNSET = "UNSET"
ERROR = "ERROR"

#: The ``gen_ai.provider.name`` for each ``ore.model.provider``.
PROVIDER_NAMES: Mapping[str, str] = {
    "openai": "openai",
    "responses": "openai",
    "anthropic": "anthropic",
    "scripted": "vertebra.scripted",
}

Attributes = tuple[tuple[str, Any], ...]


@attrs.frozen(kw_only=True)
class SpanEvent:
    """Something that happened during a span (an approval asked for and given)."""

    name: str
    time: datetime | None
    attributes: Attributes = ()


@attrs.frozen(kw_only=True)
class SpanLink:
    """A pointer to a span of another trace (a child's turn to its parent's spawn)."""

    trace_id: str
    span_id: str
    attributes: Attributes = ()


@attrs.frozen(kw_only=True)
class SpanRecord:
    """One finished span: ids as lowercase hex (32 and 16 digits), times from the log."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: str
    start: datetime | None
    end: datetime | None
    attributes: Attributes = ()
    events: tuple[SpanEvent, ...] = ()
    links: tuple[SpanLink, ...] = ()
    status: str = UNSET
    status_message: str = ""

    def attribute(self, name: str, default: Any = None) -> Any:
        for key, value in self.attributes:
            if key == name:
                return value
        return default


def _hex(session_id: str, what: str, seq: int, digits: int) -> str:
    digest = hashlib.sha256(f"{session_id}\x00{what}\x00{seq}".encode()).hexdigest()[:digits]
    # An id of all zeros is invalid in OTLP; a hash makes it one in 2**64, but be exact.
    return digest if digest.strip("0") else "1".rjust(digits, "0")


def trace_id_for(session_id: str, seq: int) -> str:
    """The trace of the turn (or spawn outside a turn) opened at ``seq``."""
    return _hex(session_id, "trace", seq, 32)


def span_id_for(session_id: str, seq: int) -> str:
    """The span opened by the event at ``seq``."""
    return _hex(session_id, "span", seq, 16)


def usage_attributes(usage: Usage | None) -> Attributes:
    """The GenAI token counts of ``usage`` (input includes the cached part)."""
    u = usage or Usage()
    return (
        (GEN_AI_USAGE_INPUT_TOKENS, u.input_tokens),
        (GEN_AI_USAGE_OUTPUT_TOKENS, u.output_tokens),
        (GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, u.cache_read_tokens),
        (GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, u.cache_write_tokens),
        (GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, u.reasoning_tokens),
    )


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _sub(report: Mapping[str, Any], key: str, inner: str) -> int:
    part = report.get(key)
    return _int(part.get(inner)) if isinstance(part, Mapping) else 0


def provider_usage(report: Any) -> Usage | None:
    """One model call's raw usage report (OpenAI chat, Responses or Anthropic shape) in the
    seed's terms; ``None`` if it is none of them."""
    if not isinstance(report, Mapping):
        return None
    if "prompt_tokens" in report or "completion_tokens" in report:
        return Usage(
            input_tokens=_int(report.get("prompt_tokens")),
            output_tokens=_int(report.get("completion_tokens")),
            cache_read_tokens=_sub(report, "prompt_tokens_details", "cached_tokens"),
            reasoning_tokens=_sub(report, "completion_tokens_details", "reasoning_tokens"),
        )
    if "input_tokens" in report or "output_tokens" in report:
        read = _int(report.get("cache_read_input_tokens"))
        write = _int(report.get("cache_creation_input_tokens"))
        if read or write or "cache_read_input_tokens" in report:
            # Anthropic counts cached input apart from input_tokens; ours includes it.
            return Usage(
                input_tokens=_int(report.get("input_tokens")) + read + write,
                output_tokens=_int(report.get("output_tokens")),
                cache_read_tokens=read,
                cache_write_tokens=write,
            )
        return Usage(
            input_tokens=_int(report.get("input_tokens")),
            output_tokens=_int(report.get("output_tokens")),
            cache_read_tokens=_sub(report, "input_tokens_details", "cached_tokens"),
            reasoning_tokens=_sub(report, "output_tokens_details", "reasoning_tokens"),
        )
    return None


@attrs.define
class _Open:
    """A span being built; frozen into a `SpanRecord` when it ends."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: str
    start: datetime | None
    attributes: dict[str, Any]
    events: list[SpanEvent] = attrs.Factory(list)
    links: tuple[SpanLink, ...] = ()
    status: str = UNSET
    status_message: str = ""
    output: list[str] = attrs.Factory(list)
    tool_calls: int = 0

    def close(self, end: datetime | None) -> SpanRecord:
        return SpanRecord(
            trace_id=self.trace_id,
            span_id=self.span_id,
            parent_span_id=self.parent_span_id,
            name=self.name,
            kind=self.kind,
            start=self.start,
            end=end,
            attributes=tuple(self.attributes.items()),
            events=tuple(self.events),
            links=self.links,
            status=self.status,
            status_message=self.status_message,
        )


def _messages(role: str, texts: Iterable[str]) -> str:
    parts = [{"type": "text", "content": t} for t in texts]
    return orjson.dumps([{"role": role, "parts": parts}]).decode()


class SpanFolder:
    """Folds one session's events, in seq order, into spans; `feed` returns the spans each
    event finishes, so a live exporter and an offline export share one fold.

    ``parent`` is the parent session's spawn span (``(trace_id, span_id)``) when this
    session is a child: each of its turns then links to it. ``capture_content`` adds
    message text and tool arguments and results (the standard capture switch decides it).
    """

    def __init__(
        self,
        session_id: str,
        *,
        capture_content: bool = False,
        parent: tuple[str, str] | None = None,
    ) -> None:
        self.session_id = session_id
        self.capture_content = capture_content
        self.parent = parent
        self.metadata: dict[str, str] = {}
        self._turn: _Open | None = None
        self._chats: dict[int, _Open] = {}
        self._last_chat: _Open | None = None
        self._chat_order: list[_Open] = []
        self._finished_chats: list[tuple[_Open, datetime | None]] = []
        self._tools: dict[str, _Open] = {}
        self._tool_by_call: dict[int, _Open] = {}
        self._children: dict[str, _Open] = {}
        self._user_text: list[str] = []

    # -- public ---------------------------------------------------------------------------

    def spawn_span(self, child_id: str) -> tuple[str, str] | None:
        """The (trace id, span id) of the spawn of ``child_id`` if it is still open."""
        s = self._children.get(child_id)
        return (s.trace_id, s.span_id) if s is not None else None

    def feed(self, ev: Event) -> list[SpanRecord]:
        kind = ev.kind
        if ev.goal and ev.goal != self.session_id:
            # A child's events mirrored onto this stream (attributed by goal) are its own
            # trace's, folded from its stream; here they would end this session's turn early
            # (the child's turn.completed) and count its model calls twice.
            return []
        if kind == Kind.PROPERTIES:
            self.metadata = reduce_metadata(self.metadata, ev)
            return []
        handler = _HANDLERS.get(kind)
        return handler(self, ev) if handler is not None else []

    # -- shared pieces ----------------------------------------------------------------------

    def _model(self) -> str:
        return model_value(self.metadata, MODEL_NAME)[1] or ""

    def _provider(self) -> str:
        provider = model_value(self.metadata, MODEL_PROVIDER)[1] or "scripted"
        return PROVIDER_NAMES.get(provider, provider)

    def _common(self, operation: str) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            GEN_AI_OPERATION_NAME: operation,
            GEN_AI_PROVIDER_NAME: self._provider(),
        }
        model = self._model()
        if model:
            attributes[GEN_AI_REQUEST_MODEL] = model
        attributes[GEN_AI_CONVERSATION_ID] = self.session_id
        return attributes

    def _trace(self, ev: Event) -> tuple[str, str]:
        if self._turn is not None:
            return self._turn.trace_id, self._turn.span_id
        return trace_id_for(self.session_id, ev.seq), ""

    # -- handlers -------------------------------------------------------------------------

    def _user_message(self, ev: Event) -> list[SpanRecord]:
        if self.capture_content and ev.text:
            self._user_text.append(ev.text)
        return []

    def _turn_started(self, ev: Event) -> list[SpanRecord]:
        out = self._end_turn(ev, "superseded", None) if self._turn is not None else []
        attributes = self._common("invoke_agent")
        attributes[GEN_AI_AGENT_ID] = self.session_id
        attributes[GEN_AI_AGENT_NAME] = "vertebra"
        attributes[VERTEBRA_TURN] = ev.turn
        attributes[VERTEBRA_SEQ] = ev.seq
        if self._user_text:
            attributes[GEN_AI_INPUT_MESSAGES] = _messages("user", self._user_text)
            self._user_text = []
        links: tuple[SpanLink, ...] = ()
        if self.parent is not None:
            links = (
                SpanLink(
                    trace_id=self.parent[0],
                    span_id=self.parent[1],
                    attributes=((VERTEBRA_LINK, "parent"),),
                ),
            )
        self._turn = _Open(
            trace_id=trace_id_for(self.session_id, ev.seq),
            span_id=span_id_for(self.session_id, ev.seq),
            parent_span_id="",
            name="invoke_agent",
            kind=INTERNAL,
            start=ev.time,
            attributes=attributes,
            links=links,
        )
        self._chat_order = []
        self._finished_chats = []
        return out

    def _admitted(self, ev: Event) -> list[SpanRecord]:
        if ev.action == "model" and not ev.tool_use_id:
            return self._chat_started(ev)
        tool = self._tools.get(ev.tool_use_id)
        if tool is not None:
            tool.attributes[VERTEBRA_DECISION] = "admitted"
            tool.attributes[VERTEBRA_CALL] = ev.call
            if ev.trust:
                tool.attributes[VERTEBRA_TRUST] = ev.trust
            self._tool_by_call[ev.call] = tool
        return []

    def _chat_started(self, ev: Event) -> list[SpanRecord]:
        trace_id, parent = self._trace(ev)
        model = self._model()
        attributes = self._common("chat")
        attributes[VERTEBRA_CALL] = ev.call or ev.seq
        chat = _Open(
            trace_id=trace_id,
            span_id=span_id_for(self.session_id, ev.seq),
            parent_span_id=parent,
            name=f"chat {model}" if model else "chat",
            kind=CLIENT,
            start=ev.time,
            attributes=attributes,
        )
        self._chats[ev.call or ev.seq] = chat
        self._chat_order.append(chat)
        self._last_chat = chat
        return []

    def _completed(self, ev: Event) -> list[SpanRecord]:
        chat = self._chats.pop(ev.call, None)
        if chat is not None:
            if ev.fault:
                chat.status, chat.status_message = ERROR, ev.fault
                chat.attributes[ERROR_TYPE] = ev.fault
                chat.attributes[GEN_AI_RESPONSE_FINISH_REASONS] = ("error",)
            return self._chat_done(chat, ev.time)
        tool = self._tool_by_call.get(ev.call)
        if tool is not None and ev.fault:
            tool.attributes[VERTEBRA_FAULT] = ev.fault
        return []

    def _chat_done(self, chat: _Open, end: datetime | None) -> list[SpanRecord]:
        if self.capture_content and chat.output:
            chat.attributes[GEN_AI_OUTPUT_MESSAGES] = _messages("assistant", chat.output)
        if self._turn is None:
            if GEN_AI_RESPONSE_FINISH_REASONS not in chat.attributes:
                chat.attributes[GEN_AI_RESPONSE_FINISH_REASONS] = ()
            return [chat.close(end)]
        # Finish reasons and per-call usage are known only when the turn ends.
        self._finished_chats.append((chat, end))
        return []

    def _rejected(self, ev: Event) -> list[SpanRecord]:
        if ev.action == "model" and not ev.tool_use_id:
            self._chat_started(ev)
            chat = self._chats.pop(ev.call or ev.seq)
            chat.status, chat.status_message = ERROR, ev.fault or "rejected"
            chat.attributes[VERTEBRA_DECISION] = "rejected"
            chat.attributes[ERROR_TYPE] = ev.fault or "rejected"
            chat.attributes[GEN_AI_RESPONSE_FINISH_REASONS] = ("error",)
            return self._chat_done(chat, ev.time)
        tool = self._tools.get(ev.tool_use_id) or self._tool_by_call.get(ev.call)
        if tool is not None:
            tool.attributes[VERTEBRA_DECISION] = "rejected"
            tool.attributes[VERTEBRA_CALL] = ev.call
            tool.attributes[VERTEBRA_FAULT] = ev.fault
            if ev.trust:
                tool.attributes[VERTEBRA_TRUST] = ev.trust
            tool.attributes[ERROR_TYPE] = ev.fault or "rejected"
            tool.status, tool.status_message = ERROR, ev.fault or "rejected"
            self._tool_by_call[ev.call] = tool
        return []

    def _pending(self, ev: Event) -> list[SpanRecord]:
        tool = self._tools.get(ev.tool_use_id)
        if tool is not None:
            tool.attributes[VERTEBRA_DECISION] = "pending"
            tool.attributes[VERTEBRA_CALL] = ev.call
            self._tool_by_call[ev.call] = tool
            tool.events.append(
                SpanEvent(
                    name=EVENT_APPROVAL_REQUESTED,
                    time=ev.time,
                    attributes=((VERTEBRA_CALL, ev.call),),
                )
            )
        return []

    def _approval(self, ev: Event) -> list[SpanRecord]:
        tool = self._tool_by_call.get(ev.call)
        if tool is not None:
            attributes: Attributes = ((VERTEBRA_CALL, ev.call), (VERTEBRA_APPROVED, ev.allowed))
            if ev.reason:
                attributes += ((VERTEBRA_REASON, ev.reason),)
            tool.events.append(SpanEvent(name=EVENT_APPROVAL, time=ev.time, attributes=attributes))
        return []

    def _egress(self, ev: Event) -> list[SpanRecord]:
        tool = self._tools.get(ev.tool_use_id) if ev.tool_use_id else None
        if tool is None and len(self._tools) == 1:
            tool = next(iter(self._tools.values()))
        if tool is not None and ev.host:
            tool.events.append(
                SpanEvent(
                    name=EVENT_EGRESS,
                    time=ev.time,
                    attributes=(
                        (VERTEBRA_EGRESS_HOST, ev.host),
                        (VERTEBRA_EGRESS_ALLOWED, ev.allowed),
                        (VERTEBRA_REASON, ev.reason),
                    ),
                )
            )
        return []

    def _assistant(self, ev: Event) -> list[SpanRecord]:
        if self._last_chat is not None and ev.text:
            self._last_chat.output.append(ev.text)
        return []

    def _tool_call(self, ev: Event) -> list[SpanRecord]:
        trace_id, parent = self._trace(ev)
        if self._last_chat is not None:
            self._last_chat.tool_calls += 1
        attributes: dict[str, Any] = {
            GEN_AI_OPERATION_NAME: "execute_tool",
            GEN_AI_TOOL_NAME: ev.tool,
            GEN_AI_TOOL_CALL_ID: ev.tool_use_id,
            GEN_AI_CONVERSATION_ID: self.session_id,
        }
        if self.capture_content and ev.input:
            attributes[GEN_AI_TOOL_CALL_ARGUMENTS] = ev.input
        self._tools[ev.tool_use_id] = _Open(
            trace_id=trace_id,
            span_id=span_id_for(self.session_id, ev.seq),
            parent_span_id=parent,
            name=f"execute_tool {ev.tool}",
            kind=INTERNAL,
            start=ev.time,
            attributes=attributes,
        )
        return []

    def _tool_result(self, ev: Event) -> list[SpanRecord]:
        tool = self._tools.pop(ev.tool_use_id, None)
        if tool is None:
            return []
        for call in [c for c, t in self._tool_by_call.items() if t is tool]:
            del self._tool_by_call[call]
        if self.capture_content and ev.result:
            tool.attributes[GEN_AI_TOOL_CALL_RESULT] = ev.result
        if ev.is_error and tool.status != ERROR:
            tool.status, tool.status_message = ERROR, "tool_error"
            tool.attributes[ERROR_TYPE] = "tool_error"
        return [tool.close(ev.time)]

    def _turn_completed(self, ev: Event) -> list[SpanRecord]:
        return self._end_turn(ev, "completed", ev.extra.get("providerUsage"))

    def _turn_cancelled(self, ev: Event) -> list[SpanRecord]:
        return self._end_turn(ev, "cancelled", None)

    def _end_turn(self, ev: Event, outcome: str, reports: Any) -> list[SpanRecord]:
        out: list[SpanRecord] = []
        # Whatever is still open was cut off with the turn.
        for tool in self._tools.values():
            tool.attributes[ERROR_TYPE] = "cancelled"
            tool.status, tool.status_message = ERROR, "cancelled"
            out.append(tool.close(ev.time))
        self._tools.clear()
        self._tool_by_call.clear()
        for chat in self._chats.values():
            chat.attributes[ERROR_TYPE] = "cancelled"
            chat.status, chat.status_message = ERROR, "cancelled"
            self._finished_chats.append((chat, ev.time))
        self._chats.clear()
        out.extend(self._close_chats(ev, outcome, reports))
        turn = self._turn
        self._turn = None
        self._last_chat = None
        if turn is None:
            return out
        if ev.kind not in (Kind.TURN_COMPLETED, Kind.TURN_CANCELLED):
            # A turn.started without its end: the log says nothing more about it.
            turn.attributes[VERTEBRA_TURN_OUTCOME] = "superseded"
            out.append(turn.close(ev.time))
            return out
        turn.attributes.update(usage_attributes(ev.usage))
        turn.attributes[VERTEBRA_TURN_OUTCOME] = outcome
        if ev.stop_reason:
            turn.attributes[VERTEBRA_STOP_REASON] = ev.stop_reason
        if ev.reason:
            turn.attributes[VERTEBRA_REASON] = ev.reason
        if ev.stop_reason == "error":
            turn.status, turn.status_message = ERROR, ev.error or "error"
            turn.attributes[ERROR_TYPE] = "error"
        if self.capture_content and ev.text and outcome == "cancelled":
            turn.attributes[GEN_AI_OUTPUT_MESSAGES] = _messages("assistant", [ev.text])
        out.append(turn.close(ev.time))
        return out

    def _close_chats(self, ev: Event, outcome: str, reports: Any) -> list[SpanRecord]:
        finished = self._finished_chats
        self._finished_chats = []
        if not finished:
            return []
        # Each model call's own report, when the turn recorded one per call; a single
        # call spent the whole turn's usage.
        per_call: list[Usage | None] = [None] * len(finished)
        if isinstance(reports, list) and len(reports) == len(finished):
            per_call = [provider_usage(r) for r in reports]
        elif len(finished) == 1 and outcome == "completed":
            per_call = [ev.usage or Usage()]
        out = []
        last = len(finished) - 1
        for i, (chat, end) in enumerate(finished):
            usage = per_call[i]
            if usage is not None:
                chat.attributes.update(usage_attributes(usage))
            if GEN_AI_RESPONSE_FINISH_REASONS not in chat.attributes:
                if chat.tool_calls:
                    reasons: tuple[str, ...] = ("tool_use",)
                elif i == last and outcome == "completed" and ev.stop_reason:
                    reasons = (ev.stop_reason,)
                elif outcome == "cancelled":
                    reasons = ("cancelled",)
                else:
                    reasons = ()
                chat.attributes[GEN_AI_RESPONSE_FINISH_REASONS] = reasons
            out.append(chat.close(end))
        return out

    def _child_spawned(self, ev: Event) -> list[SpanRecord]:
        if not ev.child or ev.child in self._children:
            return []
        trace_id, parent = self._trace(ev)
        attributes = self._common("invoke_agent")
        attributes[GEN_AI_AGENT_ID] = ev.child
        attributes[VERTEBRA_CHILD_ID] = ev.child
        if ev.goal:
            attributes[VERTEBRA_GOAL] = ev.goal
        if self.capture_content and ev.text:
            attributes[GEN_AI_INPUT_MESSAGES] = _messages("user", [ev.text])
        self._children[ev.child] = _Open(
            trace_id=trace_id,
            span_id=span_id_for(self.session_id, ev.seq),
            parent_span_id=parent,
            name=f"invoke_agent {ev.child}",
            kind=INTERNAL,
            start=ev.time,
            attributes=attributes,
        )
        return []

    def _child_completed(self, ev: Event) -> list[SpanRecord]:
        child = self._children.pop(ev.child, None)
        if child is None:
            return []
        if ev.is_error:
            child.status, child.status_message = ERROR, ev.error or "child failed"
            child.attributes[ERROR_TYPE] = "child_failed"
        if self.capture_content and ev.result:
            child.attributes[GEN_AI_OUTPUT_MESSAGES] = _messages("assistant", [ev.result])
        return [child.close(ev.time)]


_HANDLERS: dict[str, Callable[[SpanFolder, Event], list[SpanRecord]]] = {
    Kind.USER_MESSAGE: SpanFolder._user_message,
    Kind.TURN_STARTED: SpanFolder._turn_started,
    Kind.ACTION_ADMITTED: SpanFolder._admitted,
    Kind.ACTION_COMPLETED: SpanFolder._completed,
    Kind.ACTION_REJECTED: SpanFolder._rejected,
    Kind.ACTION_PENDING: SpanFolder._pending,
    Kind.ACTION_APPROVAL: SpanFolder._approval,
    Kind.EGRESS: SpanFolder._egress,
    Kind.ASSISTANT: SpanFolder._assistant,
    Kind.TOOL_CALL: SpanFolder._tool_call,
    Kind.TOOL_RESULT: SpanFolder._tool_result,
    Kind.TURN_COMPLETED: SpanFolder._turn_completed,
    Kind.TURN_CANCELLED: SpanFolder._turn_cancelled,
    Kind.CHILD_SPAWNED: SpanFolder._child_spawned,
    Kind.CHILD_COMPLETED: SpanFolder._child_completed,
}


def spans_from(
    events: Iterable[Event],
    session_id: str,
    *,
    capture_content: bool = False,
    parent: tuple[str, str] | None = None,
) -> list[SpanRecord]:
    """Every finished span of one session's events, in the order they finished."""
    folder = SpanFolder(session_id, capture_content=capture_content, parent=parent)
    out: list[SpanRecord] = []
    for ev in events:
        out.extend(folder.feed(ev))
    return out


def spawn_links(events: Iterable[Event], session_id: str) -> dict[str, tuple[str, str]]:
    """The spawn span of each child a session started: child id -> (trace id, span id)."""
    out: dict[str, tuple[str, str]] = {}
    turn_trace = ""
    for ev in events:
        if ev.kind == Kind.TURN_STARTED:
            turn_trace = trace_id_for(session_id, ev.seq)
        elif ev.kind in (Kind.TURN_COMPLETED, Kind.TURN_CANCELLED):
            turn_trace = ""
        elif ev.kind == Kind.CHILD_SPAWNED and ev.child and ev.child not in out:
            trace = turn_trace or trace_id_for(session_id, ev.seq)
            out[ev.child] = (trace, span_id_for(session_id, ev.seq))
    return out


def spans_of_tree(
    streams: Mapping[str, Iterable[Event]],
    root: str,
    *,
    capture_content: bool = False,
) -> list[SpanRecord]:
    """The spans of ``root`` and of every descendant found in ``streams`` (session id ->
    events), each child's turns linked to its parent's spawn span."""
    out: list[SpanRecord] = []
    todo: list[tuple[str, tuple[str, str] | None]] = [(root, None)]
    seen: set[str] = set()
    while todo:
        sid, parent = todo.pop(0)
        if sid in seen or sid not in streams:
            continue
        seen.add(sid)
        events = list(streams[sid])
        out.extend(spans_from(events, sid, capture_content=capture_content, parent=parent))
        todo.extend(spawn_links(events, sid).items())
    return out
