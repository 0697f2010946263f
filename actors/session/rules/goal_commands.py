"""The decider's goal-run commands (pure data): open a run, continue one, and a child the
turn's worker asks for. Part of the vocabulary of `commands` (which names them in its
``Command``)."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from ...terse import terse_module

__all__ = ["Resume", "Spawn", "Submit"]


@attrs.frozen(kw_only=True)
class Submit:
    """Open a goal run (``session.started`` with the objective and the budget)."""

    request_id: str
    key: str
    objective: str
    budget: Mapping[str, float] = attrs.field(factory=dict)
    #: Unix time the session received it (stamped by the shell), 0 if unknown.
    now: float = 0.0
    #: What an earlier delivery of the same key stored, as ``(seq, kind)`` rows (the shell
    #: looks the key up in the log), empty if nothing: a retry is answered as then.
    stored: tuple[tuple[int, str], ...] = ()


@attrs.frozen(kw_only=True)
class Resume:
    """Continue the goal run in flight, if any (the next turn starts when one is due)."""

    request_id: str
    key: str


@attrs.frozen(kw_only=True)
class Spawn:
    """From the turn's worker: the admitted ``spawn`` tool call ``tool_use_id`` delegates
    ``objective`` to a child session (answered with `AnswerSpawn` once it exists)."""

    turn: int
    tool_use_id: str
    objective: str


# Thespian formats every message it moves; keep that cheap (see `actors.terse`).
terse_module(globals())
