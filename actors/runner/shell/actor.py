"""`RunnerActor`: the thin shell over the registry. Loads, decides, carries actions out.

The Runner creates every session actor (never a process that runs threads), routes
requests to it, restarts it with backoff when it dies unasked, and passivates it when
idle. Every decision is made by `Registry` (pure). The actor receives messages and owns
the objects that hold the rest: the `Registry`, the `StoredWriter` (the spine, and the
Runner's own writes to streams that have no process, through the session's decider), the
`Spares`, the `Members` of a convention it leads (none on a single host), the
`SinkRouter` and the `ProjectionWakes`.
"""

from __future__ import annotations

import logging
import os
import time
from datetime import timedelta
from typing import Any

from thespian.actors import (
    ActorExitRequest,
    ActorSystemConventionUpdate,
    ChildActorExited,
    PoisonMessage,
    WakeupMessage,
)

from spine import SpineError, new_session_id, open_log, private_dir

from ... import messages as m
from ..._runtime.histogram import Histogram
from ..._runtime.logformat import child_context
from ..._runtime.shell import GuardedActor
from ..._runtime.system import configure_actor_logging
from ...messages import Ping, Pong, RunnerConfig, SessionPid
from ...placement import HOST
from ...session import protocol as sp
from ...session.shell.actor import SessionActor
from .. import spine_spec
from ..protocol import (
    HeartbeatDue,
    HeartbeatReply,
    PassivationDue,
    ProjectionWakeDue,
    RestartDue,
    SparesDue,
    StopSpares,
    TimersDue,
    UseProjection,
)
from ..rules import actions as a
from ..rules.registry import Registry
from .configs import runner_stats, session_config
from .membership import Members
from .publishing import ProjectionWakes
from .sinks import SinkRouter
from .spares import Spares
from .stored import StoredWriter
from .timers import DueTimers


def _log() -> logging.Logger:
    # Looked up at each use: Thespian re-initializes logging in actor processes after
    # import, so a logger captured at import time may no longer be wired to anything.
    return logging.getLogger("vertebra.runner")


class RunnerActor(GuardedActor):
    """The supervisor of every session. Configured by a `RunnerConfig` message."""

    log_name = "vertebra.runner"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cfg: RunnerConfig | None = None
        self.registry: Registry | None = None
        self.stored: StoredWriter | None = None
        #: Spine append latencies of every session process (merged from their reports)
        #: and of the Runner's own appends.
        self.appends = Histogram()
        #: Children that exit from now on are not restarted (the system is shutting down).
        self.exiting = False
        self.members: Members | None = None
        self.spares = Spares(self)
        self.sinks = SinkRouter(self.send)
        self.wakes = ProjectionWakes(self)
        self.timers = DueTimers(self)

    # -- configuration -----------------------------------------------------------------

    def receiveMsg_RunnerConfig(self, cfg: RunnerConfig, sender: Any) -> None:
        if self.cfg is None:
            self.cfg = cfg
            private_dir(cfg.data_dir)
            configure_actor_logging(cfg.data_dir)
            spine = open_log(spine_spec(cfg.data_dir, cfg.spine))
            self.stored = StoredWriter(spine, cfg.data_dir, self)
            self.registry = Registry(
                policy=cfg.restart, idle_timeout=cfg.idle_timeout, own_address=self.myAddress
            )
            self.do(self.registry.start())
            if cfg.cluster:
                self.members = Members(self)
            self.spares.refill(cfg)
            self.timers.start(spine, cfg.data_dir)
        self.send(sender, m.Done(request_id="config"))

    def receiveMsg_StopSpares(self, msg: StopSpares, sender: Any) -> None:
        self.spares.stopped = True
        self.send(sender, m.Done(request_id=msg.request_id))

    def receiveMsg_Ping(self, msg: Ping, sender: Any) -> None:
        self.send(sender, Pong(request_id=msg.request_id, pid=os.getpid()))

    def receiveMsg_GetRunnerStats(self, msg: m.GetRunnerStats, sender: Any) -> None:
        counters = self.registry.stats() if self.registry is not None else {}
        for part in (self.sinks, self.spares, self.timers):
            counters.update(part.stats())
        queues = self.registry.queues() if self.registry is not None else {}
        self.send(sender, runner_stats(msg.request_id, counters, queues, self.sinks, self.appends))

    def receiveMsg_FindRequest(self, msg: sp.FindRequest, sender: Any) -> None:
        if self.registry is not None:
            self.do(self.registry.find(msg, sender))

    def receiveMsg_GetHostTable(self, msg: m.GetHostTable, sender: Any) -> None:
        rows = self.members.table.rows() if self.members is not None else []
        self.send(sender, m.HostTableReply(request_id=msg.request_id, hosts=tuple(rows)))

    # -- carrying the registry's actions out -------------------------------------------

    def do(self, actions: list[a.Action]) -> None:
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
                    self.wakes.wake()
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
                case _ if self.stored is None or self.registry is None:
                    _log().error("runner cannot carry out %r unconfigured", action)
                case a.RecordFailure(session_id=sid, reason=reason):
                    self.stored.fail(sid, reason)
                case a.CloseStored(session_id=sid):
                    closed = self.stored.close(sid)
                    if closed is not None:
                        self.do(self.registry.stored_terminal(sid, *closed))
                case a.VerifyStored(session_id=sid, request_id=rid, reply_to=to):
                    self.stored.verify(sid, rid, to)
                case a.ReplayStored(session_id=sid, request=request, reply_to=to):
                    self.stored.replay(sid, request, to)
                case _:
                    _log().error("runner cannot carry out %r", action)

    def published(self, sid: str, records: Any) -> None:
        """Records the Runner appended itself reach sinks and the projection like any."""
        rows = tuple((r.seq, r.kind, r.payload) for r in records)
        self.do([a.WakeProjection(), a.Deliver(session_id=sid, records=rows)])

    def _spawn(self, action: a.Spawn) -> None:
        cfg, registry = self.cfg, self.registry
        if cfg is None or registry is None:
            return
        # The new process's records name its session from Thespian's first one on.
        entry = registry.entries.get(action.session_id)
        seq = entry.last_seq if entry is not None else 0
        child_context(session=action.session_id, incarnation=action.incarnation, seq=seq)
        member = self.members.table.place(action.session_id) if self.members else None
        if member is None:
            address = self.spares.take() or self.createActor(SessionActor)
            data_dir = cfg.data_dir
        else:
            # Thespian's capability-based placement creates it on that member's system.
            address = self.createActor(SessionActor, targetActorRequirements={HOST: member.name})
            data_dir = member.data_dir or cfg.data_dir
        registry.bind(action.session_id, action.incarnation, address)
        self.send(address, session_config(cfg, action, data_dir))

    # -- registry requests: what the registry needs is loaded from the log first -------

    def _ready(self, msg: Any, sender: Any) -> tuple[Registry, StoredWriter] | None:
        """The registry and the spine, or None after answering that the Runner is not
        configured."""
        if self.registry is None or self.stored is None:
            text = "the runner is not configured"
            reply = m.RequestFailed(request_id=msg.request_id, error="RunnerClosed", message=text)
            self.send(sender, reply)
            return None
        return self.registry, self.stored

    def _load(self, r: Registry, s: StoredWriter, sid: str, fresh: bool = True) -> None:
        """Tell the registry the stream's last seq (only for unknown ids unless ``fresh``)."""
        if fresh or sid not in r.entries:
            try:
                last = s.log.last_seq(sid)
            except SpineError:
                return  # not a valid stream name: the registry refuses the request
            r.load(sid, last)

    def _load_all(self, r: Registry, s: StoredWriter) -> None:
        for info in s.log.streams():
            r.load(info.stream, info.last_seq)

    def receiveMsg_CreateSession(self, msg: m.CreateSession, sender: Any) -> None:
        if (ready := self._ready(msg, sender)) is not None:
            sid = msg.session_id or new_session_id()
            self._load(*ready, sid)
            self.do(ready[0].create(sid, msg.request_id, sender, dict(msg.metadata)))

    def receiveMsg_GetSession(self, msg: m.GetSession, sender: Any) -> None:
        if (ready := self._ready(msg, sender)) is not None:
            self._load(*ready, msg.session_id)  # the log's last seq, not a coalesced report's
            self.do(ready[0].route(msg.session_id, msg, sender, time.monotonic()))

    def receiveMsg_RegisterSession(self, msg: m.RegisterSession, sender: Any) -> None:
        if (ready := self._ready(msg, sender)) is not None:
            self._load(*ready, msg.session_id)
            self.do(ready[0].register(msg.session_id, msg.request_id, sender))

    def receiveMsg_ListSessions(self, msg: m.ListSessions, sender: Any) -> None:
        if (ready := self._ready(msg, sender)) is not None:
            if not msg.session_id:  # one id needs no read: an entry not loaded has no process
                self._load_all(*ready)
            self.do(ready[0].list_sessions(msg.request_id, sender, msg.session_id))

    def receiveMsg_CloseAll(self, msg: m.CloseAll, sender: Any) -> None:
        if (ready := self._ready(msg, sender)) is not None:
            self._load_all(*ready)  # stored sessions this Runner has not loaded close too
            self.do(ready[0].close_all(msg.request_id, sender, time.monotonic()))

    def receiveMsg_ReviveSession(self, msg: m.ReviveSession, sender: Any) -> None:
        """An operator's decision to bring a failed session back, recorded in its stream
        by the session's decider. The registry forgets the entry: the next request loads
        it from the log as passivated and spawns it, and the fold no longer says failed."""
        if (ready := self._ready(msg, sender)) is None:
            return
        held = ready[0].entries.get(msg.session_id)
        why = held.error if held is not None and held.state.value == "failed" else ""
        if ready[1].revive(msg, sender, held_failed=why):
            ready[0].entries.pop(msg.session_id, None)
            self._load(*ready, msg.session_id)

    def route(self, sid: str, msg: Any, reply_to: Any) -> None:
        """Route a session-addressed request to its session's process (started or brought
        back as the registry decides)."""
        if (ready := self._ready(msg, reply_to)) is not None:
            self._load(*ready, sid, fresh=False)
            self.do(ready[0].route(sid, msg, reply_to, time.monotonic()))

    def _route_request(self, msg: Any, sender: Any) -> None:
        self.route(msg.session_id, msg, sender)

    # Every session-addressed request goes the same way.
    receiveMsg_SendMessage = _route_request
    receiveMsg_Interrupt = _route_request
    receiveMsg_SetMetadata = _route_request
    receiveMsg_DecideAction = _route_request
    receiveMsg_SubmitGoal = _route_request
    receiveMsg_SetTimer = _route_request
    receiveMsg_CancelTimer = _route_request
    receiveMsg_ResumeGoal = _route_request
    receiveMsg_SwitchSession = _route_request
    receiveMsg_SwitchBranch = _route_request
    receiveMsg_Subscribe = _route_request
    receiveMsg_Unsubscribe = _route_request
    receiveMsg_CloseSession = _route_request
    receiveMsg_SealSession = _route_request
    receiveMsg_VerifySession = _route_request

    def receiveMsg_Routed(self, routed: sp.Routed, sender: Any) -> None:
        """Ingress bounced by a session incarnation that is stopping: route it again."""
        self.route(routed.session_id, routed.message, routed.reply_to)

    def receiveMsg_SessionPid(self, msg: SessionPid, sender: Any) -> None:
        self.route(msg.session_id, Ping(request_id=msg.request_id), sender)

    # -- sinks and the projection ------------------------------------------------------

    def receiveMsg_UseProjection(self, msg: UseProjection, sender: Any) -> None:
        self.wakes.projection = msg.address

    def receiveMsg_AddSink(self, msg: m.AddSink, sender: Any) -> None:
        sink_id = self.sinks.add(sender, tuple(msg.kinds), msg.max_pending)
        self.send(sender, m.SinkReply(request_id=msg.request_id, sink_id=sink_id))

    def receiveMsg_RemoveSink(self, msg: m.RemoveSink, sender: Any) -> None:
        self.sinks.remove(msg.sink_id)
        self.send(sender, m.Done(request_id=msg.request_id))

    def receiveMsg_SinkAck(self, msg: m.SinkAck, sender: Any) -> None:
        self.sinks.ack(msg.sink_id, msg.count)

    # -- from sessions, children, members and timers -----------------------------------

    def _replied(self, msg: Any, sender: Any) -> None:
        """Replies to the Runner's own requests (close-all's closes, a stored close's
        cancellation of children, pings) need no handling."""

    receiveMsg_Done = _replied
    receiveMsg_Pong = _replied

    def receiveMsg_Ack(self, msg: m.Ack, sender: Any) -> None:
        self.timers.answered(msg.request_id, True, msg.consumed)

    def receiveMsg_RequestFailed(self, msg: m.RequestFailed, sender: Any) -> None:
        if self.timers.answered(msg.request_id, False, False):
            return
        # A child closed already (close-all closes it too) needs no cancelling.
        quiet = msg.error == "SessionClosed" and msg.request_id.startswith("cancel-")
        level = logging.INFO if quiet else logging.WARNING
        _log().log(level, "runner request %s failed: %s", msg.request_id, msg.message)

    def receiveMsg_SpareReady(self, msg: sp.SpareReady, sender: Any) -> None:
        self.spares.ready(sender)

    def receiveMsg_SessionReady(self, msg: sp.SessionReady, sender: Any) -> None:
        if self.registry is not None:
            self.do(self.registry.session_ready(msg, time.monotonic()))
        self.timers.news()

    def receiveMsg_Appended(self, msg: sp.Appended, sender: Any) -> None:
        if msg.append_counts:
            self.appends.add(msg.append_counts, msg.append_seconds)
        if self.registry is not None:
            self.do(self.registry.appended(msg, time.monotonic()))
        self.timers.appended(msg.session_id, msg.records)

    def receiveMsg_SessionStopping(self, msg: sp.SessionStopping, sender: Any) -> None:
        if self.registry is not None:
            self.do(self.registry.stopping(msg))

    def receiveMsg_SessionUnreadable(self, msg: sp.SessionUnreadable, sender: Any) -> None:
        if self.registry is not None:
            self.do(self.registry.unreadable(msg))

    def receiveMsg_ChildActorExited(self, msg: ChildActorExited, sender: Any) -> None:
        if self.spares.exited(msg.childAddress) or self.exiting or self.registry is None:
            return
        if self.members and self.members.child_exited(msg.childAddress, self.registry.entries):
            return
        self.do(self.registry.child_exited(msg.childAddress, time.monotonic()))
        self.timers.news()

    def receiveMsg_ActorSystemConventionUpdate(
        self, msg: ActorSystemConventionUpdate, sender: Any
    ) -> None:
        if self.members is not None:
            self.members.convention_changed(msg)

    def receiveMsg_HeartbeatReply(self, msg: HeartbeatReply, sender: Any) -> None:
        if self.members is not None:
            self.members.answered(msg)

    def receiveMsg_PoisonMessage(self, msg: PoisonMessage, sender: Any) -> None:
        poison = msg.poisonMessage
        if isinstance(poison, m.SinkBatch):
            self.sinks.failed(sender)
        elif isinstance(poison, sp.Routed) and self.registry is not None:
            self.do(self.registry.poison(poison, str(msg.details)))
        else:
            _log().error("poison message %r from %s", type(poison).__name__, sender)

    def receiveMsg_WakeupMessage(self, msg: WakeupMessage, sender: Any) -> None:
        if self.registry is None or self.cfg is None:
            return
        payload = msg.payload
        if isinstance(payload, SparesDue):
            self.spares.refill_due = False
            if not self.exiting:
                self.spares.refill(self.cfg)
        elif isinstance(payload, ProjectionWakeDue):
            self.wakes.fired()
        elif isinstance(payload, PassivationDue):
            self.do(self.registry.passivation_due(time.monotonic(), self.timers.soon()))
        elif isinstance(payload, RestartDue):
            self.do(self.registry.restart_due(payload))
        elif isinstance(payload, TimersDue):
            self.timers.due()
        elif isinstance(payload, HeartbeatDue) and self.members is not None and not self.exiting:
            self.members.heartbeat()

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: Any) -> None:
        # The system is shutting down (or this Runner is being replaced): children that
        # exit from now on are not restarted.
        self.exiting = True
        self.timers.close()
        if self.stored is not None:
            self.stored.log.close()
            self.stored = None


def _failed(action: a.Fail) -> m.RequestFailed:
    return m.RequestFailed(
        request_id=action.request_id,
        error=action.error,
        message=action.message,
        session_id=action.session_id,
    )
