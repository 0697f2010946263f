"""Messages between the actors themselves (not part of the host protocol)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ..messages import _tuple
from ..model_servers import ModelServers
from ..policy import BusyPolicy, SealPolicy, SnapshotPolicy
from ..terse import terse_module


@attrs.frozen(kw_only=True)
class SessionConfig:
    """Sent by the Runner to a new session incarnation before anything else."""

    session_id: str
    db_path: str
    incarnation: int
    interceptors: tuple[Any, ...] = attrs.field(factory=tuple, converter=_tuple)
    factory: Any = None
    busy_policy: BusyPolicy = BusyPolicy.ENQUEUE
    flush_interval: float = 0.02
    create: bool = False
    metadata: Mapping[str, str] = attrs.field(factory=dict)
    request_id: str = ""
    reply_to: Any = None
    # The spine as a `spine.LogSpec` URL; empty: the SQLite file ``db_path``.
    spine: str = ""
    # When the session seals itself (a session's metadata may override it).
    auto_seal: SealPolicy = attrs.field(factory=SealPolicy)
    # When the session writes its snapshot.
    snapshots: SnapshotPolicy = attrs.field(factory=SnapshotPolicy)
    # The operator's price table (`actors.session.rules.spend`), empty: none.
    prices: Mapping[str, Any] = attrs.field(factory=dict)
    # The model servers the session may name (`actors.model_servers`).
    model_servers: ModelServers = attrs.field(factory=ModelServers)


@attrs.frozen(kw_only=True)
class Standby:
    """Sent by the Runner to a spare session process it started ahead of need: it opens
    what every session opens (the log named by ``db_path``/``spine``, the snapshot store,
    the log file) while nothing waits, then waits for its `SessionConfig`; it stops by
    itself if the Runner dies first."""

    db_path: str = ""
    spine: str = ""
    #: Run the warm-up (`warmup.warm_spare`) before answering (`RunnerConfig.warm_spares`).
    warm: bool = True


@attrs.frozen(kw_only=True)
class SpareReady:
    """A spare's answer to `Standby` once it has opened what it could and warmed up: from
    then on handing it a session costs no start-up work (`GetRunnerStats` counts these)."""


@attrs.frozen(kw_only=True)
class SessionReady:
    session_id: str
    incarnation: int
    last_seq: int
    closed: bool = False
    failed: bool = False
    created: bool = False
    already_exists: bool = False
    metadata: Mapping[str, str] = attrs.field(factory=dict)
    error: str = ""


@attrs.frozen(kw_only=True)
class Routed:
    """Ingress forwarded by the Runner; the session replies to ``reply_to`` directly."""

    message: Any
    reply_to: Any
    restarts: int = 0
    session_id: str = ""


@attrs.frozen(kw_only=True)
class Appended:
    """A session's new stored records and live items, for the Runner's sinks.

    ``records`` are ``(seq, kind, payload)``; ``live`` items (notices, streamed text
    deltas) are ``(after_seq, kind, severity-or-empty, text)``: an item belongs after stored
    record ``after_seq`` and before ``after_seq + 1`` (the order of production relative to
    stored events; items with the same ``after_seq`` keep their order). ``keys`` are the
    ingress keys now committed (so the Runner stops tracking them); ``busy`` says whether a
    turn is running or queued (idle sessions may be passivated); ``queued`` counts the stored
    messages waiting for a turn. ``append_counts`` and ``append_seconds`` are the spine
    append latencies observed since the last report (`actors._runtime.histogram.Histogram.take`).
    """

    session_id: str
    incarnation: int
    records: tuple[tuple[int, str, bytes], ...] = attrs.field(factory=tuple, converter=_tuple)
    live: tuple[tuple[int, str, str, str], ...] = attrs.field(factory=tuple, converter=_tuple)
    keys: tuple[str, ...] = attrs.field(factory=tuple, converter=_tuple)
    busy: bool = False
    queued: int = 0
    append_counts: tuple[int, ...] = attrs.field(factory=tuple, converter=_tuple)
    append_seconds: float = 0.0


#: Why an incarnation stops when its spine cannot be reached: not a crash, so the Runner
#: restarts it (with a backoff of its own) without spending the restart budget.
SPINE_UNAVAILABLE = "spine unavailable"


@attrs.frozen(kw_only=True)
class SessionStopping:
    """The session closed itself (or found itself stale, or its spine unreachable) and
    asks to be stopped."""

    session_id: str
    incarnation: int
    reason: str


@attrs.frozen(kw_only=True)
class SessionUnreadable:
    """The incarnation could not load its stream because a stored row does not decode:
    restarting cannot help, so the Runner marks the session failed, naming ``seq``."""

    session_id: str
    incarnation: int
    seq: int
    reason: str


@attrs.frozen(kw_only=True)
class RecordPoison:
    """Sent by the Runner when an ingress poisoned the session: record it, keep serving."""

    key: str
    detail: str


#: `RequestWhere.where` of a request queued in the Runner for an incarnation that is not
#: ready: loading its stream, waiting out a restart's backoff, or stopping.
WAITING = "waiting"


@attrs.frozen(kw_only=True)
class FindRequest:
    """The Host asks where its request ``about`` to session ``session_id``, still without
    a reply, stands; answered by `RequestWhere`. It asks rather than guesses from a
    timeout: one waiting for a session that is loading, or that a busy session has not
    reached yet, needs no second copy."""

    request_id: str
    session_id: str
    about: str


@attrs.frozen(kw_only=True)
class RequestWhere:
    """Where a request stands, from the Runner: `WAITING`; or "" when it holds none (lost
    on its way, or answered and the answer lost: send it again). Or from the session a
    keyed request was forwarded to (`Behind`): "" once it has handled everything the
    Runner sent it before, so a reply not arrived by then is lost."""

    request_id: str
    where: str


@attrs.frozen(kw_only=True)
class Behind:
    """The Runner's `FindRequest` for keyed ingress it forwarded, sent on to the session
    after it: Thespian delivers one pair's messages in order, so the session reaches this
    once it has handled the request (if it arrived), and answers ``reply_to`` with
    `RequestWhere` on the same path as that request's reply. A transmit Thespian had to
    retry may be overtaken; then the Host sends a copy it did not need, which keyed
    ingress stores once."""

    request_id: str
    reply_to: Any


# Thespian formats every message it moves; keep that cheap (see `actors.terse`).
terse_module(globals())
