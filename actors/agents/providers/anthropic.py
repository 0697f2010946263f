"""The Anthropic Messages API (``POST {base}/messages``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from ..anthropic_stream import AnthropicAccumulator
from ..wire import ModelRequest, ToolCall
from .base import WireFormat

__all__ = ["ANTHROPIC_VERSION", "FORMAT", "anthropic_body", "anthropic_headers", "anthropic_whole"]

ANTHROPIC_VERSION = "2023-06-01"
# Anthropic asks for an explicit thinking budget and an output cap above it.
_THINKING_BUDGET = {"low": 1024, "medium": 4096, "high": 16384}
_ANTHROPIC_DEFAULT_MAX = 4096


def anthropic_headers(api_key: str | None) -> dict[str, str]:
    h = {
        "content-type": "application/json",
        "accept": "text/event-stream",
        "anthropic-version": ANTHROPIC_VERSION,
    }
    if api_key:
        h["x-api-key"] = api_key
    return h


def _args_object(call: ToolCall) -> Any:
    try:
        return orjson.loads(call.arguments)
    except orjson.JSONDecodeError:
        return {}


def anthropic_body(req: ModelRequest) -> dict[str, Any]:
    messages = _anthropic_messages(req)
    max_tokens = req.max_output_tokens or _ANTHROPIC_DEFAULT_MAX
    body: dict[str, Any] = {"model": req.model, "messages": messages, "stream": True}
    if req.system:
        body["system"] = req.system
    if req.tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
            for t in req.tools
        ]
    if req.thinking_level != "off":
        budget = _THINKING_BUDGET[req.thinking_level]
        body["thinking"] = {"type": "enabled", "budget_tokens": budget}
        max_tokens = max(max_tokens, budget + 1024)
    elif req.temperature is not None:
        # Anthropic refuses a temperature together with extended thinking.
        body["temperature"] = min(req.temperature, 1.0)
    body["max_tokens"] = max_tokens
    return body


def _anthropic_messages(req: ModelRequest) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        # Tool results travel in a user turn; consecutive turns of one role are merged.
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": blocks})

    for m in req.messages:
        if m.role == "tool":
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": m.tool_use_id,
                "content": m.text,
            }
            if m.is_error:
                block["is_error"] = True
            add("user", [block])
        elif m.role == "assistant":
            blocks: list[dict[str, Any]] = [
                {"type": "thinking", "thinking": t, "signature": sig} for t, sig in m.thinking
            ]
            if m.text:
                blocks.append({"type": "text", "text": m.text})
            blocks.extend(
                {"type": "tool_use", "id": c.id, "name": c.name, "input": _args_object(c)}
                for c in m.tool_calls
            )
            if blocks:
                add("assistant", blocks)
        else:
            add("user", [{"type": "text", "text": m.text}])
    return messages


def anthropic_whole(body: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    if body.get("type") == "error":
        return [dict(body)]
    content = body.get("content")
    if not isinstance(content, list):
        return None
    out: list[dict[str, Any]] = [{"type": "message_start", "message": {"usage": {}}}]
    for i, block in enumerate(content):
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "tool_use":
            start = {k: v for k, v in block.items() if k != "input"}
            out.append({"type": "content_block_start", "index": i, "content_block": start})
            args = orjson.dumps(block.get("input") or {}).decode()
            delta = {"type": "input_json_delta", "partial_json": args}
            out.append({"type": "content_block_delta", "index": i, "delta": delta})
        elif kind == "thinking":
            start = {k: v for k, v in block.items() if k != "thinking"}
            out.append({"type": "content_block_start", "index": i, "content_block": start})
            delta = {"type": "thinking_delta", "thinking": block.get("thinking") or ""}
            out.append({"type": "content_block_delta", "index": i, "delta": delta})
        else:
            out.append({"type": "content_block_start", "index": i, "content_block": dict(block)})
    out.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": body.get("stop_reason")},
            "usage": body.get("usage") or {},
        }
    )
    return out


FORMAT = WireFormat(
    name="anthropic",
    default_base_url="https://api.anthropic.com/v1",
    path="/messages",
    body=anthropic_body,
    headers=anthropic_headers,
    accumulator=AnthropicAccumulator,
    whole=anthropic_whole,
)
