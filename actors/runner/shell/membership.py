"""`RunnerMembership`: a convention leader's Runner keeping its member hosts: joins and
departures, heartbeats, and moving the sessions of a member that died."""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

from thespian.actors import ActorExitRequest, ActorSystemConventionUpdate

from ... import messages as m
from ...placement import HOST
from ..protocol import Heartbeat, HeartbeatDue, HeartbeatReply
from ..rules.cluster import HEARTBEAT_INTERVAL, Member, member_of
from .effects import RunnerEffects
from .member import MemberAgent


def _log() -> logging.Logger:
    # Looked up at each use: Thespian re-initializes logging in actor processes after
    # import, so a logger captured at import time may no longer be wired to anything.
    return logging.getLogger("vertebra.runner")


class RunnerMembership(RunnerEffects):
    """The member hosts of a convention this Runner leads (`HostTable`), watched by
    heartbeat; a single-host Runner has none and ignores all of this."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._beat = 0

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
        restarted = self.hosts.rejoining(name)
        if restarted is not None:
            # Its "gone" notice was missed: its sessions died with its old system.
            self._member_died(restarted, "it started again")
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
