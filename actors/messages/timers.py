"""Timers in a session (set, cancel) and the Runner's ask to fire what is due."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from .converters import _frozen_map


@attrs.frozen(kw_only=True)
class SetTimer:
    """Set timer ``timer_id`` (replacing one of that id): exactly one of ``at`` (Unix
    seconds), ``after`` (seconds from now) or ``cron`` (five fields, in ``tz``). Its firing
    delivers ``text`` as a user message, or with ``goal`` opens a goal run with ``text`` as
    its objective and ``budget`` as its budget (as `SubmitGoal`'s). ``policy`` says what
    firings missed while the daemon was down become (``fire_once`` or ``skip``, past
    ``grace`` seconds late). Answered with an `Ack`; a timer that cannot be set is
    `InvalidRequest`."""

    request_id: str
    session_id: str
    key: str
    timer_id: str
    text: str
    at: float | None = None
    after: float | None = None
    cron: str = ""
    tz: str = ""
    policy: str = "fire_once"
    grace: float = 60.0
    goal: bool = False
    budget: Mapping[str, float] = attrs.field(factory=dict, converter=_frozen_map)


@attrs.frozen(kw_only=True)
class CancelTimer:
    """Cancel timer ``timer_id``; one not set is acknowledged as ``consumed``."""

    request_id: str
    session_id: str
    key: str
    timer_id: str


@attrs.frozen(kw_only=True)
class FireTimers:
    """From the Runner: deliver what is due now (the session decides what that is)."""

    request_id: str
    session_id: str
