"""Messages between the actors themselves (not part of the host protocol)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ..messages import _tuple
from ..model_servers import ModelServers
from ..policy import BusyPolicy, SealPolicy
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
    #: Run the warm-up (`warmup.warm_up`) before answering (`RunnerConfig.warm_spares`).
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


# Thespian formats every message it moves; keep that cheap (see `actors.terse`).
terse_module(globals())
