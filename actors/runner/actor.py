"""`RunnerActor`: the supervisor. Registry, routing, sinks, restart and passivation.

The Runner creates every session actor (never a process that runs threads), routes ingress
to it, restarts it with backoff when it dies unasked, and passivates it when idle. Ingress
with a key stays "in flight" until the session reports it committed, so a crash between
receipt and commit is healed by redelivery (the key makes redelivery idempotent).
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import attrs
from thespian.actors import (
    ActorExitRequest,
    ActorTypeDispatcher,
    ChildActorExited,
    PoisonMessage,
    WakeupMessage,
)

from projections import ProjectionActor, StartProjection, Wake
from spine import (
    ConflictError,
    Event,
    Kind,
    Phase,
    SpineError,
    SqliteLog,
    new_session_id,
    validate_session_id,
)

from .. import messages as m
from ..messages import (
    GetRunner,
    Ping,
    Pong,
    RunnerAddress,
    RunnerConfig,
    SessionPid,
)
from ..session.actor import SessionActor
from ..session.protocol import (
    Appended,
    RecordPoison,
    Routed,
    SessionConfig,
    SessionReady,
    SessionStopping,
    UseProjection,
)
from ..system import configure_actor_logging


def _log() -> logging.Logger:
    # Looked up at each use: Thespian re-initializes logging in actor processes after
    # import, so a logger captured at import time may no longer be wired to anything.
    return logging.getLogger("vertebra.runner")


_INGRESS = (m.SendMessage, m.Interrupt, m.SetMetadata, m.SwitchSession)


def spine_path(data_dir: str) -> str:
    return os.path.join(data_dir, "spine.db")


# -- sinks --------------------------------------------------------------------------------


@attrs.define
class _Sink:
    sink_id: str
    target: Any
    kinds: frozenset[str]
    max_pending: int
    pending: int = 0
    delivered: int = 0
    dropped: int = 0
    failures: int = 0


class SinkRouter:
    """Fans session events out to sinks, each filtered by kind (empty means all).

    A target is an actor address (a conduit; it acknowledges batches with `SinkAck`) or,
    when embedded in-process, a callable. A callable that raises is isolated: logged and
    counted, and the other sinks still get the batch. A sink with ``max_pending``
    unacknowledged batches gets no more until it catches up; what it misses is counted in
    ``dropped``.
    """

    def __init__(self, send: Callable[[Any, Any], None]) -> None:
        self._send = send
        self._sinks: dict[str, _Sink] = {}

    def add(self, target: Any, kinds: tuple[str, ...] = (), max_pending: int = 1000) -> str:
        sink_id = new_session_id()
        self._sinks[sink_id] = _Sink(sink_id, target, frozenset(kinds), max(1, max_pending))
        return sink_id

    def remove(self, sink_id: str) -> bool:
        return self._sinks.pop(sink_id, None) is not None

    def ack(self, sink_id: str, count: int) -> None:
        s = self._sinks.get(sink_id)
        if s is not None:
            s.pending = max(0, s.pending - count)

    def deliver(
        self,
        session_id: str,
        records: tuple[tuple[int, str, bytes], ...],
        live: tuple[tuple[str, str, str], ...],
    ) -> None:
        for s in list(self._sinks.values()):
            recs = records if not s.kinds else tuple(r for r in records if r[1] in s.kinds)
            lv = live if not s.kinds else tuple(x for x in live if x[0] in s.kinds)
            if not recs and not lv:
                continue
            batch = m.SinkBatch(session_id=session_id, sink_id=s.sink_id, records=recs, live=lv)
            if callable(s.target):
                try:
                    s.target(batch)
                    s.delivered += 1
                except Exception:
                    s.failures += 1
                    if s.failures == 1:
                        _log().exception("sink %s raised; isolated, others unaffected", s.sink_id)
                continue
            if s.pending >= s.max_pending:
                if s.dropped == 0:
                    _log().warning(
                        "sink %s has %d unacknowledged batches; dropping until it catches up",
                        s.sink_id,
                        s.pending,
                    )
                s.dropped += 1
                continue
            s.pending += 1
            s.delivered += 1
            self._send(s.target, batch)

    def failed(self, target: Any) -> None:
        """A delivery to ``target`` poisoned it: count it against that sink."""
        for s in self._sinks.values():
            if not callable(s.target) and s.target == target:
                s.failures += 1
                s.pending = max(0, s.pending - 1)

    def stats(self) -> dict[str, int]:
        return {
            "sinks": len(self._sinks),
            "sink_delivered": sum(s.delivered for s in self._sinks.values()),
            "sink_dropped": sum(s.dropped for s in self._sinks.values()),
            "sink_failures": sum(s.failures for s in self._sinks.values()),
        }


# -- the registry -------------------------------------------------------------------------


@attrs.define
class _Entry:
    session_id: str
    state: str = (
        "passivated"  # starting | live | stopping | restarting | passivated | closed | failed
    )
    address: Any = None
    incarnation: int = 0
    last_seq: int = 0
    busy: bool = False
    last_activity: float = 0.0
    stop_reason: str = ""
    metadata: dict[str, str] = attrs.field(factory=dict)
    # Work waiting for a live incarnation: Routed messages or ("info", request_id, reply_to).
    pending: list[Any] = attrs.field(factory=list)
    # Keyed ingress forwarded to the live incarnation and not yet committed.
    in_flight: dict[str, Routed] = attrs.field(factory=dict)
    # How many crashes each uncommitted key has been in flight through.
    crashes: dict[str, int] = attrs.field(factory=dict)
    restarts: deque[float] = attrs.field(factory=deque)
    # Protocol subscriptions held by the live incarnation: it is not passivated under them.
    subscribers: int = 0
    total_restarts: int = 0
    create: tuple[str, Any] | None = None
    create_metadata: dict[str, str] = attrs.field(factory=dict)
    poisoned: list[tuple[str, str]] = attrs.field(factory=list)

    def info(self) -> m.SessionInfo:
        return m.SessionInfo(
            session_id=self.session_id,
            state=self.state if self.state in ("live", "closed", "failed") else "passivated",
            last_seq=self.last_seq,
            restarts=self.total_restarts,
            metadata=self.metadata,
        )


class RunnerActor(ActorTypeDispatcher):  # type: ignore[misc]
    """The supervisor of every session. Configured by a `RunnerConfig` message."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cfg: RunnerConfig | None = None
        self.spine: SqliteLog | None = None
        self.entries: dict[str, _Entry] = {}
        self.sinks = SinkRouter(self.send)
        self.closed = False
        self.exiting = False
        self.projection: Any = None
        self.counters: dict[str, int] = {
            "created": 0,
            "restarts": 0,
            "passivated": 0,
            "rehydrated": 0,
            "poisoned": 0,
            "failed": 0,
            "redelivered": 0,
        }

    # -- configuration -----------------------------------------------------------------

    def receiveMsg_RunnerConfig(self, cfg: RunnerConfig, sender: Any) -> None:
        if self.cfg is None:
            self.cfg = cfg
            os.makedirs(cfg.data_dir, exist_ok=True)
            configure_actor_logging(cfg.data_dir)
            self.spine = SqliteLog(spine_path(cfg.data_dir))
            if cfg.idle_timeout:
                self.wakeupAfter(timedelta(seconds=cfg.idle_timeout / 2), "passivate")
        self.send(sender, m.Done(request_id="config"))

    def receiveMsg_Ping(self, msg: Ping, sender: Any) -> None:
        self.send(sender, Pong(request_id=msg.request_id, pid=os.getpid()))

    # -- helpers -----------------------------------------------------------------------

    def _fail(self, to: Any, request_id: str, error: str, message: str, sid: str = "") -> None:
        self.send(
            to, m.RequestFailed(request_id=request_id, error=error, message=message, session_id=sid)
        )

    def _known(self, sid: str) -> _Entry | None:
        """The registry entry, creating a passivated one for a stream the log knows."""
        e = self.entries.get(sid)
        if e is None and self.spine is not None and self.spine.last_seq(sid) > 0:
            e = self.entries[sid] = _Entry(session_id=sid, last_seq=self.spine.last_seq(sid))
        return e

    def _spawn(self, e: _Entry) -> None:
        assert self.cfg is not None
        e.incarnation += 1
        e.state = "starting"
        e.stop_reason = ""
        e.address = self.createActor(SessionActor)
        create = e.create is not None
        self.send(
            e.address,
            SessionConfig(
                session_id=e.session_id,
                db_path=spine_path(self.cfg.data_dir),
                incarnation=e.incarnation,
                interceptors=self.cfg.interceptors,
                factory=self.cfg.factory,
                busy_policy=self.cfg.busy_policy,
                create=create,
                metadata=e.create_metadata if create else {},
            ),
        )

    def _forward(self, e: _Entry, routed: Routed) -> None:
        msg = routed.message
        if isinstance(msg, m.Subscribe):
            e.subscribers += 1
        elif isinstance(msg, m.Unsubscribe):
            e.subscribers = max(0, e.subscribers - 1)
        key = getattr(msg, "key", None)
        if key and isinstance(msg, _INGRESS):
            e.in_flight[key] = routed
        e.last_activity = time.monotonic()
        self.send(e.address, routed)

    def _route(self, sid: str, msg: Any, reply_to: Any) -> None:
        if self.closed:
            self._fail(reply_to, msg.request_id, "RunnerClosed", "the runner is closed", sid)
            return
        try:
            validate_session_id(sid)
        except SpineError as exc:
            self._fail(reply_to, msg.request_id, "InvalidRequest", str(exc), sid)
            return
        e = self._known(sid)
        if e is None:
            self._fail(reply_to, msg.request_id, "SessionNotFound", f"session {sid} not found", sid)
            return
        routed = Routed(message=msg, reply_to=reply_to, session_id=sid)
        if isinstance(msg, m.GetSession) and e.state in ("closed", "failed"):
            self.send(reply_to, m.SessionReply(request_id=msg.request_id, info=e.info()))
            return
        if e.state == "closed":
            if isinstance(msg, m.CloseSession):
                self.send(reply_to, m.Done(request_id=msg.request_id))
            elif isinstance(msg, m.Subscribe):
                # Replaying a closed session is still allowed: bring it back to serve the backlog.
                e.pending.append(routed)
                self._spawn(e)
            else:
                self._fail(
                    reply_to, msg.request_id, "SessionClosed", f"session {sid} is closed", sid
                )
            return
        if e.state == "failed":
            self._fail(reply_to, msg.request_id, "SessionFailed", f"session {sid} has failed", sid)
            return
        if e.state == "live":
            self._forward(e, routed)
            return
        e.pending.append(routed)
        if e.state == "passivated":
            self.counters["rehydrated"] += 1
            self._spawn(e)

    # -- registry requests -------------------------------------------------------------

    def receiveMsg_CreateSession(self, msg: m.CreateSession, sender: Any) -> None:
        if self.closed:
            self._fail(sender, msg.request_id, "RunnerClosed", "the runner is closed")
            return
        sid = msg.session_id or new_session_id()
        try:
            validate_session_id(sid)
        except SpineError as exc:
            self._fail(sender, msg.request_id, "InvalidRequest", str(exc), sid)
            return
        if self._known(sid) is not None:
            self._fail(
                sender, msg.request_id, "SessionAlreadyExists", f"session {sid} already exists", sid
            )
            return
        e = self.entries[sid] = _Entry(session_id=sid)
        e.create = (msg.request_id, sender)
        e.create_metadata = dict(msg.metadata)
        self._spawn(e)

    def receiveMsg_GetSession(self, msg: m.GetSession, sender: Any) -> None:
        e = self._known(msg.session_id) if _valid(msg.session_id) else None
        if e is None:
            self._fail(
                sender,
                msg.request_id,
                "SessionNotFound",
                f"session {msg.session_id} not found",
                msg.session_id,
            )
            return
        if e.state == "live":
            self._forward(
                e,
                Routed(
                    message=msg, reply_to=sender, restarts=e.total_restarts, session_id=e.session_id
                ),
            )
            return
        if e.state in ("closed", "failed"):
            self.send(sender, m.SessionReply(request_id=msg.request_id, info=e.info()))
            return
        e.pending.append(("info", msg.request_id, sender))
        if e.state == "passivated":
            self.counters["rehydrated"] += 1
            self._spawn(e)

    def receiveMsg_RegisterSession(self, msg: m.RegisterSession, sender: Any) -> None:
        if not _valid(msg.session_id):
            self._fail(
                sender, msg.request_id, "InvalidRequest", f"invalid session id {msg.session_id!r}"
            )
            return
        e = self.entries.get(msg.session_id)
        if e is None:
            e = self.entries[msg.session_id] = _Entry(session_id=msg.session_id)
            if self.spine is not None:
                e.last_seq = self.spine.last_seq(msg.session_id)
        self.send(sender, m.SessionReply(request_id=msg.request_id, info=e.info()))

    def receiveMsg_ListSessions(self, msg: m.ListSessions, sender: Any) -> None:
        if self.spine is not None:
            for info in self.spine.streams():
                if info.stream not in self.entries:
                    self.entries[info.stream] = _Entry(
                        session_id=info.stream, last_seq=info.last_seq
                    )
        infos = tuple(e.info() for e in self.entries.values())
        self.send(sender, m.SessionListReply(request_id=msg.request_id, sessions=infos))

    def receiveMsg_CloseAll(self, msg: m.CloseAll, sender: Any) -> None:
        for e in list(self.entries.values()):
            if e.state not in ("closed", "failed"):
                self._route(
                    e.session_id,
                    m.CloseSession(request_id=f"close-all-{e.session_id}", session_id=e.session_id),
                    self.myAddress,
                )
        self.closed = True
        self.send(sender, m.Done(request_id=msg.request_id))

    def receiveMsg_Done(self, msg: m.Done, sender: Any) -> None:
        """Replies to the Runner's own requests (close-all) need no handling."""

    def receiveMsg_RequestFailed(self, msg: m.RequestFailed, sender: Any) -> None:
        _log().warning("runner request %s failed: %s", msg.request_id, msg.message)

    # -- ingress -----------------------------------------------------------------------

    def _route_ingress(self, msg: Any, sender: Any) -> None:
        self._route(msg.session_id, msg, sender)

    # Every session-addressed request goes the same way.
    receiveMsg_SendMessage = _route_ingress
    receiveMsg_Interrupt = _route_ingress
    receiveMsg_SetMetadata = _route_ingress
    receiveMsg_SwitchSession = _route_ingress
    receiveMsg_Subscribe = _route_ingress
    receiveMsg_Unsubscribe = _route_ingress
    receiveMsg_CloseSession = _route_ingress
    receiveMsg_SealSession = _route_ingress
    receiveMsg_VerifySession = _route_ingress

    def receiveMsg_UseProjection(self, msg: UseProjection, sender: Any) -> None:
        self.projection = msg.address

    def receiveMsg_Routed(self, routed: Routed, sender: Any) -> None:
        """Ingress bounced by a session incarnation that is stopping: route it again."""
        self._route(routed.session_id, routed.message, routed.reply_to)

    def receiveMsg_SessionPid(self, msg: SessionPid, sender: Any) -> None:
        self._route(msg.session_id, Ping(request_id=msg.request_id), sender)

    # -- sinks -------------------------------------------------------------------------

    def receiveMsg_AddSink(self, msg: m.AddSink, sender: Any) -> None:
        sink_id = self.sinks.add(sender, tuple(msg.kinds), msg.max_pending)
        self.send(sender, m.SinkReply(request_id=msg.request_id, sink_id=sink_id))

    def receiveMsg_RemoveSink(self, msg: m.RemoveSink, sender: Any) -> None:
        self.sinks.remove(msg.sink_id)
        self.send(sender, m.Done(request_id=msg.request_id))

    def receiveMsg_SinkAck(self, msg: m.SinkAck, sender: Any) -> None:
        self.sinks.ack(msg.sink_id, msg.count)

    def receiveMsg_GetRunnerStats(self, msg: m.GetRunnerStats, sender: Any) -> None:
        counters = dict(self.counters)
        counters.update(self.sinks.stats())
        counters["live"] = sum(1 for e in self.entries.values() if e.state == "live")
        counters["known"] = len(self.entries)
        self.send(sender, m.RunnerStats(request_id=msg.request_id, counters=counters))

    # -- from sessions -----------------------------------------------------------------

    def _entry_of(self, sid: str, incarnation: int) -> _Entry | None:
        e = self.entries.get(sid)
        if e is None or e.incarnation != incarnation:
            return None
        return e

    def receiveMsg_SessionReady(self, msg: SessionReady, sender: Any) -> None:
        e = self._entry_of(msg.session_id, msg.incarnation)
        if e is None:
            return
        e.last_seq = msg.last_seq
        e.metadata = dict(msg.metadata)
        e.last_activity = time.monotonic()
        e.state = "closed" if msg.closed else "failed" if msg.failed else "live"
        if e.create is not None:
            request_id, reply_to = e.create
            e.create = None
            if msg.already_exists:
                self._fail(
                    reply_to,
                    request_id,
                    "SessionAlreadyExists",
                    f"session {msg.session_id} already exists",
                    msg.session_id,
                )
            else:
                self.counters["created"] += 1
                self.send(reply_to, m.SessionReply(request_id=request_id, info=e.info()))
        for key, detail in e.poisoned:
            self.send(e.address, RecordPoison(key=key, detail=detail))
        e.poisoned.clear()
        pending, e.pending = e.pending, []
        for item in pending:
            if isinstance(item, tuple):
                _, request_id, reply_to = item
                self.send(reply_to, m.SessionReply(request_id=request_id, info=e.info()))
            elif e.state == "live":
                self._forward(e, item)
            elif isinstance(item.message, m.Subscribe | m.Unsubscribe):
                # A closed session still serves replays of its stream.
                self.send(e.address, item)
            else:
                self._answer_unservable(e, item)
        if e.state in ("closed", "failed") and e.address is not None:
            # A closed or failed session only came back to answer (a replay, a refusal):
            # its process is not needed once it has.
            e.stop_reason = e.state
            self.send(e.address, ActorExitRequest())

    def receiveMsg_Pong(self, msg: Pong, sender: Any) -> None:
        """Pongs to the Runner's own pings carry nothing it needs."""

    def receiveMsg_Appended(self, msg: Appended, sender: Any) -> None:
        e = self._entry_of(msg.session_id, msg.incarnation)
        if e is not None:
            if msg.records:
                e.last_seq = max(e.last_seq, msg.records[-1][0])
            for k in msg.keys:
                e.in_flight.pop(k, None)
            for k in msg.keys:
                e.crashes.pop(k, None)
            e.busy = msg.busy
            e.last_activity = time.monotonic()
        if msg.records and self.projection is not None:
            self.send(self.projection, Wake())
        self.sinks.deliver(msg.session_id, msg.records, msg.live)

    def receiveMsg_SessionStopping(self, msg: SessionStopping, sender: Any) -> None:
        e = self._entry_of(msg.session_id, msg.incarnation)
        if e is None:
            return
        e.stop_reason = msg.reason
        e.state = "stopping"
        self.send(e.address, ActorExitRequest())

    def receiveMsg_ChildActorExited(self, msg: ChildActorExited, sender: Any) -> None:
        if self.exiting:
            return
        addr = msg.childAddress
        e = next(
            (x for x in self.entries.values() if x.address is not None and x.address == addr), None
        )
        if e is None:
            return
        e.address = None
        # Subscriptions die with the incarnation; subscribers subscribe again.
        e.subscribers = 0
        if e.stop_reason:
            reason, e.stop_reason = e.stop_reason, ""
            e.state = reason if reason in ("closed", "failed") else "passivated"
            if reason == "passivate":
                self.counters["passivated"] += 1
            # Whatever was in flight reached a session that stopped on purpose after
            # committing or refusing it; what is still pending goes to a new incarnation.
            for routed in e.in_flight.values():
                e.pending.insert(0, routed)
            e.in_flight.clear()
            if e.pending and e.state != "failed":
                # A closed session comes back too: it answers replays and refuses the rest.
                self._spawn(e)
            elif e.pending:
                self._drain_closed(e)
            return
        self._crashed(e)

    def _drain_closed(self, e: _Entry) -> None:
        """Answer what waited for a session that will not serve again (closed or failed)."""
        pending, e.pending = e.pending, []
        for item in pending:
            self._answer_unservable(e, item)

    def _answer_unservable(self, e: _Entry, item: Any) -> None:
        """Answer one waiting request for a closed or failed session: reads and repeated
        closes succeed, everything else is refused with the session's state."""
        if isinstance(item, tuple):
            _, request_id, reply_to = item
            self.send(reply_to, m.SessionReply(request_id=request_id, info=e.info()))
            return
        msg = item.message
        if isinstance(msg, m.GetSession):
            self.send(item.reply_to, m.SessionReply(request_id=msg.request_id, info=e.info()))
        elif isinstance(msg, m.CloseSession) and e.state == "closed":
            self.send(item.reply_to, m.Done(request_id=msg.request_id))
        else:
            err = "SessionClosed" if e.state == "closed" else "SessionFailed"
            self._fail(
                item.reply_to,
                msg.request_id,
                err,
                f"session {e.session_id} is {e.state}",
                e.session_id,
            )

    def _crashed(self, e: _Entry) -> None:
        assert self.cfg is not None
        now = time.monotonic()
        e.restarts.append(now)
        while e.restarts and now - e.restarts[0] > self.cfg.restart.window:
            e.restarts.popleft()
        # Ingress that was in flight goes first to the next incarnation; ingress that was
        # in flight through two crashes is poison and is answered as an error instead.
        redeliver: list[Routed] = []
        for key, routed in e.in_flight.items():
            crashes = e.crashes.get(key, 0) + 1
            if crashes >= 2:
                self.counters["poisoned"] += 1
                detail = "the ingress was in flight through two crashes of the session"
                e.poisoned.append((key, detail))
                e.crashes.pop(key, None)
                self._fail(
                    routed.reply_to,
                    routed.message.request_id,
                    "PoisonMessageError",
                    detail,
                    e.session_id,
                )
            else:
                e.crashes[key] = crashes
                redeliver.append(routed)
                self.counters["redelivered"] += 1
        e.in_flight.clear()
        e.pending[:0] = redeliver
        if self.cfg.restart.exhausted(len(e.restarts)):
            self._mark_failed(e)
            return
        e.state = "restarting"
        e.total_restarts += 1
        self.counters["restarts"] += 1
        delay = self.cfg.restart.delay(len(e.restarts))
        _log().warning("session %s died; restarting in %.3fs", e.session_id, delay)
        self.wakeupAfter(timedelta(seconds=delay), ("restart", e.session_id, e.incarnation))

    def _mark_failed(self, e: _Entry) -> None:
        e.state = "failed"
        self.counters["failed"] += 1
        _log().error("session %s exceeded its restart budget; marked failed", e.session_id)
        if self.spine is not None:
            ev = Event(kind=Kind.LIFECYCLE, phase=Phase.FAILED, error="restart budget exhausted")
            try:
                self.spine.append(
                    e.session_id, [ev], expected_seq=self.spine.last_seq(e.session_id)
                )
            except (ConflictError, SpineError) as exc:
                _log().error("could not record failure of %s: %s", e.session_id, exc)
        e.pending.extend(e.in_flight.values())
        e.in_flight.clear()
        self._drain_closed(e)

    def receiveMsg_PoisonMessage(self, msg: PoisonMessage, sender: Any) -> None:
        poison = msg.poisonMessage
        if isinstance(poison, m.SinkBatch):
            self.sinks.failed(sender)
            return
        if not isinstance(poison, Routed):
            _log().error("poison message %r from %s", type(poison).__name__, sender)
            return
        inner = poison.message
        sid = getattr(inner, "session_id", "")
        key = getattr(inner, "key", "")
        e = self.entries.get(sid)
        self.counters["poisoned"] += 1
        detail = f"{type(inner).__name__} crashed the session twice: {msg.details}"
        self._fail(poison.reply_to, inner.request_id, "PoisonMessageError", detail, sid)
        if e is not None:
            e.in_flight.pop(key, None)
            if e.state == "live" and e.address is not None:
                self.send(e.address, RecordPoison(key=key or "", detail=detail))

    def receiveMsg_WakeupMessage(self, msg: WakeupMessage, sender: Any) -> None:
        payload = msg.payload
        if payload == "passivate":
            self._passivate_idle()
            if self.cfg is not None and self.cfg.idle_timeout:
                self.wakeupAfter(timedelta(seconds=self.cfg.idle_timeout / 2), "passivate")
            return
        if isinstance(payload, tuple) and payload and payload[0] == "restart":
            _, sid, incarnation = payload
            e = self.entries.get(sid)
            if e is not None and e.state == "restarting" and e.incarnation == incarnation:
                self._spawn(e)

    def _passivate_idle(self) -> None:
        assert self.cfg is not None and self.cfg.idle_timeout
        now = time.monotonic()
        for e in self.entries.values():
            if (
                e.state == "live"
                and not e.busy
                and not e.in_flight
                and not e.subscribers
                and now - e.last_activity >= self.cfg.idle_timeout
            ):
                e.state = "stopping"
                e.stop_reason = "passivate"
                self.send(e.address, ActorExitRequest())

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: Any) -> None:
        # The system is shutting down (or this Runner is being replaced): children that
        # exit from now on are not restarted.
        self.exiting = True
        if self.spine is not None:
            self.spine.close()
            self.spine = None


def _valid(sid: str) -> bool:
    try:
        validate_session_id(sid)
    except SpineError:
        return False
    return True


# -- the guardian -------------------------------------------------------------------------


class Guardian(ActorTypeDispatcher):  # type: ignore[misc]
    """Keeps a Runner alive: creates it, configures it, and replaces it if it dies.

    A top-level actor has no supervisor, and a ``globalName`` lookup silently creates a
    fresh, unconfigured actor after a death; the guardian is the fixed point hosts ask.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cfg: RunnerConfig | None = None
        self.runner: Any = None
        self.generation = 0
        self.waiting: list[tuple[str, Any]] = []
        self.ready = False
        self.exiting = False
        self.projection: Any = None

    def _start(self) -> None:
        assert self.cfg is not None
        self.generation += 1
        self.ready = False
        self.runner = self.createActor(RunnerActor)
        self.send(self.runner, self.cfg)
        if self.projection is not None:
            self.send(self.runner, UseProjection(address=self.projection))

    def _start_projection(self) -> None:
        """The status projection folds the spine in its own process, checkpointing to its
        own file; after a crash it resumes from the checkpoint."""
        assert self.cfg is not None
        self.projection = self.createActor(ProjectionActor)
        self.send(
            self.projection,
            StartProjection(
                log_path=spine_path(self.cfg.data_dir),
                checkpoint_path=os.path.join(self.cfg.data_dir, "projections.db"),
            ),
        )
        if self.runner is not None:
            self.send(self.runner, UseProjection(address=self.projection))

    def receiveMsg_RunnerConfig(self, cfg: RunnerConfig, sender: Any) -> None:
        if self.cfg is None:
            self.cfg = cfg
            configure_actor_logging(cfg.data_dir)
            if cfg.projections:
                self._start_projection()
            self._start()
        self.waiting.append(("config", sender))
        self._flush()

    def receiveMsg_Done(self, msg: m.Done, sender: Any) -> None:
        if sender == self.runner:
            self.ready = True
            self._flush()

    def _flush(self) -> None:
        if not self.ready:
            return
        waiting, self.waiting = self.waiting, []
        for request_id, to in waiting:
            self.send(
                to,
                RunnerAddress(
                    request_id=request_id,
                    address=self.runner,
                    generation=self.generation,
                    projection=self.projection,
                ),
            )

    def receiveMsg_StartedReply(self, msg: Any, sender: Any) -> None:
        """The projection actor started; nothing to do."""

    def receiveMsg_ProjectionFailed(self, msg: Any, sender: Any) -> None:
        _log().error("projection actor failed to start: %s", getattr(msg, "reason", msg))

    def receiveMsg_GetRunner(self, msg: GetRunner, sender: Any) -> None:
        if self.cfg is None:
            self.send(
                sender,
                m.RequestFailed(
                    request_id=msg.request_id, error="RunnerClosed", message="no runner configured"
                ),
            )
            return
        self.waiting.append((msg.request_id, sender))
        self._flush()

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: Any) -> None:
        self.exiting = True

    def receiveMsg_Ping(self, msg: Ping, sender: Any) -> None:
        self.send(sender, Pong(request_id=msg.request_id, pid=os.getpid()))

    def receiveMsg_ChildActorExited(self, msg: ChildActorExited, sender: Any) -> None:
        if self.exiting:
            return
        if self.projection is not None and msg.childAddress == self.projection:
            _log().error("projection actor died; starting it again from its checkpoint")
            self._start_projection()
            return
        if self.runner is not None and msg.childAddress == self.runner and self.cfg is not None:
            _log().error("runner died; starting generation %d", self.generation + 1)
            self._start()
