"""`ActionSpans`: the `SpanFolder` handlers for what a turn does besides calling the model:
tool calls and their governance (admission, rejection, approval, egress), and the spans of
spawned children.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from spine import Event

from ._span_names import (
    ERROR,
    ERROR_TYPE,
    EVENT_APPROVAL,
    EVENT_APPROVAL_REQUESTED,
    EVENT_EGRESS,
    GEN_AI_AGENT_ID,
    GEN_AI_CONVERSATION_ID,
    GEN_AI_INPUT_MESSAGES,
    GEN_AI_OPERATION_NAME,
    GEN_AI_OUTPUT_MESSAGES,
    GEN_AI_RESPONSE_FINISH_REASONS,
    GEN_AI_TOOL_CALL_ARGUMENTS,
    GEN_AI_TOOL_CALL_ID,
    GEN_AI_TOOL_CALL_RESULT,
    GEN_AI_TOOL_NAME,
    GEN_AI_TOOL_TYPE,
    INTERNAL,
    MCP_METHOD_NAME,
    VERTEBRA_APPROVED,
    VERTEBRA_CALL,
    VERTEBRA_CHILD_ID,
    VERTEBRA_DECISION,
    VERTEBRA_EGRESS_ALLOWED,
    VERTEBRA_EGRESS_HOST,
    VERTEBRA_FAULT,
    VERTEBRA_GOAL,
    VERTEBRA_MCP_SERVER,
    VERTEBRA_REASON,
    VERTEBRA_TRUST,
)
from ._span_records import Attributes, SpanEvent, SpanRecord, _messages, _Open, span_id_for


class ActionSpans:
    """Tool, governance and child spans: a mixin of `SpanFolder`, which holds the state."""

    session_id: str
    capture_content: bool
    _chats: dict[int, _Open]
    _last_chat: _Open | None
    _tools: dict[str, _Open]
    _tool_by_call: dict[int, _Open]
    _children: dict[str, _Open]

    if TYPE_CHECKING:

        def _common(self, operation: str) -> dict[str, Any]: ...

        def _trace(self, ev: Event) -> tuple[str, str]: ...

        def _chat_started(self, ev: Event) -> list[SpanRecord]: ...

        def _chat_done(self, chat: _Open, end: datetime | None) -> list[SpanRecord]: ...

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
        mcp = ev.extra.get("mcp")
        if isinstance(mcp, Mapping):
            # A tool of an MCP server: the GenAI conventions' extension tool type.
            tool.attributes[GEN_AI_TOOL_TYPE] = "extension"
            tool.attributes[MCP_METHOD_NAME] = "tools/call"
            tool.attributes[VERTEBRA_MCP_SERVER] = str(mcp.get("server", ""))
        if ev.is_error and tool.status != ERROR:
            tool.status, tool.status_message = ERROR, "tool_error"
            tool.attributes[ERROR_TYPE] = "tool_error"
        return [tool.close(ev.time)]

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
