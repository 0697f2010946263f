"""`Host`: the Python API for embedding vertebra.

A Host starts (or attaches to) an actor system, makes sure a guardian and a Runner run in
it, and turns the message protocol into method calls. It is safe to call from many
threads; how it talks to the system (a private endpoint per thread on multiproc bases,
a lock and a pump on ``simpleSystemBase``) is its `Transport`'s business. Every request
carries a ``request_id`` and its reply is matched by it, the projection actor's included.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from projections import (
    IndexReply,
    Progress,
    ProgressReply,
    Projection,
    QueryIndex,
    QueryProgress,
    QueryStatus,
    Rebuild,
    RebuildCompleted,
    RebuildProgress,
    RebuildStartedReply,
    SessionsIndex,
    StatusReply,
    project_stored,
    secret_problem,
)
from spine import (
    Event,
    Kind,
    Log,
    SqliteLog,
    history,
    new_session_id,
    open_log,
    private_dir,
    subscribe,
    validate_session_id,
)

from .. import messages as m
from ..errors import ActorsError, HostTimeout, InvalidRequest
from ..interceptors import SlashCommands
from ..messages import Ping, Pong, RunnerConfig, SessionPid
from ..policy import BusyPolicy, RestartPolicy, SealPolicy
from ..runner import spine_spec
from ..runner.protocol import StopSpares
from ..session.goals import budget_problem
from ..system import bind_only, free_port, loopback_only, orphan_guard
from .goals import runs_in_flight, wait_goal
from .replies import request_id
from .runtime import Runtime
from .sinks import SinkFn, Sinks
from .subscription import SessionSubscription
from .transport import MultiprocTransport, SimpleTransport, Transport, reap_system

log = logging.getLogger("vertebra.host")


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2.0):
            return True
    except OSError:
        return False


#: Session ids of the actor systems Hosts of this process started (tests check them).
SYSTEM_SESSIONS: set[int] = set()
BASES = ("multiprocTCPBase", "simpleSystemBase")


def pending_actions(log: Log, session_id: str) -> list[Event]:
    """The ``action.pending`` events of ``session_id`` not yet decided, oldest first."""
    waiting: dict[int, Event] = {}
    for ev in history(log, session_id):
        if ev.kind == Kind.ACTION_PENDING:
            waiting[ev.call] = ev
        elif ev.kind in (Kind.ACTION_ADMITTED, Kind.ACTION_REJECTED) and ev.call in waiting:
            del waiting[ev.call]
        elif ev.kind in (Kind.TURN_COMPLETED, Kind.TURN_CANCELLED):
            waiting = {c: e for c, e in waiting.items() if e.turn != ev.turn}
    return list(waiting.values())


class Host:
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
    that creating a session (a goal's child above all) does not wait for a process to start.
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
        max_restarts: int = 5,
        restart_window: float = 60.0,
        timeout: float = 15.0,
        projections: bool = True,
        spine: str | None = None,
        auto_seal: SealPolicy | None = None,
        convention_bind: str | None = None,
        spare_sessions: int = 3,
    ) -> None:
        if base not in BASES:
            raise InvalidRequest(f"base must be one of {BASES}, got {base!r}")
        if attach and (base != "multiprocTCPBase" or admin_port is None):
            raise InvalidRequest("attach=True needs the admin_port of the running system")
        cfg = RunnerConfig(
            data_dir=os.path.abspath(os.fspath(data_dir)),
            interceptors=tuple(interceptors) if interceptors is not None else (SlashCommands(),),
            factory=factory,
            busy_policy=BusyPolicy.parse(busy_policy),
            idle_timeout=idle_timeout,
            restart=RestartPolicy(max_restarts=max_restarts, window=restart_window),
            projections=projections,
            spine=spine or "",
            auto_seal=auto_seal or SealPolicy(),
            cluster=convention_bind is not None,
            # Everything runs in this process there: no process start to save.
            spare_sessions=0 if base == "simpleSystemBase" else spare_sessions,
        )
        if convention_bind is not None and (base != "multiprocTCPBase" or attach):
            raise InvalidRequest("a convention leader starts its own multiprocTCPBase system")
        #: A convention leader's one listening address (None: a single loopback host).
        self.convention_bind = convention_bind
        self.data_dir = cfg.data_dir
        private_dir(self.data_dir)
        self.base = base
        self.timeout = timeout
        self._simple = base == "simpleSystemBase"
        self._attach = attach
        self._closed = False
        self._sinks = Sinks()
        self.system_session = 0
        self._transport = self._open_transport(admin_port)
        self._runtime = Runtime(self._transport, timeout, follow_restarts=not self._simple)
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
        if not self._attach and isinstance(self._log, SqliteLog):
            # Sessions leave the WAL's checkpoints to this process, which forks no more
            # actor processes from here on: an acknowledgement never waits for one.
            self._log.start_checkpoints()

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
            raise ActorsError("the host is closed")
        return self._runtime.request(msg, self.timeout if timeout is None else timeout)

    # -- sessions ----------------------------------------------------------------------

    def create(
        self, session_id: str | None = None, metadata: Mapping[str, str] | None = None
    ) -> str:
        """Create a session and return its id (a fresh UUIDv7 unless given).

        Raises `SessionAlreadyExists` if the id is taken; the existing session is untouched.
        """
        sid = session_id if session_id is not None else new_session_id()
        try:
            validate_session_id(sid)
        except ValueError as exc:
            raise InvalidRequest(str(exc), session_id=str(sid)) from None
        problem = secret_problem(metadata or {})
        if problem is not None:
            raise InvalidRequest(problem, session_id=sid)
        self._request(
            m.CreateSession(request_id=request_id(), session_id=sid, metadata=dict(metadata or {}))
        )
        return sid

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

    def sessions(self) -> list[m.SessionInfo]:
        """Every session the spine knows, with its state. A session the Runner has not
        loaded since it started is "passivated" to the Runner; the sessions index tells
        whether it is in fact closed or failed."""
        infos = list(self._request(m.ListSessions(request_id=request_id())).sessions)
        index = self.index() if any(i.state == "passivated" for i in infos) else None
        if index is None:
            return infos
        out = []
        for info in infos:
            known = index.get(info.session_id)
            if info.state == "passivated" and known is not None and known.terminal:
                info = attrs.evolve(info, state=known.terminal)
            out.append(info)
        return out

    def send(self, session_id: str, text: str, *, key: str | None = None) -> m.Ack:
        """Send a user message; returns once its event is committed (or the interceptors
        consumed it). Retrying with the same ``key`` never stores it twice."""
        if not isinstance(text, str):
            raise InvalidRequest("a message's text must be a string")
        msg = m.SendMessage(
            request_id=request_id(), session_id=session_id, key=key or request_id(), text=text
        )
        return self._request(msg)  # type: ignore[no-any-return]

    def interrupt(
        self, session_id: str, *, reason: str = "interrupted", key: str | None = None
    ) -> m.Ack:
        """Cut the running turn off; it closes with ``turn.cancelled`` keeping partial output."""
        msg = m.Interrupt(
            request_id=request_id(), session_id=session_id, key=key or request_id(), reason=reason
        )
        return self._request(msg)  # type: ignore[no-any-return]

    def set_metadata(
        self, session_id: str, properties: Mapping[str, str | None], *, key: str | None = None
    ) -> m.Ack:
        """Change metadata (``None`` deletes a key); stored as a properties event."""
        for k, v in properties.items():
            if not isinstance(k, str) or not k or (v is not None and not isinstance(v, str)):
                raise InvalidRequest(
                    f"metadata must map non-empty string keys to strings or None, got {k!r}: {v!r}"
                )
        problem = secret_problem(properties)
        if problem is not None:
            raise InvalidRequest(problem, session_id=session_id)
        msg = m.SetMetadata(
            request_id=request_id(),
            session_id=session_id,
            key=key or request_id(),
            properties=dict(properties),
        )
        return self._request(msg)  # type: ignore[no-any-return]

    def approve(
        self, session_id: str, call: int, note: str = "", *, key: str | None = None
    ) -> m.Ack:
        """Approve the governed action ``call`` that waits for a human (see `pending`): it
        runs once, even if the session restarted while waiting. Approving it again is
        acknowledged as a duplicate; an unknown or already rejected call is
        `InvalidRequest`."""
        return self._decide(session_id, call, True, note, key)

    def reject(
        self, session_id: str, call: int, reason: str = "", *, key: str | None = None
    ) -> m.Ack:
        """Refuse the waiting action ``call``: ``action.rejected`` with fault
        ``approval_rejected``, and the model is told why."""
        return self._decide(session_id, call, False, reason, key)

    def _decide(
        self, session_id: str, call: int, approve: bool, note: str, key: str | None
    ) -> m.Ack:
        if not isinstance(call, int) or isinstance(call, bool) or call <= 0:
            raise InvalidRequest(f"call must be a positive integer, got {call!r}")
        if not isinstance(note, str):
            raise InvalidRequest("the note must be a string")
        msg = m.DecideAction(
            request_id=request_id(),
            session_id=session_id,
            key=key or request_id(),
            call=call,
            approve=approve,
            note=note,
        )
        return self._request(msg)  # type: ignore[no-any-return]

    def pending(self, session_id: str) -> list[Event]:
        """The actions of ``session_id`` waiting for approval (their ``action.pending``
        events: ``call``, ``tool``, ``toolUseID``, ``input``), oldest first; read from
        the log."""
        return pending_actions(self._log, session_id)

    def submit(
        self,
        session_id: str,
        objective: str,
        *,
        budget: Mapping[str, int] | None = None,
        key: str | None = None,
    ) -> m.Ack:
        """Open a goal run on ``session_id``: the session drives turns on its own until it
        converges or stalls (`wait`). ``budget`` limits ``max_turns``, ``max_tokens``,
        ``max_tool_calls`` and ``max_seconds`` from the run's start; exhausting one is an
        ``action.rejected`` (``budget_exceeded``), then ``session.stalled``."""
        if not isinstance(objective, str) or not objective.strip():
            raise InvalidRequest("a goal's objective must be a non-empty string")
        problem = budget_problem(budget or {})
        if problem:
            raise InvalidRequest(problem, session_id=session_id)
        msg = m.SubmitGoal(
            request_id=request_id(),
            session_id=session_id,
            key=key or request_id(),
            objective=objective,
            budget=dict(budget or {}),
        )
        return self._request(msg)  # type: ignore[no-any-return]

    def resume(self, session_id: str, *, key: str | None = None) -> m.Ack:
        """Continue a goal run cut off by a crash or a daemon restart, on the same stream
        (no second ``session.started``). The Ack is ``consumed`` when no run was in flight."""
        msg = m.ResumeGoal(request_id=request_id(), session_id=session_id, key=key or request_id())
        return self._request(msg)  # type: ignore[no-any-return]

    def resume_all(self) -> list[str]:
        """Resume every goal run still in flight in the spine (after a daemon restart);
        returns the sessions resumed. Reads every stream once."""
        resumed = []
        for sid in runs_in_flight(self._log):
            try:
                if not self.resume(sid).consumed:
                    resumed.append(sid)
            except ActorsError as exc:  # one session that cannot come back stops no other
                log.warning("goal run of %s not resumed: %s", sid, exc)
        return resumed

    def wait(self, session_id: str, timeout: float | None = None) -> str:
        """The final answer of the session's latest goal run, once it converged; raises
        `GoalStalled` with the reason if it stalled, `HostTimeout` if it has not ended
        within ``timeout`` seconds (None: wait as long as it takes). Reads the stream, so
        it answers for a run that ended before the call, and across daemon restarts."""
        return wait_goal(self._log, session_id, timeout)

    def switch(self, session_id: str, target: str, *, key: str | None = None) -> m.Ack:
        """Record that the conduit moves to ``target`` (a session switch event)."""
        msg = m.SwitchSession(
            request_id=request_id(), session_id=session_id, key=key or request_id(), target=target
        )
        return self._request(msg)  # type: ignore[no-any-return]

    def seal(self, session_id: str) -> m.SealReply:
        """Seal what is new in the session's stream: a signed Merkle root over the stored
        bytes, appended as ``record.sealed`` by the session itself. ``seq`` 0: nothing new."""
        return self._request(m.SealSession(request_id=request_id(), session_id=session_id))  # type: ignore[no-any-return]

    def verify(self, session_id: str) -> m.VerifyReply:
        """Verify every seal of the session; ``record.verified`` records the outcome, pass
        or failure (``ok`` and ``summary`` say which)."""
        return self._request(m.VerifySession(request_id=request_id(), session_id=session_id))  # type: ignore[no-any-return]

    def close_session(self, session_id: str) -> None:
        """Close one session: it records a "closed" lifecycle event and its actor stops."""
        self._request(m.CloseSession(request_id=request_id(), session_id=session_id))

    def revive(self, session_id: str, reason: str = "") -> int:
        """Bring back a session that failed past its restart budget; the decision is
        stored as a ``recovered`` lifecycle event naming ``reason``, whose seq is returned.
        The next request starts the session. `InvalidRequest` if it is not failed."""
        reply = self._request(
            m.ReviveSession(request_id=request_id(), session_id=session_id, reason=reason)
        )
        return int(reply.seq)

    def close_all(self) -> None:
        """Close every session; the Runner takes no more ingress afterwards."""
        self._request(m.CloseAll(request_id=request_id()))

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

    # -- reading -----------------------------------------------------------------------

    def history(self, session_id: str) -> list[Event]:
        """Every stored event of the session, in order (empty for an unknown id)."""
        return history(self._log, session_id)

    def subscribe(
        self, session_id: str, after_seq: int = 0, kinds: Iterable[str] | None = None
    ) -> SessionSubscription:
        """Backlog after ``after_seq``, then live events, exactly once and in order.

        Ends (``get`` returns None, iteration stops) once the session is closed and every
        event up to its closing lifecycle event was handed out, like the seed's immediately
        closed channel. Reads the spine directly, so it survives session crashes and restarts.
        """
        return SessionSubscription(self._log, session_id, after_seq, kinds)

    def wait_turn(self, session_id: str, after_seq: int = 0, timeout: float = 30.0) -> Event:
        """The first ``turn.completed`` or ``turn.cancelled`` after ``after_seq``."""
        with subscribe(
            self._log, session_id, after_seq, (Kind.TURN_COMPLETED, Kind.TURN_CANCELLED)
        ) as sub:
            ev = sub.get(timeout)
        if ev is None:
            raise HostTimeout(f"no turn ended in session {session_id} within {timeout}s")
        return ev

    def status(self, session_id: str) -> Projection:
        """The session's status projection (`projections.Projection`).

        Answered by the projection actor when it has folded the session up to its last
        seq; otherwise (it is rebuilding, or a few milliseconds behind) folded here from the
        stream, so the answer is always exact.
        """
        last = self._log.last_seq(session_id)
        if last > 0:
            reply = self._ask_projection(QueryStatus(request_id=request_id(), session=session_id))
            if (
                isinstance(reply, StatusReply)
                and reply.status is not None
                and reply.info is not None
                and reply.info.last_seq == last
            ):
                return reply.status
        return project_stored(self._log, session_id)

    def index(self) -> SessionsIndex | None:
        """The sessions index (created, last seq, last activity, terminal state of every
        session), or None while the projection actor rebuilds or when it is disabled."""
        reply = self._ask_projection(QueryIndex(request_id=request_id()))
        return reply.index if isinstance(reply, IndexReply) else None

    def projection_pid(self) -> int | None:
        """The projection actor's process id (None if it does not answer)."""
        reply = self._ask_projection(QueryProgress(request_id=request_id()))
        return reply.pid if isinstance(reply, ProgressReply) else None

    def rebuild(
        self, on_progress: Callable[[Progress], None] | None = None, timeout: float = 3600.0
    ) -> RebuildCompleted:
        """Rebuild the projections from position 0 and wait until done; ``on_progress``
        gets the reducer's `Progress` as it goes (the projection actor reports it about
        ten times a second). Queries are answered by folding the stream meanwhile."""
        rid = request_id()
        started = self._ask_projection(Rebuild(request_id=rid))
        if not isinstance(started, RebuildStartedReply):
            raise ActorsError("no projection actor answers (projections disabled?)")
        if on_progress is not None:
            on_progress(started.progress)
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            msg = self._transport.wait(rid, min(left, 1.0))
            if isinstance(msg, RebuildCompleted):
                if on_progress is not None:
                    on_progress(msg.progress)
                return msg
            if isinstance(msg, RebuildProgress) and on_progress is not None:
                on_progress(msg.progress)
        raise HostTimeout(f"the projections were not rebuilt within {timeout}s")

    def _ask_projection(self, msg: Any) -> Any:
        return None if self._closed else self._runtime.ask_projection(msg)

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
