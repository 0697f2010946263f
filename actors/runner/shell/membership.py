"""`Members`: a convention leader's Runner keeping its member hosts: joins and departures,
heartbeats, and moving the sessions of a member that died. A single-host Runner has none."""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

from thespian.actors import ActorExitRequest, ActorSystemConventionUpdate

from ...placement import HOST
from ..protocol import Heartbeat, HeartbeatDue, HeartbeatReply
from ..rules.cluster import HEARTBEAT_INTERVAL, HostTable, Member, member_of
from .member import MemberAgent


def _log() -> logging.Logger:
    # Looked up at each use: Thespian re-initializes logging in actor processes after
    # import, so a logger captured at import time may no longer be wired to anything.
    return logging.getLogger("vertebra.runner")


class Members:
    """The member hosts of a convention this Runner leads (`HostTable`), watched by
    heartbeat. ``runner`` is the Runner: its sends, its timers, its registry."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.table = HostTable()
        self.beat = 0
        runner.notifyOnSystemRegistrationChanges(True)
        runner.wakeupAfter(timedelta(seconds=HEARTBEAT_INTERVAL), HeartbeatDue())

    def convention_changed(self, msg: ActorSystemConventionUpdate) -> None:
        if not msg.remoteAdded:
            gone = self.table.by_admin(msg.remoteAdminAddress)
            if gone is not None and gone.alive:
                self.died(gone, "it left the convention")
            return
        about = member_of(msg.remoteCapabilities)
        if about is None:
            return
        name, capacity, data_dir = about
        restarted = self.table.rejoining(name)
        if restarted is not None:
            # Its "gone" notice was missed: its sessions died with its old system.
            self.died(restarted, "it started again")
        member = self.table.joined(
            name, msg.remoteAdminAddress, capacity, data_dir, time.monotonic()
        )
        _log().warning("member host %s joined (capacity %d)", name, capacity)
        if member.agent is None:
            # Created by the member's admin: asynchronous, so a slow or partitioned member
            # never holds the Runner up (messages to the agent wait until it exists).
            agent = self.runner.createActor(MemberAgent, targetActorRequirements={HOST: name})
            member.agent = agent
            member.last_seen = time.monotonic()

    def answered(self, msg: HeartbeatReply) -> None:
        back = self.table.seen(msg.host, time.monotonic())
        if back is not None:
            # Back from a partition: what it still runs was replaced elsewhere (the lease
            # fence already refuses its appends); stop it.
            _log().warning("member host %s answers again; stopping its stale sessions", msg.host)
            stale, back.abandoned = back.abandoned, []
            for address in stale:
                self.runner.send(address, ActorExitRequest())

    def heartbeat(self) -> None:
        self.beat += 1
        now = time.monotonic()
        if not self.table.tick(now):
            _log().warning("the runner was stalled; member heartbeats start a fresh window")
        for member in self.table.beats_due(now):
            self.runner.send(member.agent, Heartbeat(host=member.name, beat=self.beat))
        for member in self.table.overdue(now):
            self.died(member, "it missed its heartbeats")
        self.runner.wakeupAfter(timedelta(seconds=HEARTBEAT_INTERVAL), HeartbeatDue())

    def child_exited(self, address: Any, entries: Any) -> bool:
        """A member's agent or a session on a member exited; True if that was all of it
        (an agent: the member is dead if it was alive)."""
        member = self.table.by_agent(address)
        if member is not None:
            member.agent = None
            if member.alive:
                self.died(member, "its agent exited")
            return True
        for sid, e in entries.items():
            if e.address is not None and e.address == address:
                self.table.forget(sid)
                break
        return False

    def died(self, member: Member, why: str) -> None:
        """Every session of a dead member crashed: the registry restarts each (on a live
        member), and the new incarnation rebuilds from the log and closes its open turn."""
        registry = self.runner.registry
        moved = self.table.died(member)
        _log().error("member %s is dead (%s): moving %d sessions", member.name, why, len(moved))
        now = time.monotonic()
        for sid in moved:
            e = registry.entries.get(sid) if registry is not None else None
            if e is None or e.address is None:
                continue
            member.abandoned.append(e.address)
            self.runner.do(registry.child_exited(e.address, now))
