"""Messages inside the runtime's supervision tree (not part of the host protocol).

Timer payloads are here too: the Runner schedules them with ``wakeupAfter`` and its
registry decides what they mean when they fire.
"""

from __future__ import annotations

from typing import Any

import attrs

from ..terse import terse_module


@attrs.frozen(kw_only=True)
class UseProjection:
    """The guardian tells the Runner where the projection actor is (after each start)."""

    address: Any


@attrs.frozen(kw_only=True)
class RestartDue:
    """Timer payload: the backoff before restarting this incarnation's successor is over."""

    session_id: str
    incarnation: int


@attrs.frozen(kw_only=True)
class PassivationDue:
    """Timer payload: time to stop the sessions that have been idle long enough."""


@attrs.frozen(kw_only=True)
class StopSpares:
    """From a Host about to shut its actor system down: start no more spare session
    processes (a process started while the system shuts down holds the shutdown up).
    Answered with `Done`."""

    request_id: str


@attrs.frozen(kw_only=True)
class SparesDue:
    """Timer payload: start spare session processes again (see `Spares.refill`)."""


@attrs.frozen
class ProjectionWakeDue:
    """Timer payload: wake the projection actor for appends that arrived since the last
    wake (wakes are throttled, see `WAKE_INTERVAL`)."""


@attrs.frozen
class TimersDue:
    """Timer payload: a session timer is due (see `DueTimers`)."""


@attrs.frozen
class HeartbeatDue:
    """Timer payload: time to ping every member's agent and to find the silent ones."""


@attrs.frozen(kw_only=True)
class Heartbeat:
    """The Runner asks a member's agent whether its host still lives."""

    host: str
    beat: int


@attrs.frozen(kw_only=True)
class HeartbeatReply:
    """A member's agent answers a `Heartbeat`."""

    host: str
    beat: int


# Thespian formats every message it moves; keep that cheap (see `actors.terse`).
terse_module(globals())
