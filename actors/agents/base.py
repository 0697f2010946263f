"""What an agent is: the protocols a turn's agent and its factory implement.

A turn's agent is built fresh from the session's metadata, so replaying the stream
(metadata changes are events) reproduces every turn's exact model configuration.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from spine import Event, Usage

from ..spec import AgentSpec, TurnInput
from .governance import Requirement

__all__ = ["Agent", "AgentError", "AgentFactory", "TurnOutput"]


class AgentError(Exception):
    """The agent failed the turn; the turn ends with this error."""


class TurnOutput(Protocol):
    """Where an agent writes a turn. ``cancelled`` is set when an interrupt arrives: the
    agent should stop at its next chunk; `on_cancel` registers a callback run at that
    moment (an asynchronous agent cancels its in-flight request with it)."""

    cancelled: threading.Event

    def text(self, delta: str) -> None: ...

    def flush(self) -> None:
        """Hand buffered text to the session now (a stream that goes quiet after a few
        words must not keep them back until its next chunk)."""
        ...

    def tool_call(self, tool: str, tool_use_id: str, input_json: str) -> None: ...

    def tool_result(
        self,
        tool: str,
        tool_use_id: str,
        result: str,
        is_error: bool,
        *,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """Store a tool's result; ``extra`` holds fields kept beside it (an MCP call's
        record: its server, idempotency key, content kinds, binary references)."""
        ...

    def usage(self, usage: Usage, raw: tuple[Mapping[str, Any], ...] = ()) -> None:
        """The turn's usage so far (a total, not an increment) and the providers' own
        reports of it, one per model call."""
        ...

    def on_cancel(self, callback: Callable[[], object]) -> None: ...

    def govern(
        self, action: str, tool_use_id: str, input_json: str, need: Requirement
    ) -> concurrent.futures.Future[tuple[str, int, str]]:
        """Ask the session's governance gate whether an action may run: the future gets
        ``(verdict, call, fault)``, verdict ``admit`` or ``reject`` (an action waiting for
        a human's approval resolves when the human decides)."""
        ...

    def emit(self, event: Event) -> None:
        """Store an event in the turn (an ``action.completed``, a ``net.egress``)."""
        ...


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
