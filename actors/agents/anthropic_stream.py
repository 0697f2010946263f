"""`AnthropicAccumulator` (pure): Anthropic Messages stream events to `StreamEvent`s."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .chunks import ProviderStreamError, _get, _settle_call, anthropic_usage
from .wire import (
    ReasoningDelta,
    Stopped,
    StreamEvent,
    TextDelta,
    ToolCallDone,
    UsageSeen,
    stop_reason,
)

__all__ = ["AnthropicAccumulator"]


class AnthropicAccumulator:
    """Anthropic Messages stream events to stream events."""

    def __init__(self) -> None:
        self._blocks: dict[int, dict[str, Any]] = {}
        self._order: list[int] = []
        self._usage: dict[str, Any] = {}
        self._stop: str | None = None
        self.thinking: list[tuple[str, str]] = []

    def feed(self, event: Mapping[str, Any]) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        if not isinstance(event, Mapping):
            return out
        kind = event.get("type")
        if kind == "error":
            err = event.get("error")
            what = f"{_get(err, 'type') or ''} {_get(err, 'message') or err}".strip()
            raise ProviderStreamError(f"the server reported an error: {what}")
        if kind == "message_start":
            if self._merge_usage(_get(event.get("message"), "usage")):
                out.append(UsageSeen(anthropic_usage(self._usage), dict(self._usage)))
        elif kind == "content_block_start":
            self._block_start(event, out)
        elif kind == "content_block_delta":
            self._block_delta(event, out)
        elif kind == "message_delta":
            stop = _get(event.get("delta"), "stop_reason")
            if isinstance(stop, str) and stop:
                self._stop = stop
            # Cumulative: each report restates the totals so far.
            if self._merge_usage(event.get("usage")):
                out.append(UsageSeen(anthropic_usage(self._usage), dict(self._usage)))
        return out

    def _block_start(self, event: Mapping[str, Any], out: list[StreamEvent]) -> None:
        index = event.get("index")
        block = event.get("content_block")
        if isinstance(index, int) and isinstance(block, Mapping):
            self._blocks[index] = {
                "type": block.get("type"),
                "id": block.get("id") or "",
                "name": block.get("name") or "",
                "json": [],
                "thinking": [],
                "signature": block.get("signature") or "",
            }
            self._order.append(index)
            text = block.get("text")
            if block.get("type") == "text" and isinstance(text, str) and text:
                out.append(TextDelta(text))

    def _block_delta(self, event: Mapping[str, Any], out: list[StreamEvent]) -> None:
        delta = event.get("delta")
        b = self._blocks.get(event.get("index"))  # type: ignore[arg-type]
        if isinstance(delta, Mapping):
            dt = delta.get("type")
            if dt == "text_delta" and isinstance(delta.get("text"), str):
                if delta["text"]:
                    out.append(TextDelta(delta["text"]))
            elif dt == "thinking_delta" and isinstance(delta.get("thinking"), str):
                if b is not None:
                    b["thinking"].append(delta["thinking"])
                if delta["thinking"]:
                    out.append(ReasoningDelta(delta["thinking"]))
            elif dt == "input_json_delta" and b is not None:
                part = delta.get("partial_json")
                if isinstance(part, str):
                    b["json"].append(part)
            elif dt == "signature_delta" and b is not None:
                sig = delta.get("signature")
                if isinstance(sig, str):
                    b["signature"] += sig

    def _merge_usage(self, usage: Any) -> bool:
        if not isinstance(usage, Mapping) or not usage:
            return False
        for k, v in usage.items():
            if v is not None:
                self._usage[k] = v
        return True

    def finish(self) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        for index in self._order:
            b = self._blocks[index]
            if b["type"] == "tool_use":
                args = "".join(b["json"])
                out.append(ToolCallDone(_settle_call(index, b["id"], b["name"], args)))
            elif b["type"] == "thinking":
                self.thinking.append(("".join(b["thinking"]), b["signature"]))
        out.append(Stopped(stop_reason(self._stop)))
        return out
