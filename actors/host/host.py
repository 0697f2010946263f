"""`Host`: the Python API for embedding vertebra.

A Host starts (or attaches to) an actor system, makes sure a guardian and a Runner run in
it, and turns the message protocol into method calls. It is safe to call from many
threads; how it talks to the system (a private endpoint per thread on multiproc bases,
a lock and a pump on ``simpleSystemBase``) is its `Transport`'s business. Every request
carries a ``request_id`` and its reply is matched by it, the projection actor's included.
The session commands (`SessionCommands`) and the reading side (`SessionReading`) are
mixins in their own modules; this one holds startup, the Runner's round trip, the Runner's
own queries, sinks and shutdown.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from spine import open_log, private_dir

from .. import messages as m
from .._runtime.system import bind_only, free_port, loopback_only, orphan_guard
from ..agents.factory import with_mcp, with_model_servers
from ..agents.providers import default_servers
from ..errors import HostClosed, HostTimeout, InvalidRequest
from ..interceptors import SlashCommands
from ..messages import Ping, Pong, RunnerConfig, SessionPid
from ..model_servers import ModelServers
from ..policy import BusyPolicy, RestartPolicy, SealPolicy, SnapshotPolicy
from ..runner import spine_spec
from ..runner.protocol import StopSpares
from ..session.rules.spend import check_prices
from .commands import SessionCommands
from .conversation import ConversationCommands
from .reading import SessionReading, pending_actions
from .replies import request_id
from .runtime import Runtime
from .sinks import SinkFn, Sinks
from .timers import SessionTimers
from .transport import MultiprocTransport, SimpleTransport, Transport, reap_system

__all__ = ["BASES", "SYSTEM_SESSIONS", "Host", "pending_actions"]


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2.0):
            return True
    except OSError:
        return False


#: Session ids of the actor systems Hosts of this process started (tests check them).
SYSTEM_SESSIONS: set[int] = set()
BASES = ("multiprocTCPBase", "simpleSystemBase")


def _mcp_config(data_dir: str | os.PathLike[str]) -> Any:
    """The operator's ``DIR/mcp.toml`` (None: no file); `InvalidRequest` names what is
    wrong with it (the server and the field), so a bad file stops a daemon at its start."""
    from ..agents.mcp_config import McpConfigError, check_environment, load

    try:
        config = load(os.path.abspath(os.fspath(data_dir)))
        if config is not None:
            check_environment(config, os.environ)
    except McpConfigError as exc:
        raise InvalidRequest(str(exc)) from None
    return config


def _servers(urls: Iterable[str]) -> ModelServers:
    """The operator's model servers; `InvalidRequest` names one that is no server's URL."""
    if isinstance(urls, str):
        urls = (urls,)
    try:
        return default_servers(urls)
    except ValueError as exc:
        raise InvalidRequest(f"model_servers: {exc}") from None


def _close_mcp() -> None:
    """End this process's MCP connections: its sessions ran here, and so do their
    servers (a session process's end takes them along elsewhere)."""
    mcp = sys.modules.get("actors.agents.mcp_client")
    if mcp is not None:
        mcp.close_all()


def _check_base(base: str, attach: bool, admin_port: int | None, leads: bool) -> None:
    """Refuse an unknown actor-system base, attaching without a running system's port, or
    a convention leader on a system it does not start itself."""
    if base not in BASES:
        raise InvalidRequest(f"base must be one of {BASES}, got {base!r}")
    if attach and (base != "multiprocTCPBase" or admin_port is None):
        raise InvalidRequest("attach=True needs the admin_port of the running system")
    if leads and (base != "multiprocTCPBase" or attach):
        raise InvalidRequest("a convention leader starts its own multiprocTCPBase system")


def _durable(data_dir: str | os.PathLike[str], spine: str | None, durability: str) -> str:
    """The spine's URL at ``durability``: in the URL, so that every process that opens
    the spine opens it so."""
    if durability == "normal":
        return spine or ""
    return spine_spec(os.path.abspath(os.fspath(data_dir)), spine or "").durable(durability).url


class Host(SessionCommands, ConversationCommands, SessionReading, SessionTimers):
    """An embedded vertebra runtime over a data directory.

    ``base`` is ``"multiprocTCPBase"`` (each session its own process: fault-isolated) or
    ``"simpleSystemBase"`` (everything in this process: no isolation, for tests and small
    tools). With ``attach=True`` and the ``admin_port`` of a running daemon, the Host joins
    that daemon's system instead of starting one, and leaves it running on `close`.
    ``spine`` is where the log lives (a URL such as ``postgresql://...``); by default the
    SQLite file ``spine.db`` in the data directory. ``auto_seal`` makes sessions seal
    themselves (`SealPolicy`; the daemon's default is `DAEMON_SEAL_POLICY`); by default
    an embedding Host seals only when asked; ``spare_sessions``
    session processes are kept started and warmed up ahead of need (multiproc only), so
    that creating a session (a goal's child above all) does not wait for a process to start;
    ``warm_spares=False`` keeps them cold (about 1 MB less per session, a slower first turn:
    `RunnerConfig.warm_spares`).
    ``durability`` is what an acknowledged event survives on a SQLite spine: ``"normal"``
    (a crash of any process) or ``"full"`` (a power cut as well, at the cost of a sync
    per commit; `spine.LogSpec.durable`). ``snapshots`` says when sessions write their
    snapshot (`SnapshotPolicy`: by default every 1000 events or 4 MiB of payload).
    ``model_servers`` are the model servers (base URLs) a session's metadata may name; any
    other is refused when a session writes it and when a turn would send to it
    (`actors.model_servers`; provider profiles' servers are always allowed).
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        base: str = "multiprocTCPBase",
        admin_port: int | None = None,
        attach: bool = False,
        factory: Any = None,
        interceptors: Sequence[Any] | None = None,
        busy_policy: str = "enqueue",
        idle_timeout: float | None = None,
        timer_lead: float = 1.0,
        max_restarts: int = 5,
        restart_window: float = 60.0,
        timeout: float = 15.0,
        projections: bool = True,
        spine: str | None = None,
        auto_seal: SealPolicy | None = None,
        convention_bind: str | None = None,
        spare_sessions: int = 3,
        warm_spares: bool = True,
        durability: str = "normal",
        prices: Mapping[str, Any] | None = None,
        snapshots: SnapshotPolicy | None = None,
        model_servers: Iterable[str] = (),
    ) -> None:
        _check_base(base, attach, admin_port, convention_bind is not None)
        servers = _servers(model_servers)
        if not attach:
            factory = with_model_servers(with_mcp(factory, _mcp_config(data_dir)), servers)
        cfg = RunnerConfig(
            data_dir=os.path.abspath(os.fspath(data_dir)),
            interceptors=tuple(interceptors) if interceptors is not None else (SlashCommands(),),
            factory=factory,
            busy_policy=BusyPolicy.parse(busy_policy),
            idle_timeout=idle_timeout,
            timer_lead=timer_lead,
            restart=RestartPolicy(max_restarts=max_restarts, window=restart_window),
            projections=projections,
            spine=_durable(data_dir, spine, durability),
            auto_seal=auto_seal or SealPolicy(),
            snapshots=snapshots or SnapshotPolicy(),
            cluster=convention_bind is not None,
            # Everything runs in this process there: no process start to save.
            spare_sessions=0 if base == "simpleSystemBase" else spare_sessions,
            warm_spares=warm_spares,
            prices=check_prices(prices) if prices else {},
            model_servers=servers,
        )
        self._init(cfg, convention_bind, base, timeout, attach, admin_port)

    def _init(
        self,
        cfg: RunnerConfig,
        convention_bind: str | None,
        base: str,
        timeout: float,
        attach: bool,
        admin_port: int | None,
    ) -> None:
        #: A convention leader's one listening address (None: a single loopback host).
        self.convention_bind = convention_bind
        #: The model servers sessions may name (`actors.model_servers`).
        self.model_servers = cfg.model_servers
        self.data_dir = cfg.data_dir
        #: The spine's URL as given (empty: the SQLite file in the data directory).
        self.spine = cfg.spine
        private_dir(self.data_dir)
        self.base = base
        self.timeout = timeout
        self._simple = base == "simpleSystemBase"
        self._attach = attach
        self._closed = False
        self._sinks = Sinks()
        self.system_session = 0
        self._connect(cfg, admin_port)

    def _connect(self, cfg: RunnerConfig, admin_port: int | None) -> None:
        """Open the transport, start the guardian and the Runner (or find them), open the
        spine; on any failure, shut down what was started."""
        self._transport = self._open_transport(admin_port)
        self._runtime = Runtime(self._transport, self.timeout, follow_restarts=not self._simple)
        try:
            self._log = open_log(spine_spec(self.data_dir, cfg.spine))
            self._start(cfg)
        except BaseException:
            self._shutdown_system()
            raise

    def _open_transport(self, admin_port: int | None) -> Transport:
        if self.convention_bind is not None:
            from .member import widen_transmits

            bind_only(self.convention_bind)
            widen_transmits()
        loopback_only()
        orphan_guard()
        if self._simple:
            self.admin_port = 0
            return SimpleTransport(self.data_dir, self._sinks.deliver)
        self.admin_port = admin_port or free_port()
        if self._attach and not _listening(self.admin_port):
            # Thespian would start an actor system of its own on a port nobody serves.
            raise HostTimeout(f"no actor system listens on admin port {self.admin_port}")
        caps = None
        if self.convention_bind is not None:
            # The leader names itself the convention's address: members join it there.
            caps = {"Convention Address.IPv4": (self.convention_bind, self.admin_port)}
        return MultiprocTransport(
            self.data_dir, self._sinks.deliver, self.admin_port, self._attach, caps
        )

    def _start(self, cfg: RunnerConfig) -> None:
        self._runtime.start(cfg)
        if not self._simple and not self._attach:
            self.system_session = os.getsid(self._runtime.guardian_pid())
            SYSTEM_SESSIONS.add(self.system_session)
        # Keep the spine's cross-process watcher running for the Host's life, so that
        # every subscription (wait_turn opens one per call) is woken from its first read.
        self._log.watch()
        if not self._attach:
            # The log's background work (on SQLite the WAL's checkpoints, which sessions
            # leave to this process) runs here, in a process that forks no more actor
            # processes from here on: an acknowledgement never waits for it.
            spine_spec(self.data_dir, self.spine).backend.start_upkeep(self._log)

    @property
    def _asys(self) -> Any:
        """The Thespian actor system (tests open their own endpoints on it)."""
        return self._transport.system

    @property
    def _runner(self) -> Any:
        """The current Runner's address (tests talk to it directly)."""
        return self._runtime.runner

    def _request(self, msg: Any, *, timeout: float | None = None) -> Any:
        """The Runner's reply to ``msg`` (a failure reply raises its error)."""
        if self._closed:
            raise HostClosed("the host is closed")
        return self._runtime.request(msg, self.timeout if timeout is None else timeout)

    # -- the Runner's own answers: sessions it knows, counters, processes ----------------

    def get(self, session_id: str) -> m.SessionInfo:
        """Where a session stands; a passivated one is brought back.

        Raises `SessionNotFound` for an unknown id.
        """
        reply = self._request(m.GetSession(request_id=request_id(), session_id=session_id))
        info: m.SessionInfo = reply.info
        return info

    def register(self, session_id: str) -> m.SessionInfo:
        """Insert a session into the Runner's registry without checking for duplicates."""
        return self._request(m.RegisterSession(request_id=request_id(), session_id=session_id)).info  # type: ignore[no-any-return]

    def stats(self) -> dict[str, int]:
        """The Runner's counters, plus ``host_sink_failures`` (this Host's raising sinks)."""
        return dict(self.runner_stats().counters)

    def runner_stats(self) -> m.RunnerStats:
        """The Runner's counters (``host_sink_failures`` added) and gauges: ingress queued
        per session, each sink's unacknowledged batches, the spine append latency."""
        reply = self._request(m.GetRunnerStats(request_id=request_id()))
        assert isinstance(reply, m.RunnerStats)
        counters = {**reply.counters, "host_sink_failures": self._sinks.failures}
        return attrs.evolve(reply, counters=counters)

    def hosts(self) -> list[dict[str, Any]]:
        """The member hosts a convention leader's Runner knows (empty on a single host):
        ``host``, ``alive``, ``capacity`` and ``sessions`` placed there."""
        reply = self._request(m.GetHostTable(request_id=request_id()))
        return [dict(row) for row in reply.hosts]

    def session_pid(self, session_id: str) -> int:
        """The OS process id of a live session (bringing it back if passivated)."""
        reply = self._request(SessionPid(request_id=request_id(), session_id=session_id))
        assert isinstance(reply, Pong)
        return reply.pid

    def runner_pid(self) -> int:
        reply = self._request(Ping(request_id=request_id()))
        assert isinstance(reply, Pong)
        return reply.pid

    # -- sinks -------------------------------------------------------------------------

    def add_sink(self, fn: SinkFn, kinds: Iterable[str] = ()) -> str:
        """Call ``fn(session_id, event, live)`` for events of every session, live.

        ``event`` is a stored event (or None) and ``live`` an ephemeral (kind, severity,
        text) item such as a notice (or None), in the order they happened: a live item
        comes after the stored event it follows. ``kinds`` filters; empty means all. A sink
        that raises is logged and counted, and never stops delivery to the others. Sinks
        see live traffic; use `subscribe` for an exact replay.
        """
        if not callable(fn):
            raise InvalidRequest("a sink must be callable")
        sink_id = self._sinks.add(fn, kinds)
        if hasattr(self._transport, "current_runner"):
            self._transport.current_runner = self._current_runner
        if not self._transport.add_sink(self._runtime.runner, self.timeout):
            self._sinks.remove(sink_id)
            raise HostTimeout("the sink pump did not start")
        return sink_id

    def _current_runner(self) -> Any:
        """The Runner's address after asking the guardian (for the sink pump)."""
        self._runtime.refresh()
        return self._runtime.runner

    def remove_sink(self, sink_id: str) -> None:
        self._sinks.remove(sink_id)

    # -- shutdown ----------------------------------------------------------------------

    def close(self) -> None:
        """Stop the pump, release thread endpoints, and shut the actor system down
        (unless attached to someone else's)."""
        if self._closed:
            return
        if not self._simple and not self._attach:
            # A spare session process the Runner starts while the system shuts down would
            # hold the shutdown up: have it start none from here on.
            with contextlib.suppress(Exception):
                self._runtime.request(StopSpares(request_id=request_id()), min(self.timeout, 5))
        self._closed = True
        self._log.unwatch()
        self._log.close()
        self._shutdown_system()
        if self._simple:
            _close_mcp()

    def _shutdown_system(self) -> None:
        # The transport stops its pump before the system goes: nothing may listen on, or
        # acknowledge to, a system that is shutting down.
        self._transport.shutdown()
        if self.system_session:
            reap_system(self.system_session)

    def __enter__(self) -> Host:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
