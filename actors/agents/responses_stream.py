"""`ResponsesAccumulator` (pure): OpenAI Responses API stream events to `StreamEvent`s."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .chunks import ProviderStreamError, _get, _settle_call, responses_usage
from .wire import (
    ReasoningDelta,
    Stopped,
    StreamEvent,
    TextDelta,
    ToolCallDone,
    UsageSeen,
    stop_reason,
)

__all__ = ["ResponsesAccumulator"]


class ResponsesAccumulator:
    """OpenAI Responses API stream events to stream events."""

    def __init__(self) -> None:
        self._calls: dict[str, dict[str, Any]] = {}
        self._order: list[str] = []
        self._usage: Mapping[str, Any] | None = None
        self._status: str | None = None
        self._incomplete: str | None = None

    def _call(self, key: str) -> dict[str, Any]:
        c = self._calls.get(key)
        if c is None:
            c = self._calls[key] = {"call_id": "", "name": "", "args": [], "done": None}
            self._order.append(key)
        return c

    def feed(self, event: Mapping[str, Any]) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        if not isinstance(event, Mapping):
            return out
        kind = event.get("type")
        if kind == "response.output_text.delta":
            d = event.get("delta")
            if isinstance(d, str) and d:
                out.append(TextDelta(d))
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            d = event.get("delta")
            if isinstance(d, str) and d:
                out.append(ReasoningDelta(d))
        elif kind in ("response.output_item.added", "response.output_item.done"):
            item = event.get("item")
            if isinstance(item, Mapping) and item.get("type") == "function_call":
                c = self._call(str(item.get("id") or event.get("output_index")))
                c["call_id"] = c["call_id"] or item.get("call_id") or ""
                c["name"] = c["name"] or item.get("name") or ""
                if kind == "response.output_item.done" and isinstance(item.get("arguments"), str):
                    c["done"] = item["arguments"]
        elif kind == "response.function_call_arguments.delta":
            d = event.get("delta")
            if isinstance(d, str):
                self._call(str(event.get("item_id") or event.get("output_index")))["args"].append(d)
        elif kind == "response.function_call_arguments.done":
            a = event.get("arguments")
            if isinstance(a, str):
                self._call(str(event.get("item_id") or event.get("output_index")))["done"] = a
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            resp = event.get("response")
            if isinstance(resp, Mapping):
                if isinstance(resp.get("usage"), Mapping):
                    self._usage = resp["usage"]
                    out.append(UsageSeen(responses_usage(resp["usage"]), resp["usage"]))
                self._status = resp.get("status") or kind.split(".")[-1]
                reason = _get(resp.get("incomplete_details"), "reason")
                self._incomplete = reason if isinstance(reason, str) else None
                if kind == "response.failed":
                    err = resp.get("error")
                    raise ProviderStreamError(
                        f"the response failed: {_get(err, 'message') or err or 'no reason given'}"
                    )
        elif kind == "error":
            raise ProviderStreamError(
                f"the server reported an error: {event.get('message') or event.get('code')}"
            )
        return out

    def finish(self) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        for i, key in enumerate(self._order):
            c = self._calls[key]
            args = c["done"] if c["done"] is not None else "".join(c["args"])
            out.append(ToolCallDone(_settle_call(i, c["call_id"], c["name"], args)))
        if self._order:
            reason = "tool_use"
        elif self._status == "incomplete":
            reason = stop_reason(self._incomplete or "max_output_tokens")
        else:
            reason = "end_turn"
        out.append(Stopped(reason))
        return out
