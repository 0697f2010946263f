"""Traces from the log: a session's events folded into spans of the OpenTelemetry GenAI
semantic conventions, as plain records (no OpenTelemetry import here; `actors.otel` turns
them into OTLP).

One ``invoke_agent`` span per turn (INTERNAL, the root of its own trace), one
``chat {model}`` span per model call (CLIENT) and one ``execute_tool {name}`` span per tool
call under it, and one ``invoke_agent {child}`` span per spawned child session; a child's
own turns carry a link to that span. Ids are hashes of the session id and the seq of the
event that opened the span, and times are the events' times, so the same log always yields
the same trace, byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from spine import Event, Kind

from ._metadata import MODEL_NAME, MODEL_PROVIDER, model_value, reduce_metadata
from ._span_actions import ActionSpans
from ._span_chats import ChatSpans
from ._span_names import (
    ERROR,
    ERROR_TYPE,
    GEN_AI_AGENT_ID,
    GEN_AI_AGENT_NAME,
    GEN_AI_CONVERSATION_ID,
    GEN_AI_INPUT_MESSAGES,
    GEN_AI_OPERATION_NAME,
    GEN_AI_OUTPUT_MESSAGES,
    GEN_AI_PROVIDER_NAME,
    GEN_AI_REQUEST_MODEL,
    INTERNAL,
    PROVIDER_NAMES,
    VERTEBRA_LINK,
    VERTEBRA_REASON,
    VERTEBRA_SEQ,
    VERTEBRA_STOP_REASON,
    VERTEBRA_TURN,
    VERTEBRA_TURN_OUTCOME,
)
from ._span_records import SpanEvent as SpanEvent
from ._span_records import SpanLink as SpanLink
from ._span_records import SpanRecord as SpanRecord
from ._span_records import _messages, _Open
from ._span_records import provider_usage as provider_usage
from ._span_records import span_id_for as span_id_for
from ._span_records import trace_id_for as trace_id_for
from ._span_records import usage_attributes as usage_attributes


class SpanFolder(ChatSpans, ActionSpans):
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

    # -- handlers: the turn ---------------------------------------------------------------

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


_HANDLERS: dict[str, Callable[[SpanFolder, Event], list[SpanRecord]]] = {
    Kind.USER_MESSAGE: SpanFolder._user_message,
    Kind.TURN_STARTED: SpanFolder._turn_started,
    Kind.ACTION_ADMITTED: SpanFolder._admitted,
    Kind.ACTION_COMPLETED: SpanFolder._completed,
    Kind.ACTION_IN_DOUBT: SpanFolder._in_doubt,
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
