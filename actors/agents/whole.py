"""A whole (non-streamed) answer read as the stream it stands for (pure).

A server may answer a streaming request with one JSON body (a proxy that buffers, a
server that ignores ``stream``). Each format's whole response is turned into the events
its stream would have carried, so the same accumulator settles text, tool calls, stop
reason and usage; a body that is none of them is refused by name, never stored as an
empty answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

__all__ = ["as_stream"]


def as_stream(fmt: str, body: Any) -> list[dict[str, Any]] | None:
    """The stream events equivalent to ``body`` in wire format ``fmt``; None when the
    body is not that format's response."""
    if not isinstance(body, Mapping):
        return None
    if fmt == "openai":
        return _chat(body)
    if fmt == "responses":
        return _responses(body)
    return _anthropic(body)


def _chat(body: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    if "error" in body:
        return [dict(body)]
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return None
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, Mapping):
        return None
    delta: dict[str, Any] = {}
    for key in ("content", "reasoning_content", "reasoning"):
        if isinstance(message.get(key), str):
            delta[key] = message[key]
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        delta["tool_calls"] = [
            {**c, "index": i} for i, c in enumerate(calls) if isinstance(c, Mapping)
        ]
    out: list[dict[str, Any]] = [
        {"choices": [{"index": 0, "delta": delta, "finish_reason": choice.get("finish_reason")}]}
    ]
    if isinstance(body.get("usage"), Mapping):
        out.append({"choices": [], "usage": body["usage"]})
    return out


def _responses(body: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    if isinstance(body.get("error"), Mapping) and body.get("status") != "completed":
        return [{"type": "response.failed", "response": dict(body)}]
    output = body.get("output")
    if not isinstance(output, list):
        return None
    out: list[dict[str, Any]] = []
    for i, item in enumerate(output):
        if not isinstance(item, Mapping):
            continue
        if item.get("type") == "message":
            for part in item.get("content") or ():
                if isinstance(part, Mapping) and part.get("type") == "output_text":
                    out.append({"type": "response.output_text.delta", "delta": part.get("text")})
        elif item.get("type") == "function_call":
            out.append({"type": "response.output_item.done", "output_index": i, "item": item})
    status = body.get("status") or "completed"
    kind = "response.incomplete" if status == "incomplete" else "response.completed"
    out.append({"type": kind, "response": dict(body)})
    return out


def _anthropic(body: Mapping[str, Any]) -> list[dict[str, Any]] | None:
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
