"""Chat completions (``POST {base}/chat/completions``): the protocol of vLLM, llama.cpp's
server, Ollama and hosted APIs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..accumulate import ChatAccumulator
from ..wire import ModelRequest
from .base import WireFormat, bearer_headers

__all__ = ["FORMAT", "chat_body", "chat_whole"]


def chat_body(req: ModelRequest) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    if req.system:
        messages.append({"role": "system", "content": req.system})
    for m in req.messages:
        if m.role == "tool":
            messages.append({"role": "tool", "tool_call_id": m.tool_use_id, "content": m.text})
        elif m.role == "assistant" and m.tool_calls:
            messages.append(
                {
                    "role": "assistant",
                    "content": m.text or None,
                    "tool_calls": [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments},
                        }
                        for c in m.tool_calls
                    ],
                }
            )
        else:
            messages.append({"role": m.role, "content": m.text})
    body: dict[str, Any] = {"model": req.model, "messages": messages, "stream": True}
    if req.include_usage:
        body["stream_options"] = {"include_usage": True}
    if req.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": dict(t.parameters),
                },
            }
            for t in req.tools
        ]
    if req.temperature is not None:
        body["temperature"] = req.temperature
    if req.max_output_tokens is not None:
        body["max_tokens"] = req.max_output_tokens
    if req.thinking_level != "off":
        body["reasoning_effort"] = req.thinking_level
    return body


def chat_whole(body: Mapping[str, Any]) -> list[dict[str, Any]] | None:
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


FORMAT = WireFormat(
    name="openai",
    default_base_url="https://api.openai.com/v1",
    path="/chat/completions",
    body=chat_body,
    headers=bearer_headers,
    accumulator=ChatAccumulator,
    whole=chat_whole,
)
