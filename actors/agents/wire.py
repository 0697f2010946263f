"""The provider-neutral shapes of a model call (pure): the conversation sent, the tools
offered, and what a stream yields.

Every wire format is translated into these and out of them, so the tool loop, the
session and the tests see one vocabulary whatever server a turn talks to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from spine import Usage

__all__ = [
    "Message",
    "ModelRequest",
    "ReasoningDelta",
    "Stopped",
    "StreamEvent",
    "TextDelta",
    "ToolCall",
    "ToolCallDone",
    "ToolSpec",
    "UsageSeen",
    "stop_reason",
]


@attrs.frozen(kw_only=True)
class ToolCall:
    """A tool call the model asked for. ``arguments`` is the JSON text as the model sent
    it; ``error`` says why the call cannot run (arguments that do not parse, no name)."""

    id: str
    name: str
    arguments: str = "{}"
    error: str = ""


@attrs.frozen(kw_only=True)
class Message:
    """One conversation message. ``role`` is ``system``, ``user``, ``assistant`` or
    ``tool`` (a tool's result, answering ``tool_use_id``). ``thinking`` keeps a provider's
    signed reasoning blocks within one turn's tool loop (Anthropic requires them back)."""

    role: str
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_use_id: str = ""
    tool_name: str = ""
    is_error: bool = False
    thinking: tuple[tuple[str, str], ...] = ()


@attrs.frozen(kw_only=True)
class ToolSpec:
    """A tool as offered to the model: a name, what it is for, JSON-schema parameters."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@attrs.frozen(kw_only=True)
class ModelRequest:
    """One model call: the settings of the turn and the conversation so far."""

    model: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    system: str | None = None
    temperature: float | None = None
    max_output_tokens: int | None = None
    thinking_level: str = "off"
    include_usage: bool = True


@attrs.frozen
class TextDelta:
    text: str


@attrs.frozen
class ReasoningDelta:
    text: str


@attrs.frozen
class ToolCallDone:
    call: ToolCall


@attrs.frozen
class UsageSeen:
    """The usage of this model call so far (the last one seen wins), normalised, with the
    provider's own report beside it."""

    usage: Usage
    raw: Mapping[str, Any]


@attrs.frozen
class Stopped:
    """The model call ended; ``reason`` is normalised (`stop_reason`)."""

    reason: str


StreamEvent = TextDelta | ReasoningDelta | ToolCallDone | UsageSeen | Stopped

# Each format names the same few endings its own way; the session stores one spelling.
_STOP = {
    "stop": "end_turn",
    "end_turn": "end_turn",
    "completed": "end_turn",
    "stop_sequence": "stop_sequence",
    "length": "max_tokens",
    "max_tokens": "max_tokens",
    "max_output_tokens": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "tool_use": "tool_use",
    "content_filter": "refusal",
    "refusal": "refusal",
    "pause_turn": "pause_turn",
}


def stop_reason(raw: str | None) -> str:
    """The stored spelling of a provider's finish reason (unknown ones pass through)."""
    if not raw:
        return "end_turn"
    return _STOP.get(raw, raw)
