"""The three wire formats' requests (pure): the conversation, rebuilt from the session's
own events, and the tools, each in the shape its server expects.

- ``openai``: chat completions (``POST {base}/chat/completions``), the protocol of vLLM,
  llama.cpp's server, Ollama and hosted APIs;
- ``responses``: the OpenAI Responses API (``POST {base}/responses``);
- ``anthropic``: the Messages API (``POST {base}/messages``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from .wire import Message, ModelRequest, ToolCall

__all__ = [
    "DEFAULT_BASE_URLS",
    "anthropic_body",
    "chat_body",
    "conversation",
    "endpoint",
    "headers",
    "responses_body",
]

DEFAULT_BASE_URLS = {
    "openai": "https://api.openai.com/v1",
    "responses": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com/v1",
}
_PATHS = {"openai": "/chat/completions", "responses": "/responses", "anthropic": "/messages"}
ANTHROPIC_VERSION = "2023-06-01"
# Anthropic asks for an explicit thinking budget and an output cap above it.
_THINKING_BUDGET = {"low": 1024, "medium": 4096, "high": 16384}
_ANTHROPIC_DEFAULT_MAX = 4096


def endpoint(provider: str, base_url: str | None) -> str:
    return (base_url or DEFAULT_BASE_URLS[provider]).rstrip("/") + _PATHS[provider]


def headers(provider: str, api_key: str | None) -> dict[str, str]:
    h = {"content-type": "application/json", "accept": "text/event-stream"}
    if provider == "anthropic":
        h["anthropic-version"] = ANTHROPIC_VERSION
        if api_key:
            h["x-api-key"] = api_key
    elif api_key:
        h["authorization"] = f"Bearer {api_key}"
    return h


def _loads(text: str) -> dict[str, Any]:
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {}
    return obj if isinstance(obj, dict) else {}


def resume_point(
    history: Sequence[tuple[str, str]],
) -> tuple[tuple[Message, ...], tuple[ToolCall, ...]]:
    """Where a turn paused for an approval stands: the conversation so far, and the tool
    calls of its last model response that have no result yet (to be answered first)."""
    msgs = _messages(history)
    answered = {m.tool_use_id for m in msgs if m.role == "tool"}
    at = max((i for i, m in enumerate(msgs) if m.role == "assistant" and m.tool_calls), default=-1)
    if at < 0:
        return _paired(msgs, answered), ()
    # Only results after the response count: ids may repeat across turns.
    after = {m.tool_use_id for m in msgs[at + 1 :] if m.role == "tool"}
    todo = tuple(c for c in msgs[at].tool_calls if c.id not in after)
    # The calls still open stay in the conversation: their results are on the way.
    return _paired(msgs, answered | {c.id for c in todo}), todo


def conversation(history: Sequence[tuple[str, str]], text: str) -> tuple[Message, ...]:
    """The messages a model gets for a turn that opens with ``text``, from the session's
    history (``user``, ``assistant``, ``tool.call``, ``tool.result`` entries).

    A tool call whose result never came (a crash cut the turn) and a result whose call
    fell out of the kept history are left out: every server refuses a dangling one.
    """
    try:
        # Only things said, all seen before (the common case): each entry is its key.
        msgs = [_SAID[entry] for entry in history]
    except (KeyError, TypeError):
        msgs = _messages(history)
        msgs.append(_said("user", text))
        return _paired(msgs)
    msgs.append(_said("user", text))
    return tuple(msgs)  # no call and no result: nothing to pair


#: Messages made from history entries, kept for the next model call: the conversation is
#: rebuilt for every call from the session's kept history (up to 200 entries), nearly all
#: of it seen by the call before. Making them anew was 170 us of a turn at 200 entries.
_SAID: dict[tuple[str, str], Message] = {}
_SAID_LIMIT = 4096


def _said(role: str, text: str) -> Message:
    key = (role, text)
    m = _SAID.get(key)
    if m is None:
        if len(_SAID) >= _SAID_LIMIT:
            _SAID.clear()
        m = _SAID[key] = Message(role=role, text=text)
    return m


def _messages(history: Sequence[tuple[str, str]]) -> list[Message]:
    msgs: list[Message] = []
    for role, body in history:
        if role == "user" or role == "assistant":
            msgs.append(_said(role, body))
        elif role == "tool.call":
            obj = _loads(body)
            call = ToolCall(
                id=str(obj.get("id", "")),
                name=str(obj.get("name", "")),
                arguments=str(obj.get("input") or "{}"),
            )
            last = msgs[-1] if msgs else None
            if last is not None and last.role == "assistant":
                msgs[-1] = Message(
                    role="assistant", text=last.text, tool_calls=(*last.tool_calls, call)
                )
            else:
                msgs.append(Message(role="assistant", tool_calls=(call,)))
        elif role == "tool.result":
            obj = _loads(body)
            msgs.append(
                Message(
                    role="tool",
                    text=str(obj.get("result", "")),
                    tool_use_id=str(obj.get("id", "")),
                    tool_name=str(obj.get("name", "")),
                    is_error=bool(obj.get("isError", False)),
                )
            )
    return msgs


def _paired(msgs: list[Message], answered: set[str] | None = None) -> tuple[Message, ...]:
    if answered is None:
        answered = {m.tool_use_id for m in msgs if m.role == "tool"}
    asked: set[str] = set()
    out: list[Message] = []
    for m in msgs:
        if m.role == "assistant" and m.tool_calls:
            calls = tuple(c for c in m.tool_calls if c.id in answered)
            asked.update(c.id for c in calls)
            if not calls and not m.text:
                continue
            m = Message(role="assistant", text=m.text, tool_calls=calls, thinking=m.thinking)
        elif m.role == "tool" and m.tool_use_id not in asked:
            continue
        out.append(m)
    return tuple(out)


def _args_object(call: ToolCall) -> Any:
    try:
        return orjson.loads(call.arguments)
    except orjson.JSONDecodeError:
        return {}


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
