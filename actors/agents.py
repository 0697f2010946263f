"""Agents and the factory that builds one per turn from session metadata.

A turn's agent is built fresh from the session's metadata, so replaying the stream
(metadata changes are events) reproduces every turn's exact model configuration.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

import attrs

from spine import Usage

#: The seed's metadata keys: slash commands write them, the factory reads them.
MODEL_NAME = "ore.model.name"
MODEL_THINKING_LEVEL = "ore.model.thinking_level"
MODEL_TEMPERATURE = "ore.model.temperature"
MODEL_MAX_OUTPUT_TOKENS = "ore.model.max_output_tokens"
#: Streams written before the seed's keys were adopted spell them without ``ore.``; they are
#: still read (the seed's spelling wins when both are set).
LEGACY_PREFIX = "model."

THINKING_LEVELS = ("off", "low", "medium", "high")


class AgentError(Exception):
    """The agent failed the turn; the turn ends with this error."""


class SettingsError(ValueError):
    """A model setting in the session's metadata cannot be used; names the key and value."""


def _setting(metadata: Mapping[str, str], key: str) -> tuple[str, str | None]:
    value = metadata.get(key)
    if value is None:
        legacy = LEGACY_PREFIX + key.removeprefix("ore.model.")
        if legacy in metadata:
            return legacy, metadata[legacy]
    return key, value


def parse_temperature(value: str, key: str = MODEL_TEMPERATURE) -> float:
    try:
        x = float(value)
    except ValueError:
        raise SettingsError(f"{key} must be a number from 0 to 2, got {value!r}") from None
    if not 0.0 <= x <= 2.0:
        raise SettingsError(f"{key} must be a number from 0 to 2, got {value!r}")
    return x


def parse_max_tokens(value: str, key: str = MODEL_MAX_OUTPUT_TOKENS) -> int:
    if not value.strip().isdigit() or int(value) <= 0:
        raise SettingsError(f"{key} must be a positive integer, got {value!r}")
    return int(value)


def parse_thinking(value: str, key: str = MODEL_THINKING_LEVEL) -> str:
    if value not in THINKING_LEVELS:
        raise SettingsError(f"{key} must be one of {', '.join(THINKING_LEVELS)}, got {value!r}")
    return value


#: Parsers of the keys whose values have a shape; slash commands validate with them too.
PARSERS = {
    MODEL_TEMPERATURE: parse_temperature,
    MODEL_MAX_OUTPUT_TOKENS: parse_max_tokens,
    MODEL_THINKING_LEVEL: parse_thinking,
}


@attrs.frozen(kw_only=True)
class AgentSpec:
    """The model configuration of one turn, parsed once from session metadata."""

    model: str = "scripted"
    thinking_level: str = "off"
    temperature: float | None = None
    max_output_tokens: int | None = None

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, str]) -> AgentSpec:
        """The spec the metadata describes; `SettingsError` names a value that cannot be
        used (the turn then ends with that error, the session serves on)."""
        _, name = _setting(metadata, MODEL_NAME)
        tk, thinking = _setting(metadata, MODEL_THINKING_LEVEL)
        pk, temp = _setting(metadata, MODEL_TEMPERATURE)
        mk, max_tokens = _setting(metadata, MODEL_MAX_OUTPUT_TOKENS)
        return cls(
            model=name or "scripted",
            thinking_level=parse_thinking(thinking, tk) if thinking else "off",
            temperature=parse_temperature(temp, pk) if temp else None,
            max_output_tokens=parse_max_tokens(max_tokens, mk) if max_tokens else None,
        )


@attrs.frozen(kw_only=True)
class TurnInput:
    """What an agent gets: the message that opened the turn and the conversation so far."""

    session_id: str
    turn: int
    text: str
    history: tuple[tuple[str, str], ...] = ()
    spec: AgentSpec = AgentSpec()


class TurnOutput(Protocol):
    """Where an agent writes a turn. ``cancelled`` is set when an interrupt arrives:
    the agent should stop at its next chunk."""

    cancelled: threading.Event

    def text(self, delta: str) -> None: ...

    def tool_call(self, tool: str, tool_use_id: str, input_json: str) -> None: ...

    def tool_result(self, tool: str, tool_use_id: str, result: str, is_error: bool) -> None: ...

    def usage(self, usage: Usage) -> None: ...


@runtime_checkable
class Agent(Protocol):
    def run(self, turn: TurnInput, out: TurnOutput) -> str:
        """Run one turn, writing to ``out``; return the stop reason."""
        ...


@runtime_checkable
class AgentFactory(Protocol):
    def build(self, spec: AgentSpec, session_id: str) -> Agent:
        """Build the agent for one turn from the session's metadata-derived spec."""
        ...


class ScriptedAgent:
    """A deterministic agent for tests, benchmarks and the demo.

    The user's text drives it:

    - ``!slow SECONDS TEXT``: stream TEXT a word at a time, SECONDS apart;
    - ``!tool NAME JSON``: call tool NAME with JSON, get the JSON back as its result, then
      answer;
    - ``!fail MESSAGE``: fail the turn with MESSAGE;
    - ``!hang``: block until interrupted (a model call that never answers);
    - anything else: echo it back, prefixed with the model name.
    """

    def __init__(self, spec: AgentSpec) -> None:
        self.spec = spec

    def run(self, turn: TurnInput, out: TurnOutput) -> str:
        text = turn.text
        words_in = len(text.split())
        if text.startswith("!fail"):
            raise AgentError(text[len("!fail") :].strip() or "scripted failure")
        if text.startswith("!hang"):
            out.text("thinking")
            out.cancelled.wait()
            return "cancelled"
        if text.startswith("!tool"):
            parts = text.split(maxsplit=2)
            name = parts[1] if len(parts) > 1 else "echo"
            raw = parts[2] if len(parts) > 2 else "{}"
            try:
                json.loads(raw)
            except ValueError:
                raw = json.dumps({"text": raw})
            use_id = f"toolu_{turn.turn}"
            out.tool_call(name, use_id, raw)
            out.tool_result(name, use_id, raw, False)
            out.text(f"{name} returned {raw}")
            out.usage(Usage(input_tokens=words_in, output_tokens=3))
            return "end_turn"
        delay = 0.0
        if text.startswith("!slow"):
            parts = text.split(maxsplit=2)
            try:
                delay = float(parts[1])
            except (IndexError, ValueError):
                delay = 0.05
            text = parts[2] if len(parts) > 2 else "slow"
        words = f"[{self.spec.model}] {text}".split(" ")
        produced = 0
        for i, word in enumerate(words):
            if out.cancelled.is_set():
                out.usage(Usage(input_tokens=words_in, output_tokens=produced))
                return "cancelled"
            out.text(word if i == 0 else " " + word)
            produced += 1
            out.usage(Usage(input_tokens=words_in, output_tokens=produced))
            if delay and out.cancelled.wait(delay):
                out.usage(Usage(input_tokens=words_in, output_tokens=produced))
                return "cancelled"
        out.usage(Usage(input_tokens=words_in, output_tokens=produced))
        return "end_turn"


class ScriptedFactory:
    """The built-in factory: a `ScriptedAgent` configured from the session's metadata."""

    def build(self, spec: AgentSpec, session_id: str) -> Agent:
        return ScriptedAgent(spec)
