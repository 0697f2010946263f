"""Requests the Runner answers from its registry of sessions (create, look up, register,
close, list, revive), their replies, and the two replies any request may get."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from .converters import _frozen_map, _tuple

# -- requests ------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class CreateSession:
    """Create a session; ``session_id`` empty means a fresh UUIDv7."""

    request_id: str
    session_id: str = ""
    metadata: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_map)


@attrs.frozen(kw_only=True)
class GetSession:
    """Look a session up; a passivated one is brought back."""

    request_id: str
    session_id: str


@attrs.frozen(kw_only=True)
class RegisterSession:
    """Insert an existing stream into the registry without checking for duplicates."""

    request_id: str
    session_id: str


@attrs.frozen(kw_only=True)
class CloseSession:
    """Close one session: a lifecycle "closed" event, then its actor stops."""

    request_id: str
    session_id: str


@attrs.frozen(kw_only=True)
class CloseAll:
    """Close every session; the Runner refuses further ingress afterwards."""

    request_id: str


@attrs.frozen(kw_only=True)
class ListSessions:
    """Every session the spine knows; with ``session_id``, that one only, as the registry
    holds it, read from no stream (none if it holds no entry: no process is on it)."""

    request_id: str
    session_id: str = ""


@attrs.frozen(kw_only=True)
class ReviveSession:
    """An operator brings back a session that failed past its restart budget: the Runner
    records the decision as a ``session.lifecycle`` event (phase ``recovered``, naming
    ``reason``) and the next request starts the session again. Answered with an `Ack`
    naming that event's seq; a session that is not failed is `InvalidRequest`."""

    request_id: str
    session_id: str
    reason: str = ""


# -- replies -------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class RequestFailed:
    """A request failed. ``error`` is the error's class name (see `actors.errors`)."""

    request_id: str
    error: str
    message: str
    session_id: str = ""


@attrs.frozen(kw_only=True)
class Done:
    """A request without a payload succeeded (close, unsubscribe, remove sink)."""

    request_id: str


@attrs.frozen(kw_only=True)
class SessionInfo:
    """Where a session stands. ``state`` is live, passivated, closed or failed; ``error``
    says why a failed session failed (for a stream that does not decode, the seq).
    ``working``: a process is on the session or about to be (starting, live, restarting
    after a crash), so a goal run in flight goes on; False while nothing drives it."""

    session_id: str
    state: str
    last_seq: int = 0
    restarts: int = 0
    metadata: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_map)
    error: str = ""
    working: bool = False


@attrs.frozen(kw_only=True)
class SessionReply:
    request_id: str
    info: SessionInfo


@attrs.frozen(kw_only=True)
class SessionListReply:
    request_id: str
    sessions: tuple[SessionInfo, ...] = attrs.field(converter=_tuple)
