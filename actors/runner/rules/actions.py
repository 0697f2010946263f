"""What the Runner's registry decides, as data: the actions its actor shell carries out.

Addresses and ``reply_to`` values are opaque here: the registry compares them, never
uses them. The shell executes a list of actions in order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ...session.protocol import Routed


@attrs.frozen(kw_only=True)
class Spawn:
    """Create incarnation ``incarnation`` of the session and configure it.

    ``create`` asks it to create its stream (failing if it exists) with ``metadata``.
    The shell tells the registry the new address (`Registry.bind`).
    """

    session_id: str
    incarnation: int
    create: bool = False
    metadata: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class Forward:
    """Send ``routed`` to the session's live incarnation at ``address``."""

    session_id: str
    address: Any
    routed: Routed


@attrs.frozen(kw_only=True)
class Reply:
    """Answer a requester."""

    to: Any
    message: Any


@attrs.frozen(kw_only=True)
class Fail:
    """Answer a requester with `RequestFailed`; ``error`` names an `actors.errors` class."""

    to: Any
    request_id: str
    error: str
    message: str
    session_id: str = ""


@attrs.frozen(kw_only=True)
class Schedule:
    """Hand ``payload`` back to the registry after ``delay`` seconds."""

    delay: float
    payload: Any


@attrs.frozen(kw_only=True)
class Stop:
    """Ask the incarnation at ``address`` to exit (the registry knows why)."""

    session_id: str
    address: Any


@attrs.frozen(kw_only=True)
class RecordFailure:
    """Append ``lifecycle failed`` to the session's stream: no process will write it."""

    session_id: str
    reason: str


@attrs.frozen(kw_only=True)
class VerifyStored:
    """Verify a failed session's seals from its stored rows (no process loads it) and
    record the outcome as ``record.verified``; the Runner is the stream's writer then."""

    session_id: str
    request_id: str
    reply_to: Any


@attrs.frozen(kw_only=True)
class ReplayStored:
    """Serve a `Subscribe` to a failed session from its stored rows (no process will load
    it): the backlog after ``after_seq``, its ``failed`` event included, then a closed batch."""

    session_id: str
    request: Any
    reply_to: Any


@attrs.frozen(kw_only=True)
class RecordPoison:
    """Tell the live incarnation that ingress ``key`` was poison, so it records that."""

    session_id: str
    address: Any
    key: str
    detail: str


@attrs.frozen(kw_only=True)
class CloseStored:
    """Close a stream that has no process, in the log (the Runner is its only writer):
    close an open turn, append ``lifecycle closed``, then report `Registry.stored_terminal`.
    """

    session_id: str


@attrs.frozen(kw_only=True)
class WakeProjection:
    """New events were stored: wake the status projection (a hint; it also polls)."""


@attrs.frozen(kw_only=True)
class Deliver:
    """Fan a session's new records and live items out to the sinks."""

    session_id: str
    records: tuple[tuple[int, str, bytes], ...] = ()
    live: tuple[tuple[int, str, str, str], ...] = ()


Action = (
    Spawn
    | Forward
    | Reply
    | Fail
    | Schedule
    | Stop
    | RecordFailure
    | RecordPoison
    | CloseStored
    | WakeProjection
    | Deliver
    | VerifyStored
    | ReplayStored
)
