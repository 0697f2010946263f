"""`RunnerActor`: the thin shell over the registry. Loads, decides, carries actions out.

The Runner creates every session actor (never a process that runs threads), routes
requests to it, restarts it with backoff when it dies unasked, and passivates it when
idle. Every decision is made by `Registry` (pure); this module reads the log where the
registry needs its truth, and turns actions into Thespian effects: ``createActor``,
``send``, ``wakeupAfter`` and the few appends the Runner makes itself (a failure it
records, sessions without a process that close-all closes).
"""

from __future__ import annotations

import logging
import os
import time
from datetime import timedelta
from typing import Any

import orjson
from thespian.actors import (
    ActorExitRequest,
    ActorSystemConventionUpdate,
    ChildActorExited,
    PoisonMessage,
    WakeupMessage,
)

from projections import Wake
from spine import (
    ConflictError,
    Event,
    Kind,
    Log,
    Phase,
    SpineError,
    new_session_id,
    open_log,
    private_dir,
)
from spine.seal import KeyStore, verify_stream

from .. import messages as m
from ..histogram import Histogram
from ..logformat import child_context
from ..messages import Ping, Pong, RunnerConfig, SessionPid
from ..session import protocol as sp
from ..session.actor import SessionActor
from ..session.state import SessionState, fold, recovery_events
from ..shell import GuardedActor
from ..system import configure_actor_logging
from . import actions as a
from . import spine_path, spine_spec
from .cluster import HEARTBEAT_INTERVAL, HOST, HostTable, Member, member_of
from .member import MemberAgent
from .protocol import (
    Heartbeat,
    HeartbeatDue,
    HeartbeatReply,
    PassivationDue,
    ProjectionWakeDue,
    RestartDue,
    SparesDue,
    StopSpares,
    UseProjection,
)
from .registry import Registry
from .sinks import SinkRouter


def _log() -> logging.Logger:
    # Looked up at each use: Thespian re-initializes logging in actor processes after
    # import, so a logger captured at import time may no longer be wired to anything.
    return logging.getLogger("vertebra.runner")


#: Seconds between two wakes of the projection actor (see `RunnerActor._wake_projection`).
WAKE_INTERVAL = 0.05

#: Seconds after a spare session process is used before the Runner starts another.
SPARE_REFILL_AFTER = 0.2


#: Attempts at closing a stream without a process before giving up (a write raced it).
_CLOSE_ATTEMPTS = 3


class RunnerActor(GuardedActor):
    """The supervisor of every session. Configured by a `RunnerConfig` message."""

    log_name = "vertebra.runner"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cfg: RunnerConfig | None = None
        self.spine: Log | None = None
        self.registry: Registry | None = None
        self.sinks = SinkRouter(self.send)
        #: Spine append latencies of every session process (merged from their reports)
        #: and of the Runner's own appends.
        self.appends = Histogram()
        self.exiting = False
        self.projection: Any = None
        self._woken_at = -WAKE_INTERVAL
        self._wake_due = False
        #: Member hosts of the convention this Runner leads (None on a single host).
        self.hosts: HostTable | None = None
        self._beat = 0
        #: Session processes started ahead of need (`RunnerConfig.spare_sessions`).
        self._spares: list[Any] = []
        #: Those of `_spares` that have answered `Standby` (opened and warmed up).
        self._standing: list[Any] = []
        self._refill_due = False
        self._no_spares = False

    # -- configuration -----------------------------------------------------------------

    def receiveMsg_RunnerConfig(self, cfg: RunnerConfig, sender: Any) -> None:
        if self.cfg is None:
            self.cfg = cfg
            private_dir(cfg.data_dir)
            configure_actor_logging(cfg.data_dir)
            self.spine = open_log(spine_spec(cfg.data_dir, cfg.spine))
            self.registry = Registry(
                policy=cfg.restart, idle_timeout=cfg.idle_timeout, own_address=self.myAddress
            )
            self._do(self.registry.start())
            if cfg.cluster:
                self.hosts = HostTable()
                self.notifyOnSystemRegistrationChanges(True)
                self.wakeupAfter(timedelta(seconds=HEARTBEAT_INTERVAL), HeartbeatDue())
            self._refill()
        self.send(sender, m.Done(request_id="config"))

    def receiveMsg_Ping(self, msg: Ping, sender: Any) -> None:
        self.send(sender, Pong(request_id=msg.request_id, pid=os.getpid()))

    def receiveMsg_StopSpares(self, msg: StopSpares, sender: Any) -> None:
        self._no_spares = True
        self.send(sender, m.Done(request_id=msg.request_id))

    def receiveMsg_UseProjection(self, msg: UseProjection, sender: Any) -> None:
        self.projection = msg.address

    # -- loading: what the registry needs from the log ---------------------------------

    def _ready(self, msg: Any, sender: Any) -> Registry | None:
        """The registry, or None after answering that the Runner is not configured."""
        if self.registry is None or self.spine is None:
            text = "the runner is not configured"
            reply = m.RequestFailed(request_id=msg.request_id, error="RunnerClosed", message=text)
            self.send(sender, reply)
            return None
        return self.registry

    def _load(self, sid: str, fresh: bool = True) -> None:
        """Tell the registry the stream's last seq (only for unknown ids unless ``fresh``)."""
        assert self.registry is not None and self.spine is not None
        if fresh or sid not in self.registry.entries:
            try:
                stored = self.spine.last_seq(sid)
            except SpineError:
                return  # not a valid stream name: the registry refuses the request
            self.registry.load(sid, stored)

    def _load_all(self) -> None:
        assert self.registry is not None and self.spine is not None
        for info in self.spine.streams():
            self.registry.load(info.stream, info.last_seq)

    # -- registry requests -------------------------------------------------------------

    def receiveMsg_CreateSession(self, msg: m.CreateSession, sender: Any) -> None:
        if (r := self._ready(msg, sender)) is not None:
            sid = msg.session_id or new_session_id()
            self._load(sid)
            self._do(r.create(sid, msg.request_id, sender, dict(msg.metadata)))

    def receiveMsg_GetSession(self, msg: m.GetSession, sender: Any) -> None:
        if (r := self._ready(msg, sender)) is not None:
            self._load(msg.session_id)  # the log's last seq, not a coalesced report's
            self._do(r.route(msg.session_id, msg, sender, time.monotonic()))

    def receiveMsg_RegisterSession(self, msg: m.RegisterSession, sender: Any) -> None:
        if (r := self._ready(msg, sender)) is not None:
            self._load(msg.session_id)
            self._do(r.register(msg.session_id, msg.request_id, sender))

    def receiveMsg_ListSessions(self, msg: m.ListSessions, sender: Any) -> None:
        if (r := self._ready(msg, sender)) is not None:
            self._load_all()
            self._do(r.list_sessions(msg.request_id, sender))

    def receiveMsg_CloseAll(self, msg: m.CloseAll, sender: Any) -> None:
        if (r := self._ready(msg, sender)) is not None:
            self._load_all()  # stored sessions this Runner has not loaded close too
            self._do(r.close_all(msg.request_id, sender, time.monotonic()))

    def receiveMsg_ReviveSession(self, msg: m.ReviveSession, sender: Any) -> None:
        """An operator's decision to bring a failed session back, recorded in its stream.

        A failed session has no process, so the Runner is its stream's writer; the append
        expects the folded seq. The registry forgets the entry: the next request loads it
        from the log as passivated and spawns it, and the fold no longer says failed.
        """
        if (r := self._ready(msg, sender)) is None:
            return
        assert self.spine is not None
        sid = msg.session_id

        def refuse(error: str, text: str) -> None:
            self.send(
                sender,
                m.RequestFailed(
                    request_id=msg.request_id, error=error, message=text, session_id=sid
                ),
            )

        try:
            state = fold(SessionState(session_id=sid), self.spine.read_events(sid, 0))
        except SpineError as exc:
            refuse("InvalidRequest", f"session {sid} cannot be revived: {exc}")
            return
        if state.last_seq == 0:
            refuse("SessionNotFound", f"session {sid} not found")
            return
        if not state.failed:
            refuse("InvalidRequest", f"session {sid} is not failed")
            return
        why = "revived by an operator" + (f": {msg.reason}" if msg.reason else "")
        ev = Event(kind=Kind.LIFECYCLE, phase=Phase.RECOVERED, reason=why)
        try:
            res = self._append(sid, [ev], expected_seq=state.last_seq)
        except SpineError as exc:
            refuse("ActorsError", f"could not record the revival of {sid}: {exc}")
            return
        r.entries.pop(sid, None)
        self._load(sid)
        self._published(sid, res.records)
        self.send(
            sender,
            m.Ack(request_id=msg.request_id, session_id=sid, key="", seq=res.last_seq),
        )

    def receiveMsg_Done(self, msg: m.Done, sender: Any) -> None:
        """Replies to the Runner's own requests (close-all's closes) need no handling."""

    def receiveMsg_RequestFailed(self, msg: m.RequestFailed, sender: Any) -> None:
        _log().warning("runner request %s failed: %s", msg.request_id, msg.message)

    # -- session-addressed requests ----------------------------------------------------

    def _route(self, sid: str, msg: Any, reply_to: Any) -> None:
        if (r := self._ready(msg, reply_to)) is not None:
            self._load(sid, fresh=False)
            self._do(r.route(sid, msg, reply_to, time.monotonic()))

    def _route_request(self, msg: Any, sender: Any) -> None:
        self._route(msg.session_id, msg, sender)

    # Every session-addressed request goes the same way.
    receiveMsg_SendMessage = _route_request
    receiveMsg_Interrupt = _route_request
    receiveMsg_SetMetadata = _route_request
    receiveMsg_DecideAction = _route_request
    receiveMsg_SubmitGoal = _route_request
    receiveMsg_ResumeGoal = _route_request
    receiveMsg_SwitchSession = _route_request
    receiveMsg_Subscribe = _route_request
    receiveMsg_Unsubscribe = _route_request
    receiveMsg_CloseSession = _route_request
    receiveMsg_SealSession = _route_request
    receiveMsg_VerifySession = _route_request

    def receiveMsg_Routed(self, routed: sp.Routed, sender: Any) -> None:
        """Ingress bounced by a session incarnation that is stopping: route it again."""
        self._route(routed.session_id, routed.message, routed.reply_to)

    def receiveMsg_SessionPid(self, msg: SessionPid, sender: Any) -> None:
        self._route(msg.session_id, Ping(request_id=msg.request_id), sender)

    # -- sinks and stats ---------------------------------------------------------------

    def receiveMsg_AddSink(self, msg: m.AddSink, sender: Any) -> None:
        sink_id = self.sinks.add(sender, tuple(msg.kinds), msg.max_pending)
        self.send(sender, m.SinkReply(request_id=msg.request_id, sink_id=sink_id))

    def receiveMsg_RemoveSink(self, msg: m.RemoveSink, sender: Any) -> None:
        self.sinks.remove(msg.sink_id)
        self.send(sender, m.Done(request_id=msg.request_id))

    def receiveMsg_SinkAck(self, msg: m.SinkAck, sender: Any) -> None:
        self.sinks.ack(msg.sink_id, msg.count)

    def receiveMsg_GetRunnerStats(self, msg: m.GetRunnerStats, sender: Any) -> None:
        counters = self.registry.stats() if self.registry is not None else {}
        counters.update(self.sinks.stats())
        counters["spare_sessions"] = len(self._spares)
        counters["spare_sessions_ready"] = len(self._standing)
        stats = m.RunnerStats(
            request_id=msg.request_id,
            counters=counters,
            queues=self.registry.queues() if self.registry is not None else {},
            sinks=self.sinks.pending(),
            append_bounds=self.appends.bounds,
            append_counts=tuple(self.appends.counts),
            append_seconds=self.appends.sum,
        )
        self.send(sender, stats)

    # -- from sessions, children and timers --------------------------------------------

    def receiveMsg_SessionReady(self, msg: sp.SessionReady, sender: Any) -> None:
        if self.registry is not None:
            self._do(self.registry.session_ready(msg, time.monotonic()))

    def receiveMsg_SpareReady(self, msg: sp.SpareReady, sender: Any) -> None:
        if sender in self._spares and sender not in self._standing:
            self._standing.append(sender)

    def receiveMsg_Pong(self, msg: Pong, sender: Any) -> None:
        """Pongs to the Runner's own pings carry nothing it needs."""

    def receiveMsg_Appended(self, msg: sp.Appended, sender: Any) -> None:
        if msg.append_counts:
            self.appends.add(msg.append_counts, msg.append_seconds)
        if self.registry is not None:
            self._do(self.registry.appended(msg, time.monotonic()))

    def receiveMsg_SessionStopping(self, msg: sp.SessionStopping, sender: Any) -> None:
        if self.registry is not None:
            self._do(self.registry.stopping(msg))

    def receiveMsg_SessionUnreadable(self, msg: sp.SessionUnreadable, sender: Any) -> None:
        if self.registry is not None:
            self._do(self.registry.unreadable(msg))

    def receiveMsg_ChildActorExited(self, msg: ChildActorExited, sender: Any) -> None:
        if msg.childAddress in self._spares:
            # Not refilled here: a spare that cannot stay up would be started in a loop.
            self._spares.remove(msg.childAddress)
            if msg.childAddress in self._standing:
                self._standing.remove(msg.childAddress)
            return
        if self.exiting or self.registry is None:
            return
        if self.hosts is not None:
            member = self.hosts.by_agent(msg.childAddress)
            if member is not None:
                member.agent = None
                if member.alive:
                    self._member_died(member, "its agent exited")
                return
            for sid, e in self.registry.entries.items():
                if e.address is not None and e.address == msg.childAddress:
                    self.hosts.forget(sid)
                    break
        self._do(self.registry.child_exited(msg.childAddress, time.monotonic()))

    # -- member hosts (a convention leader only) -----------------------------------------

    def receiveMsg_ActorSystemConventionUpdate(
        self, msg: ActorSystemConventionUpdate, sender: Any
    ) -> None:
        if self.hosts is None:
            return
        if not msg.remoteAdded:
            gone = self.hosts.by_admin(msg.remoteAdminAddress)
            if gone is not None and gone.alive:
                self._member_died(gone, "it left the convention")
            return
        about = member_of(msg.remoteCapabilities)
        if about is None:
            return
        name, capacity, data_dir = about
        member = self.hosts.joined(
            name, msg.remoteAdminAddress, capacity, data_dir, time.monotonic()
        )
        _log().warning("member host %s joined (capacity %d)", name, capacity)
        if member.agent is None:
            # Created by the member's admin: asynchronous, so a slow or partitioned member
            # never holds the Runner up (messages to the agent wait until it exists).
            member.agent = self.createActor(MemberAgent, targetActorRequirements={HOST: name})
            member.last_seen = time.monotonic()

    def receiveMsg_HeartbeatReply(self, msg: HeartbeatReply, sender: Any) -> None:
        if self.hosts is None:
            return
        back = self.hosts.seen(msg.host, time.monotonic())
        if back is not None:
            # Back from a partition: what it still runs was replaced elsewhere (the lease
            # fence already refuses its appends); stop it.
            _log().warning("member host %s answers again; stopping its stale sessions", msg.host)
            stale, back.abandoned = back.abandoned, []
            for address in stale:
                self.send(address, ActorExitRequest())

    def _heartbeat(self) -> None:
        assert self.hosts is not None
        self._beat += 1
        now = time.monotonic()
        if not self.hosts.tick(now):
            _log().warning("the runner was stalled; member heartbeats start a fresh window")
        for member in self.hosts.beats_due(now):
            self.send(member.agent, Heartbeat(host=member.name, beat=self._beat))
        for member in self.hosts.overdue(now):
            self._member_died(member, "it missed its heartbeats")
        self.wakeupAfter(timedelta(seconds=HEARTBEAT_INTERVAL), HeartbeatDue())

    def _member_died(self, member: Member, why: str) -> None:
        """Every session of a dead member crashed: the registry restarts each (on a live
        member), and the new incarnation rebuilds from the log and closes its open turn."""
        assert self.hosts is not None and self.registry is not None
        moved = self.hosts.died(member)
        _log().error("member %s is dead (%s): moving %d sessions", member.name, why, len(moved))
        now = time.monotonic()
        for sid in moved:
            e = self.registry.entries.get(sid)
            if e is None or e.address is None:
                continue
            member.abandoned.append(e.address)
            self._do(self.registry.child_exited(e.address, now))

    def receiveMsg_GetHostTable(self, msg: m.GetHostTable, sender: Any) -> None:
        rows = self.hosts.rows() if self.hosts is not None else []
        self.send(sender, m.HostTableReply(request_id=msg.request_id, hosts=tuple(rows)))

    def receiveMsg_PoisonMessage(self, msg: PoisonMessage, sender: Any) -> None:
        poison = msg.poisonMessage
        if isinstance(poison, m.SinkBatch):
            self.sinks.failed(sender)
        elif isinstance(poison, sp.Routed) and self.registry is not None:
            self._do(self.registry.poison(poison, str(msg.details)))
        else:
            _log().error("poison message %r from %s", type(poison).__name__, sender)

    def receiveMsg_WakeupMessage(self, msg: WakeupMessage, sender: Any) -> None:
        if self.registry is None:
            return
        if isinstance(msg.payload, SparesDue):
            self._refill_due = False
            self._refill()
        elif isinstance(msg.payload, ProjectionWakeDue):
            self._wake_due = False
            self._wake_projection()
        elif isinstance(msg.payload, PassivationDue):
            self._do(self.registry.passivation_due(time.monotonic()))
        elif isinstance(msg.payload, RestartDue):
            self._do(self.registry.restart_due(msg.payload))
        elif isinstance(msg.payload, HeartbeatDue) and self.hosts is not None and not self.exiting:
            self._heartbeat()

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: Any) -> None:
        # The system is shutting down (or this Runner is being replaced): children that
        # exit from now on are not restarted.
        self.exiting = True
        if self.spine is not None:
            self.spine.close()
            self.spine = None

    # -- carrying actions out ----------------------------------------------------------

    def _wake_projection(self) -> None:
        """Wake the projection actor at most once per `WAKE_INTERVAL`, the last wake of a
        burst sent when the interval ends.

        A wake per append made the Runner the bottleneck: Thespian keeps one message in
        flight per pair, so wakes queued in the Runner and every pass of its event loop
        walked them (2.7 ms of Runner CPU per turn at 50 sessions, against 0.5 ms without
        wakes). The projection reads everything new on each wake, so one per interval
        loses nothing; `Host.status` folds locally when the projection is behind.
        """
        if self.projection is None:
            return
        now = time.monotonic()
        since = now - self._woken_at
        if since >= WAKE_INTERVAL:
            self._woken_at = now
            self.send(self.projection, Wake())
        elif not self._wake_due:
            self._wake_due = True
            self.wakeupAfter(timedelta(seconds=WAKE_INTERVAL - since), ProjectionWakeDue())

    def _do(self, actions: list[a.Action]) -> None:
        for action in actions:
            match action:
                case a.Forward(address=address, routed=routed) if address is not None:
                    self.send(address, routed)
                case a.Reply(to=to, message=message):
                    self.send(to, message)
                case a.Fail():
                    self.send(action.to, _failed(action))
                case a.Deliver(session_id=sid, records=records, live=live):
                    self.sinks.deliver(sid, records, live)
                case a.WakeProjection():
                    self._wake_projection()
                case a.Spawn():
                    self._spawn(action)
                case a.Stop(address=address):
                    self.send(address, ActorExitRequest())
                case a.Schedule(delay=delay, payload=payload):
                    if isinstance(payload, RestartDue):
                        sid = payload.session_id
                        _log().warning("session %s died; restarting in %.3fs", sid, delay)
                    self.wakeupAfter(timedelta(seconds=delay), payload)
                case a.RecordPoison(address=address, key=key, detail=detail):
                    self.send(address, sp.RecordPoison(key=key, detail=detail))
                case a.RecordFailure():
                    self._record_failure(action)
                case a.CloseStored(session_id=sid):
                    self._do(self._close_stored(sid))
                case a.VerifyStored():
                    self._verify_stored(action)
                case _:
                    _log().error("runner cannot carry out %r", action)

    def _refill(self) -> None:
        """Start spare session processes up to `RunnerConfig.spare_sessions`: starting a
        process is most of what creating a session costs (a goal's children wait on it)."""
        if self.cfg is None or self.exiting or self._no_spares:
            return
        while len(self._spares) < self.cfg.spare_sessions:
            address = self.createActor(SessionActor)
            spine = spine_spec(self.cfg.data_dir, self.cfg.spine).url
            self.send(address, sp.Standby(db_path=spine_path(self.cfg.data_dir), spine=spine))
            self._spares.append(address)

    def _spawn(self, action: a.Spawn) -> None:
        assert self.cfg is not None and self.registry is not None
        # The new process's records name its session from Thespian's first one on.
        entry = self.registry.entries.get(action.session_id)
        child_context(
            session=action.session_id,
            incarnation=action.incarnation,
            seq=entry.last_seq if entry is not None else 0,
        )
        member = self.hosts.place(action.session_id) if self.hosts is not None else None
        spare = False
        if member is None:
            spare = bool(self._spares)
            if spare:
                # One that is ready if there is one: another may still be starting.
                address = self._standing.pop(0) if self._standing else self._spares[0]
                self._spares.remove(address)
            else:
                address = self.createActor(SessionActor)
            data_dir = self.cfg.data_dir
        else:
            # Thespian's capability-based placement creates it on that member's system.
            address = self.createActor(SessionActor, targetActorRequirements={HOST: member.name})
            data_dir = member.data_dir or self.cfg.data_dir
        self.registry.bind(action.session_id, action.incarnation, address)
        config = sp.SessionConfig(
            session_id=action.session_id,
            db_path=spine_path(data_dir),
            spine=spine_spec(self.cfg.data_dir, self.cfg.spine).url,
            incarnation=action.incarnation,
            interceptors=self.cfg.interceptors,
            factory=self.cfg.factory,
            busy_policy=self.cfg.busy_policy,
            create=action.create,
            metadata=action.metadata,
            auto_seal=self.cfg.auto_seal,
        )
        self.send(address, config)
        if spare and not self._refill_due:
            # Later, not now: starting a process now would compete with the session just
            # handed out (and with its siblings of the same fan-out) for the CPU.
            self._refill_due = True
            self.wakeupAfter(timedelta(seconds=SPARE_REFILL_AFTER), SparesDue())

    def _record_failure(self, action: a.RecordFailure) -> None:
        """No process writes the stream of a failed session: the Runner records it."""
        sid = action.session_id
        _log().error("session %s: %s; marked failed", sid, action.reason)
        if self.spine is None:
            return
        ev = Event(kind=Kind.LIFECYCLE, phase=Phase.FAILED, error=action.reason)
        try:
            # The crash that used up the budget cut a turn off: close it, or it stays
            # open forever (no process will ever write this stream again).
            try:
                state = fold(SessionState(session_id=sid), self.spine.read_events(sid, 0))
                events, last = [*recovery_events(state, "failed"), ev], state.last_seq
            except SpineError:
                # The stream does not decode: no fold, just the failure (once).
                last = self.spine.last_seq(sid)
                tail = self.spine.read(sid, last - 1, 1) if last else []
                if tail and tail[0].kind == Kind.LIFECYCLE and _says_failed(tail[0].payload):
                    return
                events = [ev]
            res = self._append(sid, events, expected_seq=last)
        except SpineError as exc:
            _log().error("could not record failure of %s: %s", sid, exc)
            return
        self._published(sid, res.records)

    def _verify_stored(self, action: a.VerifyStored) -> None:
        """Verify a failed session from its stored rows, without decoding them, and record
        the outcome: no process loads its stream, so the Runner is the writer."""
        assert self.cfg is not None
        sid = action.session_id
        if self.spine is None:
            return
        try:
            ring = KeyStore(os.path.join(self.cfg.data_dir, "keys")).keyring()
            report = verify_stream(self.spine, sid, ring)
        except SpineError as exc:
            self.send(
                action.reply_to,
                m.RequestFailed(
                    request_id=action.request_id,
                    error="ActorsError",
                    message=f"could not verify {sid}: {exc}",
                    session_id=sid,
                ),
            )
            return
        if report.verified_seq:
            self._published(sid, self.spine.read(sid, report.verified_seq - 1, 1))
        reply = m.VerifyReply(
            request_id=action.request_id,
            session_id=sid,
            ok=report.ok,
            summary=report.summary(),
            seq=report.verified_seq,
        )
        self.send(action.reply_to, reply)

    def _close_stored(self, sid: str) -> list[a.Action]:
        """Close a stream that has no process: close an open turn, append ``closed``.

        The append expects the seq just folded, so a writer that raced it (an orphaned
        incarnation) makes it fold and try again instead of interleaving.
        """
        assert self.spine is not None and self.registry is not None
        for _ in range(_CLOSE_ATTEMPTS):
            state = fold(SessionState(session_id=sid), self.spine.read_events(sid, 0))
            if state.closed or state.failed:
                terminal = "closed" if state.closed else "failed"
                return self.registry.stored_terminal(sid, terminal, state.last_seq)
            events = [
                *recovery_events(state, "closed"),
                Event(kind=Kind.LIFECYCLE, phase=Phase.CLOSED),
            ]
            try:
                res = self._append(sid, events, expected_seq=state.last_seq)
            except ConflictError:
                continue
            self._published(sid, res.records)
            return self.registry.stored_terminal(sid, "closed", res.last_seq)
        _log().error("session %s: could not close it in the log; its stream kept moving", sid)
        return []

    def _append(self, sid: str, events: list[Event], expected_seq: int) -> Any:
        """Append to ``sid`` as its writer, timing it with the sessions' appends."""
        assert self.spine is not None
        started = time.perf_counter()
        res = self.spine.append(sid, events, expected_seq=expected_seq)
        self.appends.observe(time.perf_counter() - started)
        return res

    def _published(self, sid: str, records: Any) -> None:
        """Records the Runner appended itself reach sinks and the projection like any."""
        rows = tuple((r.seq, r.kind, r.payload) for r in records)
        self._do([a.WakeProjection(), a.Deliver(session_id=sid, records=rows)])


def _says_failed(payload: bytes) -> bool:
    """Whether a stored lifecycle row records a failure (read without decoding the event)."""
    try:
        d = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return False
    return isinstance(d, dict) and d.get("phase") == Phase.FAILED


def _failed(action: a.Fail) -> m.RequestFailed:
    return m.RequestFailed(
        request_id=action.request_id,
        error=action.error,
        message=action.message,
        session_id=action.session_id,
    )
