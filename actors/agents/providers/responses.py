"""The OpenAI Responses API (``POST {base}/responses``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..responses_stream import ResponsesAccumulator
from ..wire import ModelRequest
from .base import WireFormat, bearer_headers

__all__ = ["FORMAT", "responses_body", "responses_whole"]


def _message_item(role: str, part: str, text: str) -> dict[str, Any]:
    # Every input item names its type: servers that read the items strictly (llama.cpp's)
    # refuse one without it as soon as function calls are mixed in.
    return {"type": "message", "role": role, "content": [{"type": part, "text": text}]}


def responses_body(req: ModelRequest) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for m in req.messages:
        if m.role == "tool":
            items.append(
                {"type": "function_call_output", "call_id": m.tool_use_id, "output": m.text}
            )
        elif m.role == "assistant":
            if m.text:
                items.append(_message_item("assistant", "output_text", m.text))
            for c in m.tool_calls:
                items.append(
                    {
                        "type": "function_call",
                        "call_id": c.id,
                        "name": c.name,
                        "arguments": c.arguments,
                    }
                )
        else:
            items.append(_message_item(m.role, "input_text", m.text))
    body: dict[str, Any] = {"model": req.model, "input": items, "stream": True, "store": False}
    if req.system:
        body["instructions"] = req.system
    if req.tools:
        body["tools"] = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": dict(t.parameters),
            }
            for t in req.tools
        ]
    if req.temperature is not None:
        body["temperature"] = req.temperature
    if req.max_output_tokens is not None:
        body["max_output_tokens"] = req.max_output_tokens
    if req.thinking_level != "off":
        body["reasoning"] = {"effort": req.thinking_level}
    return body


def responses_whole(body: Mapping[str, Any]) -> list[dict[str, Any]] | None:
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


FORMAT = WireFormat(
    name="responses",
    default_base_url="https://api.openai.com/v1",
    path="/responses",
    body=responses_body,
    headers=bearer_headers,
    accumulator=ResponsesAccumulator,
    whole=responses_whole,
)
