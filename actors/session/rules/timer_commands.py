"""The decider's timer commands (pure data): set, cancel, and fire what is due. Part of
the vocabulary of `commands` (which names them in its ``Command``)."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from ...terse import terse_module

__all__ = ["CancelTimer", "FireDue", "SetTimer"]


@attrs.frozen(kw_only=True)
class SetTimer:
    """Set (or replace) timer ``timer_id``: one of ``at``, ``after``, ``cron`` (`timerbook`)."""

    request_id: str
    key: str
    timer_id: str
    text: str
    at: float | None = None
    after: float | None = None
    cron: str = ""
    tz: str = ""
    policy: str = "fire_once"
    grace: float = 60.0
    #: Its firing opens a goal run (``text``: the objective; ``budget``: the run's).
    goal: bool = False
    budget: Mapping[str, float] = attrs.field(factory=dict)
    #: Unix time the session received it (stamped by the shell); ``stored`` as `Submit`'s.
    now: float = 0.0
    stored: tuple[tuple[int, str], ...] = ()


@attrs.frozen(kw_only=True)
class CancelTimer:
    request_id: str
    key: str
    timer_id: str


@attrs.frozen(kw_only=True)
class FireDue:
    """Deliver the timers due at ``now`` (stamped by the shell when the Runner asks)."""

    request_id: str
    now: float = 0.0


# Thespian formats every message it moves; keep that cheap (see `actors.terse`).
terse_module(globals())
