"""The message protocol: every message a host sends to the Runner and every reply.

All messages are frozen attrs classes defined at module level, so they pickle across
processes. Commands are imperative, replies end in ``...Reply`` or are ``RequestFailed``.
Every request carries a ``request_id`` that its reply echoes, so a host can tell a late or
duplicate reply from the one it waits for. Ingress that changes a session carries an
idempotency ``key``: a redelivered key is acknowledged again without a second event.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from .policy import BusyPolicy, RestartPolicy, SealPolicy
from .terse import terse_module


def _frozen_map(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return {} if not value else dict(value)


def _tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value or ())


def _busy_policy(value: str | BusyPolicy) -> BusyPolicy:
    return BusyPolicy.parse(value)


# -- requests a host sends to the Runner --------------------------------------------------


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
    request_id: str


@attrs.frozen(kw_only=True)
class SendMessage:
    """A user message; acknowledged once its event is committed."""

    request_id: str
    session_id: str
    key: str
    text: str


@attrs.frozen(kw_only=True)
class Interrupt:
    """Cut the running turn off; it closes with ``turn.cancelled`` keeping partial output."""

    request_id: str
    session_id: str
    key: str
    reason: str = "interrupted"


@attrs.frozen(kw_only=True)
class SetMetadata:
    """Change session metadata (``None`` deletes a key); emits a properties event."""

    request_id: str
    session_id: str
    key: str
    properties: Mapping[str, str | None] = attrs.field(converter=_frozen_map)


@attrs.frozen(kw_only=True)
class DecideAction:
    """A human's decision on a governed action waiting for approval (``call`` as the
    ``action.pending`` event names it): approve runs it once, reject refuses it with
    fault ``approval_rejected``. Answered with an `Ack`; deciding a call again the same way
    is a duplicate, an unknown call or a contrary decision is `InvalidRequest`."""

    request_id: str
    session_id: str
    key: str
    call: int
    approve: bool
    note: str = ""


@attrs.frozen(kw_only=True)
class SubmitGoal:
    """Open a goal run on the session: ``session.started`` with the objective, then the
    session drives turns on its own until ``session.converged`` or ``session.stalled``.
    ``budget`` maps ``max_turns``, ``max_tokens``, ``max_tool_calls``, ``max_seconds`` to
    limits counted from the run's start. Answered with an `Ack`; a run already in flight
    is `InvalidRequest`."""

    request_id: str
    session_id: str
    key: str
    objective: str
    budget: Mapping[str, int] = attrs.field(factory=dict, converter=_frozen_map)


@attrs.frozen(kw_only=True)
class ResumeGoal:
    """Bring the session up so that a goal run cut off by a crash or a restart goes on,
    on the same stream and without a second ``session.started``. Answered with an `Ack`
    (``consumed`` when no run was in flight)."""

    request_id: str
    session_id: str
    key: str


@attrs.frozen(kw_only=True)
class SwitchSession:
    """Record that the conduit moves to ``target`` (a session switch event)."""

    request_id: str
    session_id: str
    key: str
    target: str


@attrs.frozen(kw_only=True)
class Subscribe:
    """Push this session's events after ``after_seq`` to the sender, then live.

    The session answers `SubscribeReply`, then sends `EventBatch` messages in seq order,
    exactly once, until `Unsubscribe` or the session closes (a final batch has
    ``closed=True``).
    """

    request_id: str
    session_id: str
    after_seq: int = 0
    kinds: tuple[str, ...] = attrs.field(factory=tuple, converter=_tuple)


@attrs.frozen(kw_only=True)
class Unsubscribe:
    request_id: str
    session_id: str
    subscription_id: str


@attrs.frozen(kw_only=True)
class AddSink:
    """Register the sender as a sink for live events of every session (kinds empty = all)."""

    request_id: str
    kinds: tuple[str, ...] = attrs.field(factory=tuple, converter=_tuple)
    max_pending: int = 1000


@attrs.frozen(kw_only=True)
class RemoveSink:
    request_id: str
    sink_id: str


@attrs.frozen(kw_only=True)
class SealSession:
    """Seal what is new in the session's stream (a signed Merkle root, `spine.seal`).

    The session itself appends the ``record.sealed`` event: it is its stream's only writer.
    """

    request_id: str
    session_id: str


@attrs.frozen(kw_only=True)
class VerifySession:
    """Verify every seal of the session's stream and append ``record.verified`` with the
    outcome (pass or failure, so a replay reproduces the record badge). A failure names
    what failed and where."""

    request_id: str
    session_id: str


@attrs.frozen(kw_only=True)
class ReviveSession:
    """An operator brings back a session that failed past its restart budget: the Runner
    records the decision as a ``session.lifecycle`` event (phase ``recovered``, naming
    ``reason``) and the next request starts the session again. Answered with an `Ack`
    naming that event's seq; a session that is not failed is `InvalidRequest`."""

    request_id: str
    session_id: str
    reason: str = ""


@attrs.frozen(kw_only=True)
class GetRunnerStats:
    """Counters of the Runner: sessions, restarts, sink deliveries, drops and failures."""

    request_id: str


@attrs.frozen(kw_only=True)
class GetHostTable:
    """The member hosts a convention leader's Runner knows: answered by `HostTableReply`."""

    request_id: str


# -- replies ------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class RequestFailed:
    """A request failed. ``error`` is the error's class name (see `actors.errors`)."""

    request_id: str
    error: str
    message: str
    session_id: str = ""


@attrs.frozen(kw_only=True)
class SessionInfo:
    """Where a session stands. ``state`` is live, passivated, closed or failed; ``error``
    says why a failed session failed (for a stream that does not decode, the seq)."""

    session_id: str
    state: str
    last_seq: int = 0
    restarts: int = 0
    metadata: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_map)
    error: str = ""


@attrs.frozen(kw_only=True)
class SessionReply:
    request_id: str
    info: SessionInfo


@attrs.frozen(kw_only=True)
class SessionListReply:
    request_id: str
    sessions: tuple[SessionInfo, ...] = attrs.field(converter=_tuple)


@attrs.frozen(kw_only=True)
class Ack:
    """Ingress is committed: ``seq`` is the last seq it wrote (0 if it wrote nothing).

    ``duplicate`` is true when the key had been seen; ``consumed`` when an interceptor
    handled the ingress (a slash command) so that no turn runs. ``notices`` are the
    interceptors' (severity, text) notices, also pushed live to sinks.
    """

    request_id: str
    session_id: str
    key: str
    seq: int = 0
    duplicate: bool = False
    consumed: bool = False
    notices: tuple[tuple[str, str], ...] = attrs.field(factory=tuple, converter=_tuple)


@attrs.frozen(kw_only=True)
class Done:
    """A request without a payload succeeded (close, unsubscribe, remove sink)."""

    request_id: str


@attrs.frozen(kw_only=True)
class SubscribeReply:
    request_id: str
    session_id: str
    subscription_id: str


@attrs.frozen(kw_only=True)
class SinkReply:
    request_id: str
    sink_id: str


@attrs.frozen(kw_only=True)
class SealReply:
    """``seq`` is where the seal event is stored; 0 when there was nothing new to seal."""

    request_id: str
    session_id: str
    seq: int
    first: int = 0
    last: int = 0
    root: str = ""
    key_id: str = ""


@attrs.frozen(kw_only=True)
class VerifyReply:
    """``ok`` and a one-line ``summary``; ``seq`` is the record.verified event (0 if none)."""

    request_id: str
    session_id: str
    ok: bool
    summary: str
    seq: int = 0


@attrs.frozen(kw_only=True)
class RunnerStats:
    """The Runner's counters, and its gauges: ``queues`` maps each session with ingress
    waiting to ``(pending, in_flight, queued)`` (see ``Registry.queues``), ``sinks`` each
    actor sink to its unacknowledged batches; ``append_counts`` (one per bound in
    ``append_bounds``, then +Inf; not cumulative) and ``append_seconds`` are the spine
    append latencies of every session process and the Runner since this Runner started."""

    request_id: str
    counters: Mapping[str, int] = attrs.field(converter=_frozen_map)
    queues: Mapping[str, tuple[int, int, int]] = attrs.field(factory=dict, converter=_frozen_map)
    sinks: Mapping[str, int] = attrs.field(factory=dict, converter=_frozen_map)
    append_bounds: tuple[float, ...] = attrs.field(factory=tuple, converter=_tuple)
    append_counts: tuple[int, ...] = attrs.field(factory=tuple, converter=_tuple)
    append_seconds: float = 0.0


@attrs.frozen(kw_only=True)
class HostTableReply:
    """One row per member host: ``host``, ``alive``, ``capacity``, ``sessions``."""

    request_id: str
    hosts: tuple[Mapping[str, Any], ...] = attrs.field(factory=tuple, converter=_tuple)


# -- the runtime itself: guardian, Runner and liveness ---------------------------------


@attrs.frozen(kw_only=True)
class RunnerConfig:
    """The Runner's configuration: sent to the guardian (named ``vertebra.guardian``),
    which creates the Runner, configures it and answers `RunnerAddress`.

    ``interceptors`` and ``factory`` travel to the actor processes: they must pickle
    (module-level classes, no lambdas or open resources)."""

    data_dir: str
    interceptors: tuple[Any, ...] = attrs.field(factory=tuple, converter=_tuple)
    factory: Any = None
    busy_policy: BusyPolicy = attrs.field(default=BusyPolicy.ENQUEUE, converter=_busy_policy)
    idle_timeout: float | None = None
    restart: RestartPolicy = attrs.field(factory=RestartPolicy)
    # Run the status projection actor beside the Runner (woken on every append).
    projections: bool = True
    # Where the spine lives (a `spine.LogSpec` URL); empty: spine.db in the data directory.
    spine: str = ""
    # When sessions seal themselves (default: only when asked).
    auto_seal: SealPolicy = attrs.field(factory=SealPolicy)
    # A convention leader: place sessions on member hosts and watch them by heartbeats.
    cluster: bool = False
    # Session processes kept started, warmed up and unconfigured, so that a new session (a
    # goal's child above all) skips the process start: the Runner refills them 0.2 s after
    # each use. Three: a new session whose first response spawns two children needs three
    # within a few milliseconds, long before a refill (a spare costs about 6 MB of its own).
    spare_sessions: int = 3


@attrs.frozen(kw_only=True)
class GetRunner:
    """Ask the guardian where the current Runner is; answered by `RunnerAddress`."""

    request_id: str


@attrs.frozen(kw_only=True)
class RunnerAddress:
    """The current Runner, its generation (bumped when the guardian replaces a dead one)
    and the status projection actor's address (None when projections are off)."""

    request_id: str
    address: Any
    generation: int
    projection: Any = None
    #: `actors.system.data_identity` of the data directory this runtime serves: an
    #: attaching Host checks it reached the daemon of its own directory.
    data_id: str = ""


@attrs.frozen(kw_only=True)
class Ping:
    """Liveness check; any actor of the runtime answers `Pong` with its process id."""

    request_id: str


@attrs.frozen(kw_only=True)
class Pong:
    request_id: str
    pid: int


@attrs.frozen(kw_only=True)
class SessionPid:
    """Ask the Runner for a live session's process id (operations and tests)."""

    request_id: str
    session_id: str


# -- pushed to subscribers and sinks ------------------------------------------------------


@attrs.frozen(kw_only=True)
class EventBatch:
    """Stored events of one session as (seq, kind, raw JSON payload), in seq order.

    Raw bytes cross process boundaries far cheaper than event objects; decode with
    `spine.decode_event` at the edge.
    """

    session_id: str
    subscription_id: str = ""
    records: tuple[tuple[int, str, bytes], ...] = attrs.field(factory=tuple, converter=_tuple)
    closed: bool = False
    # 1, 2, 3, ... per subscription: Thespian may deliver two batches in flight to one
    # target out of order, so a receiver reorders by this (`actors.host.BatchOrder`).
    # 0 means unnumbered.
    batch: int = 0


@attrs.frozen(kw_only=True)
class SinkBatch:
    """What a sink receives: stored events as (seq, kind, payload) and ephemeral items.

    ``live`` holds ephemeral items (notices, streamed text deltas) as
    ``(after_seq, kind, severity-or-empty, text)``: an item belongs after stored record
    ``after_seq`` and before ``after_seq + 1``, so a consumer merging ``records`` and
    ``live`` by seq delivers notices in the order they were produced relative to stored
    events (items with the same ``after_seq`` keep their order). A sink answers each batch
    with `SinkAck`; a sink with ``max_pending`` unacknowledged batches gets no more until it
    catches up (the batches it misses are counted as drops; `Subscribe` is the exact-replay
    path).
    """

    session_id: str
    sink_id: str = ""
    records: tuple[tuple[int, str, bytes], ...] = attrs.field(factory=tuple, converter=_tuple)
    live: tuple[tuple[int, str, str, str], ...] = attrs.field(factory=tuple, converter=_tuple)


@attrs.frozen(kw_only=True)
class SinkAck:
    """A sink's acknowledgement of ``count`` batches."""

    sink_id: str
    count: int = 1


#: The messages a host sends into the runtime: each is checked field by field where it
#: arrives (`actors.validation`), since an unpickled message never ran its converters.
REQUESTS: tuple[type, ...] = (
    RunnerConfig,
    GetRunner,
    Ping,
    SessionPid,
    SinkAck,
    CreateSession,
    GetSession,
    RegisterSession,
    CloseSession,
    CloseAll,
    ListSessions,
    SendMessage,
    Interrupt,
    SetMetadata,
    DecideAction,
    SubmitGoal,
    ResumeGoal,
    SwitchSession,
    Subscribe,
    Unsubscribe,
    AddSink,
    RemoveSink,
    GetRunnerStats,
    GetHostTable,
    ReviveSession,
    SealSession,
    VerifySession,
)

#: Every public message: the requests, then what the runtime sends back or pushes.
ALL_MESSAGES: tuple[type, ...] = (
    *REQUESTS,
    RunnerAddress,
    Pong,
    SealReply,
    VerifyReply,
    RequestFailed,
    SessionInfo,
    SessionReply,
    SessionListReply,
    Ack,
    Done,
    SubscribeReply,
    SinkReply,
    RunnerStats,
    HostTableReply,
    EventBatch,
    SinkBatch,
)

# Thespian formats every message it moves; keep that cheap (see `actors.terse`).
terse_module(globals())
