"""The conversation a model call carries (pure), rebuilt from the session's own events.

Each wire format's request body, headers and endpoint live in its own module under
`actors.agents.providers`; the body builders are named here too, where they were first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from .providers.anthropic import anthropic_body
from .providers.openai import chat_body
from .providers.responses import responses_body
from .wire import Message, ToolCall

__all__ = [
    "anthropic_body",
    "chat_body",
    "conversation",
    "responses_body",
    "resume_point",
]


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
