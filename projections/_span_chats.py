"""`ChatSpans`: the `SpanFolder` handlers for model calls: one ``chat {model}`` span each,
finished with its usage and finish reasons when the turn ends.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from spine import Event, Usage

from ._span_names import (
    CLIENT,
    ERROR,
    ERROR_TYPE,
    GEN_AI_OUTPUT_MESSAGES,
    GEN_AI_RESPONSE_FINISH_REASONS,
    VERTEBRA_CALL,
    VERTEBRA_FAULT,
)
from ._span_records import (
    SpanRecord,
    _messages,
    _Open,
    provider_usage,
    span_id_for,
    usage_attributes,
)


class ChatSpans:
    """Model-call spans: a mixin of `SpanFolder`, which holds the state."""

    session_id: str
    capture_content: bool
    _turn: _Open | None
    _chats: dict[int, _Open]
    _last_chat: _Open | None
    _chat_order: list[_Open]
    _finished_chats: list[tuple[_Open, datetime | None]]
    _tool_by_call: dict[int, _Open]

    if TYPE_CHECKING:

        def _model(self) -> str: ...

        def _common(self, operation: str) -> dict[str, Any]: ...

        def _trace(self, ev: Event) -> tuple[str, str]: ...

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

    def _in_doubt(self, ev: Event) -> list[SpanRecord]:
        # The call was cut after it started: its span says so, whatever ends it.
        tool = self._tool_by_call.get(ev.call)
        if tool is not None:
            tool.attributes[VERTEBRA_FAULT] = "in_doubt"
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

    def _assistant(self, ev: Event) -> list[SpanRecord]:
        if self._last_chat is not None and ev.text:
            self._last_chat.output.append(ev.text)
        return []

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
