"""`RunnerActor`: the thin shell over the registry. Loads, decides, carries actions out.

The Runner creates every session actor (never a process that runs threads), routes
requests to it, restarts it with backoff when it dies unasked, and passivates it when
idle. Every decision is made by `Registry` (pure); the shell is composed of mixins:
`RunnerRouting` (requests, reading the log where the registry needs its truth),
`RunnerMembership` (member hosts), `RunnerEffects` (actions turned into ``createActor``,
``send``, ``wakeupAfter`` and the few appends the Runner makes itself) and
`RunnerPublishing` (sinks, projection wakes). This module holds configuration, stats and
what sessions, children and timers tell the Runner.
"""

from __future__ import annotations

import logging
import os
import time
from datetime import timedelta
from typing import Any

from thespian.actors import (
    ActorExitRequest,
    ChildActorExited,
    PoisonMessage,
    WakeupMessage,
)

from spine import open_log, private_dir

from ... import messages as m
from ..._runtime.system import configure_actor_logging
from ...messages import Ping, Pong, RunnerConfig
from ...session import protocol as sp
from .. import spine_spec
from ..protocol import (
    HeartbeatDue,
    PassivationDue,
    ProjectionWakeDue,
    RestartDue,
    SparesDue,
    StopSpares,
    TimersDue,
)
from ..rules.cluster import HEARTBEAT_INTERVAL, HostTable
from ..rules.registry import Registry
from .membership import RunnerMembership
from .routing import RunnerRouting
from .timers import RunnerTimers


def _log() -> logging.Logger:
    # Looked up at each use: Thespian re-initializes logging in actor processes after
    # import, so a logger captured at import time may no longer be wired to anything.
    return logging.getLogger("vertebra.runner")


class RunnerActor(RunnerRouting, RunnerMembership, RunnerTimers):
    """The supervisor of every session. Configured by a `RunnerConfig` message."""

    log_name = "vertebra.runner"

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
            self._start_timers()
        self.send(sender, m.Done(request_id="config"))

    def receiveMsg_Ping(self, msg: Ping, sender: Any) -> None:
        self.send(sender, Pong(request_id=msg.request_id, pid=os.getpid()))

    def receiveMsg_StopSpares(self, msg: StopSpares, sender: Any) -> None:
        self._no_spares = True
        self.send(sender, m.Done(request_id=msg.request_id))

    # -- replies to the Runner's own requests, and stats -------------------------------

    def receiveMsg_Done(self, msg: m.Done, sender: Any) -> None:
        """Replies to the Runner's own requests (close-all's closes) need no handling."""

    def receiveMsg_Ack(self, msg: m.Ack, sender: Any) -> None:
        self._fire_answered(msg.request_id, True, msg.consumed)

    def receiveMsg_RequestFailed(self, msg: m.RequestFailed, sender: Any) -> None:
        if self._fire_answered(msg.request_id, False, False):
            return
        _log().warning("runner request %s failed: %s", msg.request_id, msg.message)

    def receiveMsg_GetRunnerStats(self, msg: m.GetRunnerStats, sender: Any) -> None:
        counters = self.registry.stats() if self.registry is not None else {}
        counters.update(self.sinks.stats())
        counters["spare_sessions"] = len(self._spares)
        counters["spare_sessions_ready"] = len(self._standing)
        counters["timers_asked"] = self.timers_asked
        counters["timers_set"] = len(self.due_index) if self.due_index is not None else 0
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
        self._timers_news()

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
        self._timers_appended(msg.session_id, msg.records)

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
        self._timers_news()

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
        elif isinstance(msg.payload, TimersDue):
            self._timers_due()
        elif isinstance(msg.payload, RestartDue):
            self._do(self.registry.restart_due(msg.payload))
        elif isinstance(msg.payload, HeartbeatDue) and self.hosts is not None and not self.exiting:
            self._heartbeat()

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: Any) -> None:
        # The system is shutting down (or this Runner is being replaced): children that
        # exit from now on are not restarted.
        self.exiting = True
        if self.due_index is not None:
            self.due_index.close()
            self.due_index = None
        if self.spine is not None:
            self.spine.close()
            self.spine = None
