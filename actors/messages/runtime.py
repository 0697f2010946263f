"""The runtime itself: the guardian's configuration and the Runner's address, liveness
checks, the Runner's counters and a convention leader's table of member hosts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ..model_servers import ModelServers
from ..policy import BusyPolicy, RestartPolicy, SealPolicy, SnapshotPolicy
from .converters import _busy_policy, _frozen_map, _tuple

# -- guardian, Runner and liveness ---------------------------------------------------------


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
    # Seconds before a passivated session's next timer is due that the Runner brings it
    # back, so that it fires on its own wake-up rather than after a process start and a
    # fold; a session is not passivated while a timer is due within it. 0: woken at due.
    timer_lead: float = 1.0
    restart: RestartPolicy = attrs.field(factory=RestartPolicy)
    # Run the status projection actor beside the Runner (woken on every append).
    projections: bool = True
    # Where the spine lives (a `spine.LogSpec` URL); empty: spine.db in the data directory.
    spine: str = ""
    # When sessions seal themselves (default: only when asked).
    auto_seal: SealPolicy = attrs.field(factory=SealPolicy)
    # When sessions write their snapshots (default: every 1000 events or 4 MiB).
    snapshots: SnapshotPolicy = attrs.field(factory=SnapshotPolicy)
    # A convention leader: place sessions on member hosts and watch them by heartbeats.
    cluster: bool = False
    # Session processes kept started, warmed up and unconfigured, so that a new session (a
    # goal's child above all) skips the process start: the Runner refills them 0.2 s after
    # each use. Three: a new session whose first response spawns two children needs three
    # within a few milliseconds, long before a refill (a spare costs about 6 MB of its own).
    spare_sessions: int = 3
    # Spares run a goal run and a chat turn in memory before they stand by, so a session's
    # first turn (a goal's child above all) does not pay for its process's first run of
    # every path: about 1 MB more of each session's memory (docs/performance.md). False:
    # the Runner warms up once before it forks them, and they stay cold.
    warm_spares: bool = True
    # The operator's price table (``vertebra serve --prices``), empty: spending unpriced.
    prices: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_map)
    # The model servers sessions may name (``vertebra serve --allow-model-url``).
    model_servers: ModelServers = attrs.field(factory=ModelServers)


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
    #: `actors._runtime.system.data_identity` of the data directory this runtime serves: an
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


# -- counters and hosts --------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class GetRunnerStats:
    """Counters of the Runner: sessions, restarts, sink deliveries, drops and failures."""

    request_id: str


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
class GetHostTable:
    """The member hosts a convention leader's Runner knows: answered by `HostTableReply`."""

    request_id: str


@attrs.frozen(kw_only=True)
class HostTableReply:
    """One row per member host: ``host``, ``alive``, ``capacity``, ``sessions``."""

    request_id: str
    hosts: tuple[Mapping[str, Any], ...] = attrs.field(factory=tuple, converter=_tuple)
