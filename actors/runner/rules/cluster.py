"""Several hosts: the member table the Runner keeps, and where a session goes. Pure.

A convention leader runs the Runner and the projections; member hosts join its Thespian
convention and advertise capabilities (`HOST`, `CAPACITY`, `DATA`). The Runner learns
members from the convention's registration notices, places each new or rehydrated session
on the live member with the most room for its capacity (Thespian's capability-based
placement does the creating: `fits` is the actors' ``actorSystemCapabilityCheck``), and
declares a member dead when its agent misses heartbeats: Thespian itself notices a dead
member only after many minutes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ...placement import CAPACITY, DATA, HOST

#: Seconds between two heartbeats the Runner sends each member's agent.
HEARTBEAT_INTERVAL = 0.25
#: Heartbeat intervals without an answer after which a member is dead.
MISSED_BEATS = 8
#: Seconds before an unanswered heartbeat is sent again. One heartbeat at a time per
#: member: each message to an unreachable host holds one of the sender's few transmit
#: slots until its connection attempt gives up, so pinging a silent member at the
#: heartbeat rate would soon stall every other message of the Runner.
RESEND_AFTER = 2.0
#: A Runner whose own heartbeat timer fires this late was itself stalled (its answers
#: waited in its mailbox): members get a fresh window instead of being declared dead.
STALL = HEARTBEAT_INTERVAL * 4


@attrs.define
class Member:
    """A member host as the Runner knows it."""

    name: str
    admin: Any
    capacity: int
    data_dir: str
    last_seen: float
    agent: Any = None
    alive: bool = True
    #: When the unanswered heartbeat went out (None: none outstanding).
    beat_sent: float | None = None
    #: Sessions placed here whose incarnation may still run.
    sessions: set[str] = attrs.field(factory=set)
    #: Incarnations left behind when the member was declared dead; stopped if it returns.
    abandoned: list[Any] = attrs.field(factory=list)


def member_of(capabilities: Mapping[str, Any] | None) -> tuple[str, int, str] | None:
    """``(name, capacity, data directory)`` of a system's capabilities; None if it is not
    a vertebra member (or advertises nonsense)."""
    caps = capabilities or {}
    name = caps.get(HOST)
    if not isinstance(name, str) or not name:
        return None
    try:
        capacity = int(caps.get(CAPACITY, 1))
    except (TypeError, ValueError):
        return None
    data = caps.get(DATA)
    return name, max(1, capacity), data if isinstance(data, str) else ""


class HostTable:
    """Members by name, their load, and heartbeat bookkeeping."""

    def __init__(self, miss_after: float = HEARTBEAT_INTERVAL * MISSED_BEATS) -> None:
        self.miss_after = miss_after
        self.members: dict[str, Member] = {}
        #: Where each session was last placed (member name).
        self.placement: dict[str, str] = {}
        self._ticked: float | None = None

    def joined(self, name: str, admin: Any, capacity: int, data_dir: str, now: float) -> Member:
        """A registration notice: a member joined, or its system started again under the
        same name (Thespian notifies an existing member only on its first registration
        after a start, having reported it gone first).

        A restarted member is a new system: alive, its heartbeat clock starting now, no
        heartbeat outstanding, and no agent (the old one died with the old system; the
        Runner creates another). Sessions still placed on it are the caller's to move
        first (`rejoining`)."""
        m = self.members.get(name)
        if m is None:
            m = self.members[name] = Member(
                name=name, admin=admin, capacity=capacity, data_dir=data_dir, last_seen=now
            )
        else:
            m.admin, m.capacity, m.data_dir = admin, capacity, data_dir
            m.alive, m.last_seen, m.beat_sent, m.agent = True, now, None, None
            m.abandoned = []
        return m

    def rejoining(self, name: str) -> Member | None:
        """The member of that name if it is thought alive: a registration notice for it
        means its system started again, so what it ran is gone and must move."""
        m = self.members.get(name)
        return m if m is not None and m.alive else None

    def by_admin(self, admin: Any) -> Member | None:
        return next((m for m in self.members.values() if m.admin == admin), None)

    def by_agent(self, agent: Any) -> Member | None:
        return next(
            (m for m in self.members.values() if m.agent is not None and m.agent == agent), None
        )

    def seen(self, name: str, now: float) -> Member | None:
        """A heartbeat answer: the member lives. Returned if it had been declared dead."""
        m = self.members.get(name)
        if m is None:
            return None
        m.last_seen = now
        m.beat_sent = None
        if m.alive:
            return None
        m.alive = True
        return m

    def place(self, sid: str) -> Member | None:
        """The live member with the lowest load for its capacity (None if none is live)."""
        live = [m for m in self.members.values() if m.alive]
        if not live:
            return None
        best = min(live, key=lambda m: (len(m.sessions) / m.capacity, -m.capacity, m.name))
        self.forget(sid)
        best.sessions.add(sid)
        self.placement[sid] = best.name
        return best

    def forget(self, sid: str) -> None:
        """The session's incarnation exited (or moves): it no longer loads its member."""
        name = self.placement.pop(sid, None)
        if name is not None and name in self.members:
            self.members[name].sessions.discard(sid)

    def where(self, sid: str) -> str:
        """The member the session was placed on ("" if on the leader or unknown)."""
        return self.placement.get(sid, "")

    def died(self, m: Member) -> list[str]:
        """Declare ``m`` dead: the sessions it carried, which must move."""
        m.alive = False
        moved = sorted(m.sessions)
        for sid in moved:
            self.forget(sid)
        return moved

    def tick(self, now: float) -> bool:
        """The heartbeat timer fired: False (and a fresh window for every live member) if
        it fired so late that the Runner itself was stalled."""
        last, self._ticked = self._ticked, now
        if last is None or now - last <= STALL:
            return True
        for m in self.members.values():
            if m.alive:
                m.last_seen = max(m.last_seen, now)
        return False

    def beats_due(self, now: float) -> list[Member]:
        """Members to send a heartbeat to now: those with an agent and no heartbeat out,
        or one out for longer than `RESEND_AFTER`."""
        due = []
        for m in self.members.values():
            if m.agent is None:
                continue
            if m.beat_sent is None or now - m.beat_sent >= RESEND_AFTER:
                m.beat_sent = now
                due.append(m)
        return due

    def overdue(self, now: float) -> list[Member]:
        """Live members whose last heartbeat answer is older than ``miss_after``."""
        return [m for m in self.members.values() if m.alive and now - m.last_seen > self.miss_after]

    def rows(self) -> list[dict[str, Any]]:
        """The table for status output."""
        return [
            {"host": m.name, "alive": m.alive, "capacity": m.capacity, "sessions": len(m.sessions)}
            for m in sorted(self.members.values(), key=lambda m: m.name)
        ]
