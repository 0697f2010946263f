"""`Host`: the Python API for embedding vertebra.

A Host starts (or attaches to) an actor system, makes sure a guardian and a Runner run in
it, and turns the message protocol into method calls. It is safe to call from many threads:
on multiproc bases each thread gets its own private endpoint (a shared one would deliver
replies to the wrong thread); on ``simpleSystemBase``, where ``private()`` hangs, calls are
serialized by a lock and a pump thread keeps turn workers' messages flowing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
from thespian.actors import ActorSystem

from projections import (
    IndexReply,
    ProgressReply,
    Projection,
    QueryIndex,
    QueryProgress,
    QueryStatus,
    Rebuilding,
    SessionsIndex,
    StatusReply,
    project,
)
from spine import (
    Event,
    Kind,
    SqliteLog,
    StreamSubscription,
    decode_event,
    history,
    new_session_id,
    subscribe,
    validate_session_id,
)

from . import messages as m
from .errors import ERRORS, ActorsError, HostTimeout, InvalidRequest
from .interceptors import SlashCommands
from .messages import GetRunner, Ping, Pong, RunnerAddress, RunnerConfig, SessionPid
from .policy import BusyPolicy, RestartPolicy
from .runner.actor import Guardian, spine_path
from .system import free_port, log_defs, loopback_only, processes_in_session

log = logging.getLogger("vertebra.host")

GUARDIAN_NAME = "vertebra.guardian"
#: Seconds between checks, while a request waits, that the Runner is still the same one.
RUNNER_CHECK = 0.25
#: Seconds `Host.close` gives the actor processes to exit before it kills them.
SHUTDOWN_GRACE = 10.0
#: Seconds to wait for the projection actor before looking it up again (or folding here).
PROJECTION_TIMEOUT = 1.0

#: Session ids of the actor systems Hosts of this process started (tests check them).
SYSTEM_SESSIONS: set[int] = set()
BASES = ("multiprocTCPBase", "simpleSystemBase")

SinkFn = Callable[[str, Event | None, tuple[str, str, str] | None], None]


class Host:
    """An embedded vertebra runtime over a data directory.

    ``base`` is ``"multiprocTCPBase"`` (each session its own process: fault-isolated) or
    ``"simpleSystemBase"`` (everything in this process: no isolation, for tests and small
    tools). With ``attach=True`` and the ``admin_port`` of a running daemon, the Host joins
    that daemon's system instead of starting one, and leaves it running on `close`.
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
    ) -> None:
        if base not in BASES:
            raise InvalidRequest(f"base must be one of {BASES}, got {base!r}")
        policy = BusyPolicy.parse(busy_policy)
        restart = RestartPolicy(max_restarts=max_restarts, window=restart_window)
        self.data_dir = os.path.abspath(os.fspath(data_dir))
        os.makedirs(self.data_dir, exist_ok=True)
        self.base = base
        self.timeout = timeout
        self._simple = base == "simpleSystemBase"
        self._attach = attach
        self._closed = False
        self._lock = threading.RLock()
        self._local = threading.local()
        self._contexts: list[Any] = []
        self._ctx_lock = threading.Lock()
        self._sinks: dict[str, tuple[frozenset[str], SinkFn]] = {}
        self._sink_failures = 0
        self._sinks_logged: set[Any] = set()
        self._pump: threading.Thread | None = None
        self._pump_stop = threading.Event()
        self._sink_ready = threading.Event()
        loopback_only()
        if self._simple:
            self.admin_port = 0
            self._asys = ActorSystem(
                "simpleSystemBase", logDefs=log_defs(self.data_dir), transientUnique=True
            )
        else:
            if attach and admin_port is None:
                raise InvalidRequest("attach=True needs the admin_port of the running system")
            self.admin_port = admin_port or free_port()
            self._asys = ActorSystem(
                "multiprocTCPBase",
                {"Admin Port": self.admin_port},
                logDefs=log_defs(self.data_dir),
                transientUnique=not attach,
            )
        self._log = SqliteLog(spine_path(self.data_dir))
        try:
            self._guardian = self._asys.createActor(Guardian, globalName=GUARDIAN_NAME)
            cfg = RunnerConfig(
                data_dir=self.data_dir,
                interceptors=tuple(interceptors)
                if interceptors is not None
                else (SlashCommands(),),
                factory=factory,
                busy_policy=policy,
                idle_timeout=idle_timeout,
                restart=restart,
                projections=projections,
            )
            reply = self._raw_ask(self._guardian, cfg, "config", timeout)
            if not isinstance(reply, RunnerAddress):
                raise HostTimeout(f"the runtime did not start within {timeout}s")
            self._runner, self._generation = reply.address, reply.generation
            self._projection = reply.projection
            self.system_session = 0
            if not self._simple and not attach:
                rid = _rid()
                pong = self._raw_ask(self._guardian, Ping(request_id=rid), rid, timeout)
                self.system_session = os.getsid(pong.pid)
                SYSTEM_SESSIONS.add(self.system_session)
            if self._simple:
                self._start_pump()
            # Keep the spine's cross-process watcher running for the Host's life, so that
            # every subscription (wait_turn opens one per call) is woken from its first read.
            self._log.watch()
        except BaseException:
            self._shutdown_system()
            raise

    # -- plumbing ----------------------------------------------------------------------

    def _ctx(self) -> Any:
        if self._simple:
            return self._asys
        ctx = getattr(self._local, "ctx", None)
        if ctx is None:
            cm = self._asys.private()
            ctx = cm.__enter__()
            self._local.ctx = ctx
            with self._ctx_lock:
                self._contexts.append(cm)
        return ctx

    def _stash(self) -> dict[str, Any]:
        st: dict[str, Any] | None = getattr(self._local, "stash", None)
        if st is None:
            st = self._local.stash = {}
        return st

    def _raw_ask(self, to: Any, msg: Any, request_id: str, timeout: float) -> Any:
        """Ask and wait for the reply with ``request_id``.

        Other messages are pushes (handed to sinks) or replies to other requests of this
        thread, kept until asked for: a reply is never lost to the wrong wait.
        """
        with self._lock if self._simple else contextlib.nullcontext():
            ctx = self._ctx()
            reply = ctx.ask(to, msg, timeout)
            return self._await(ctx, request_id, reply, time.monotonic() + timeout)

    def _await(self, ctx: Any, request_id: str, reply: Any, deadline: float) -> Any:
        stash = self._stash()
        while True:
            if reply is not None:
                rid = getattr(reply, "request_id", None)
                if rid == request_id:
                    return reply
                if rid is not None:
                    stash[rid] = reply
                    if len(stash) > 1000:
                        stash.pop(next(iter(stash)))
                else:
                    self._push(reply)
            if request_id in stash:
                return stash.pop(request_id)
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            reply = ctx.listen(left)

    def _request(self, msg: Any, *, timeout: float | None = None) -> Any:
        """Send a request to the Runner and wait for its reply.

        While waiting, the guardian is asked every `RUNNER_CHECK` seconds whether the Runner
        was replaced; if so the request goes to the new one (every request is idempotent:
        ingress by key, the rest by nature), so a Runner crash costs well under a second.
        """
        if self._closed:
            raise ActorsError("the host is closed")
        t = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + t
        rid = msg.request_id
        with self._lock if self._simple else contextlib.nullcontext():
            ctx = self._ctx()
            reply = ctx.ask(self._runner, msg, min(RUNNER_CHECK, t))
            while True:
                reply = self._await(ctx, rid, reply, min(deadline, time.monotonic() + RUNNER_CHECK))
                if reply is not None:
                    break
                if time.monotonic() >= deadline:
                    raise HostTimeout(f"no reply to {type(msg).__name__} within {t}s")
                if not self._simple and self._refresh_runner(ctx):
                    ctx.tell(self._runner, msg)
        if isinstance(reply, m.RequestFailed):
            cls = ERRORS.get(reply.error, ActorsError)
            raise cls(reply.message, session_id=reply.session_id)
        return reply

    def _refresh_runner(self, ctx: Any) -> bool:
        rid = _rid()
        reply = ctx.ask(self._guardian, GetRunner(request_id=rid), self.timeout)
        reply = self._await(ctx, rid, reply, time.monotonic() + self.timeout)
        if not isinstance(reply, RunnerAddress):
            return False
        changed = bool(reply.generation != self._generation or reply.address != self._runner)
        self._runner, self._generation = reply.address, reply.generation
        self._projection = reply.projection
        return changed

    def _push(self, msg: Any) -> None:
        if isinstance(msg, m.SinkBatch):
            self._deliver_sinks(msg)

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
        self._request(
            m.CreateSession(request_id=_rid(), session_id=sid, metadata=dict(metadata or {}))
        )
        return sid

    def get(self, session_id: str) -> m.SessionInfo:
        """Where a session stands; a passivated one is brought back.

        Raises `SessionNotFound` for an unknown id.
        """
        reply = self._request(m.GetSession(request_id=_rid(), session_id=session_id))
        info: m.SessionInfo = reply.info
        return info

    def register(self, session_id: str) -> m.SessionInfo:
        """Insert a session into the Runner's registry without checking for duplicates."""
        return self._request(m.RegisterSession(request_id=_rid(), session_id=session_id)).info  # type: ignore[no-any-return]

    def sessions(self) -> list[m.SessionInfo]:
        """Every session the spine knows, with its state. A session the Runner has not
        loaded since it started is "passivated" to the Runner; the sessions index tells
        whether it is in fact closed or failed."""
        infos = list(self._request(m.ListSessions(request_id=_rid())).sessions)
        index = self.index() if any(i.state == "passivated" for i in infos) else None
        if index is None:
            return infos
        out = []
        for info in infos:
            known = index.get(info.session_id)
            if (
                info.state == "passivated"
                and known is not None
                and known.terminal
                in (
                    "closed",
                    "failed",
                )
            ):
                info = attrs.evolve(info, state=known.terminal)
            out.append(info)
        return out

    def send(self, session_id: str, text: str, *, key: str | None = None) -> m.Ack:
        """Send a user message; returns once its event is committed (or the interceptors
        consumed it). Retrying with the same ``key`` never stores it twice."""
        if not isinstance(text, str):
            raise InvalidRequest("a message's text must be a string")
        msg = m.SendMessage(request_id=_rid(), session_id=session_id, key=key or _rid(), text=text)
        return self._request(msg)  # type: ignore[no-any-return]

    def interrupt(
        self, session_id: str, *, reason: str = "interrupted", key: str | None = None
    ) -> m.Ack:
        """Cut the running turn off; it closes with ``turn.cancelled`` keeping partial output."""
        msg = m.Interrupt(
            request_id=_rid(), session_id=session_id, key=key or _rid(), reason=reason
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
        msg = m.SetMetadata(
            request_id=_rid(), session_id=session_id, key=key or _rid(), properties=dict(properties)
        )
        return self._request(msg)  # type: ignore[no-any-return]

    def switch(self, session_id: str, target: str, *, key: str | None = None) -> m.Ack:
        msg = m.SwitchSession(
            request_id=_rid(), session_id=session_id, key=key or _rid(), target=target
        )
        return self._request(msg)  # type: ignore[no-any-return]

    def seal(self, session_id: str) -> m.SealReply:
        """Seal what is new in the session's stream: a signed Merkle root over the stored
        bytes, appended as ``record.sealed`` by the session itself. ``seq`` 0: nothing new."""
        return self._request(m.SealSession(request_id=_rid(), session_id=session_id))  # type: ignore[no-any-return]

    def verify(self, session_id: str) -> m.VerifyReply:
        """Verify every seal of the session; on success ``record.verified`` is appended."""
        return self._request(m.VerifySession(request_id=_rid(), session_id=session_id))  # type: ignore[no-any-return]

    def close_session(self, session_id: str) -> None:
        """Close one session: it records a "closed" lifecycle event and its actor stops."""
        self._request(m.CloseSession(request_id=_rid(), session_id=session_id))

    def close_all(self) -> None:
        """Close every session; the Runner takes no more ingress afterwards."""
        self._request(m.CloseAll(request_id=_rid()))

    def stats(self) -> dict[str, int]:
        counters = dict(self._request(m.GetRunnerStats(request_id=_rid())).counters)
        counters["host_sink_failures"] = self._sink_failures
        return counters

    def session_pid(self, session_id: str) -> int:
        """The OS process id of a live session (bringing it back if passivated)."""
        reply = self._request(SessionPid(request_id=_rid(), session_id=session_id))
        assert isinstance(reply, Pong)
        return reply.pid

    def runner_pid(self) -> int:
        reply = self._request(Ping(request_id=_rid()))
        assert isinstance(reply, Pong)
        return reply.pid

    # -- reading -----------------------------------------------------------------------

    def history(self, session_id: str) -> list[Event]:
        """Every stored event of the session, in order (empty for an unknown id)."""
        return history(self._log, session_id)

    def subscribe(
        self, session_id: str, after_seq: int = 0, kinds: Iterable[str] | None = None
    ) -> StreamSubscription:
        """Backlog after ``after_seq``, then live events, exactly once and in order.

        Reads the spine directly, so it survives session crashes and restarts.
        """
        return subscribe(self._log, session_id, after_seq, kinds)

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
        if self._projection is not None and last > 0:
            reply = self._ask_projection(QueryStatus(session=session_id), (StatusReply, Rebuilding))
            if (
                isinstance(reply, StatusReply)
                and reply.status is not None
                and reply.info is not None
                and reply.info.last_seq == last
            ):
                return reply.status
        return project(self.history(session_id))

    def index(self) -> SessionsIndex | None:
        """The sessions index (created, last seq, last activity, terminal state of every
        session), or None while the projection actor rebuilds or when it is disabled."""
        reply = self._ask_projection(QueryIndex(), (IndexReply, Rebuilding))
        return reply.index if isinstance(reply, IndexReply) else None

    def projection_pid(self) -> int | None:
        """The projection actor's process id (None if it does not answer)."""
        reply = self._ask_projection(QueryProgress(), (ProgressReply,))
        return reply.pid if isinstance(reply, ProgressReply) else None

    def _ask_projection(self, msg: Any, types: tuple[type, ...]) -> Any:
        """Ask the projection actor; if it does not answer promptly (it died and the guardian
        is restarting it), look its address up again and ask once more. None if no answer."""
        for attempt in range(2):
            if self._projection is None:
                return None
            try:
                return self._ask_typed(self._projection, msg, types, PROJECTION_TIMEOUT)
            except HostTimeout:
                if attempt == 0 and not self._simple:
                    with contextlib.suppress(ActorsError):
                        self._refresh_runner(self._ctx())
        return None

    def _ask_typed(self, to: Any, msg: Any, types: tuple[type, ...], timeout: float) -> Any:
        """Ask an actor whose replies carry no request id: accept the first of ``types``."""
        deadline = time.monotonic() + timeout
        with self._lock if self._simple else contextlib.nullcontext():
            ctx = self._ctx()
            reply = ctx.ask(to, msg, timeout)
            while not isinstance(reply, types):
                if reply is not None:
                    rid = getattr(reply, "request_id", None)
                    if rid is not None:
                        self._stash()[rid] = reply
                    else:
                        self._push(reply)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise HostTimeout(f"no reply to {type(msg).__name__} within {timeout}s")
                reply = ctx.listen(left)
            return reply

    # -- sinks -------------------------------------------------------------------------

    def add_sink(self, fn: SinkFn, kinds: Iterable[str] = ()) -> str:
        """Call ``fn(session_id, event, live)`` for events of every session, live.

        ``event`` is a stored event (or None) and ``live`` an ephemeral (kind, severity,
        text) item such as a notice (or None). ``kinds`` filters; empty means all. A sink
        that raises is logged and counted, and never stops delivery to the others. Sinks
        see live traffic; use `subscribe` for an exact replay.
        """
        if not callable(fn):
            raise InvalidRequest("a sink must be callable")
        sink_id = _rid()
        self._sinks[sink_id] = (frozenset(kinds), fn)
        if not self._simple and self._pump is None:
            self._start_pump()
        elif self._simple and not self._sink_ready.is_set():
            reply = self._request(m.AddSink(request_id=_rid()))
            self._pump_sink_id = reply.sink_id
            self._sink_ready.set()
        if not self._sink_ready.wait(self.timeout):
            raise HostTimeout("the sink pump did not start")
        return sink_id

    def remove_sink(self, sink_id: str) -> None:
        self._sinks.pop(sink_id, None)

    def _deliver_sinks(self, batch: m.SinkBatch) -> None:
        items: list[tuple[str, Event | None, tuple[str, str, str] | None]] = []
        for seq, kind, payload in batch.records:
            items.append((kind, decode_event(payload, stream=batch.session_id, seq=seq), None))
        for item in batch.live:
            items.append((item[0], None, item))
        for kinds, fn in list(self._sinks.values()):
            for kind, ev, live in items:
                if kinds and kind not in kinds:
                    continue
                try:
                    fn(batch.session_id, ev, live)
                except Exception:
                    # Logged once per sink: a sink that fails on every event must not
                    # flood the log; the count keeps the rest.
                    self._sink_failures += 1
                    if fn not in self._sinks_logged:
                        self._sinks_logged.add(fn)
                        # Formatted here rather than passed as exc_info: a kept log record
                        # would pin the pump's frame and with it its actor-system endpoint.
                        log.error(
                            "sink %r raised; isolated, others unaffected\n%s",
                            fn,
                            traceback.format_exc(),
                        )

    def _start_pump(self) -> None:
        self._pump = threading.Thread(target=self._pump_loop, name="vertebra-pump", daemon=True)
        self._pump.start()

    def _pump_loop(self) -> None:
        if self._simple:
            # simpleSystemBase runs actors only inside ask/tell/listen calls: keep it turning
            # so that turn workers' messages to their sessions are handled.
            while not self._pump_stop.is_set():
                with self._lock:
                    msg = self._asys.listen(0.002)
                if msg is not None:
                    self._push(msg)
                else:
                    self._pump_stop.wait(0.002)
            return
        ctx = self._ctx()
        rid = _rid()
        reply = ctx.ask(self._runner, m.AddSink(request_id=rid), self.timeout)
        while reply is not None and getattr(reply, "request_id", None) != rid:
            reply = ctx.listen(self.timeout)
        if reply is None:
            log.error("sink registration got no reply")
            return
        sink_id = reply.sink_id
        self._sink_ready.set()
        while not self._pump_stop.is_set():
            msg = ctx.listen(0.1)
            if isinstance(msg, m.SinkBatch):
                self._deliver_sinks(msg)
                ctx.tell(self._runner, m.SinkAck(sink_id=sink_id))
        with contextlib.suppress(Exception):
            ctx.tell(self._runner, m.RemoveSink(request_id=_rid(), sink_id=sink_id))

    # -- shutdown ----------------------------------------------------------------------

    def close(self) -> None:
        """Stop the pump, release thread endpoints, and shut the actor system down
        (unless attached to someone else's)."""
        if self._closed:
            return
        self._closed = True
        self._pump_stop.set()
        if self._pump is not None:
            self._pump.join(timeout=5)
        self._log.unwatch()
        self._log.close()
        self._shutdown_system()

    def _shutdown_system(self) -> None:
        with self._ctx_lock:
            cms, self._contexts = self._contexts, []
        for cm in cms:
            with contextlib.suppress(Exception):
                cm.__exit__(None, None, None)
        if not self._attach:
            with self._lock:
                self._asys.shutdown()
            sid = getattr(self, "system_session", 0)
            if sid:
                self._reap(sid)

    def _reap(self, sid: int) -> None:
        """Make sure no process of our actor system outlives the shutdown."""
        deadline = time.monotonic() + SHUTDOWN_GRACE
        left = processes_in_session(sid)
        while left and time.monotonic() < deadline:
            time.sleep(0.02)
            left = processes_in_session(sid)
        for pid in left:
            log.warning("actor process %d outlived the shutdown; killing it", pid)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    def __enter__(self) -> Host:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _rid() -> str:
    return uuid.uuid4().hex
