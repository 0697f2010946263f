"""Agents and the factory that builds one per turn from session metadata.

A turn's agent is built fresh from the session's metadata, so replaying the stream
(metadata changes are events) reproduces every turn's exact model configuration.
"""

from __future__ import annotations

import json
import threading
from typing import Protocol, runtime_checkable

from spine import Usage

from .spec import AgentSpec, TurnInput

__all__ = [
    "Agent",
    "AgentError",
    "AgentFactory",
    "AgentSpec",
    "ScriptedAgent",
    "ScriptedFactory",
    "TurnInput",
    "TurnOutput",
]


class AgentError(Exception):
    """The agent failed the turn; the turn ends with this error."""


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
