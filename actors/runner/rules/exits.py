"""`RegistryExits`: the part of the Runner's registry that handles session processes
ending: exits asked for or not (crashes), unreadable streams, restart and passivation
timers. Pure like the rest of the registry: no Thespian, no I/O, no clock."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from ...policy import RestartPolicy
from ...session.protocol import SPINE_UNAVAILABLE, SessionUnreadable
from ..protocol import PassivationDue, RestartDue
from . import supervision as sv
from .actions import Action, RecordFailure, Schedule, Stop
from .entry import Entry, EntryState, fail


class RegistryExits:
    """Exits, restarts and passivation: a mixin of `Registry`, which holds the fields."""

    # Slotted like the attrs class it is mixed into, so instances keep having no __dict__.
    __slots__ = ()

    policy: RestartPolicy
    idle_timeout: float | None
    entries: dict[str, Entry]
    counters: dict[str, int]

    if TYPE_CHECKING:

        def _current(self, sid: str, incarnation: int) -> Entry | None: ...

    def start(self) -> list[Action]:
        """The first passivation timer, if sessions passivate at all."""
        if not self.idle_timeout:
            return []
        return [Schedule(delay=self.idle_timeout / 2, payload=PassivationDue())]

    def child_exited(self, address: Any, now: float) -> list[Action]:
        """A session process exited: as asked (close, passivation, stale) or by crashing."""
        e = next(
            (x for x in self.entries.values() if x.address is not None and x.address == address),
            None,
        )
        if e is None:
            return []
        e.address = None
        # Subscriptions die with the incarnation; subscribers subscribe again.
        e.subscribers = 0
        if not e.stop_reason:
            return self._crashed(e, now)
        reason, e.stop_reason = e.stop_reason, ""
        if reason == SPINE_UNAVAILABLE:
            return self._spine_down(e)
        e.state = EntryState(reason) if reason in ("closed", "failed") else EntryState.PASSIVATED
        if reason == "passivate":
            self.counters["passivated"] += 1
        # What was in flight reached a session that stopped on purpose after committing or
        # refusing it; what is still uncommitted goes to a new incarnation.
        e.pending[:0] = e.in_flight.values()
        e.in_flight.clear()
        if e.pending and e.state != EntryState.FAILED:
            # A closed session comes back too: it answers replays and refuses the rest.
            return [e.spawn()]
        return e.drain()

    def _crashed(self, e: Entry, now: float) -> list[Action]:
        e.crash_times = sv.count_crash(self.policy, e.crash_times, now)
        sorted_ = sv.sort_in_flight(self.policy, e.in_flight, e.crashes)
        out: list[Action] = []
        for key in sorted_.poisoned:
            routed = e.in_flight[key]
            detail = sv.poison_detail(self.policy.poison_after)
            e.poisoned.append((key, detail))
            rid = routed.message.request_id
            out.append(fail(routed.reply_to, rid, "PoisonMessageError", detail, e.session_id))
        self.counters["poisoned"] += len(sorted_.poisoned)
        self.counters["redelivered"] += len(sorted_.redeliver)
        # Ingress that was in flight goes first to the next incarnation.
        e.pending[:0] = [e.in_flight[k] for k in sorted_.redeliver]
        e.crashes = dict(sorted_.crashes)
        e.in_flight.clear()
        verdict = sv.after_crash(self.policy, e.crash_times)
        if isinstance(verdict, sv.GiveUp):
            return out + self._mark_failed(e, verdict.reason)
        e.state = EntryState.RESTARTING
        e.total_restarts += 1
        self.counters["restarts"] += 1
        if verdict.delay <= 0:
            return [*out, e.spawn()]
        payload = RestartDue(session_id=e.session_id, incarnation=e.incarnation)
        return [*out, Schedule(delay=verdict.delay, payload=payload)]

    def _spine_down(self, e: Entry) -> list[Action]:
        """The incarnation stopped because the spine is unreachable: no crash, so the
        restart budget is untouched. What it held uncommitted waits for the next
        incarnation, which starts after a backoff of its own (growing to the policy's
        cap) and again until the spine answers: the session serves again by itself."""
        e.outages += 1
        self.counters["outages"] += 1
        e.pending[:0] = e.in_flight.values()
        e.in_flight.clear()
        e.state = EntryState.RESTARTING
        payload = RestartDue(session_id=e.session_id, incarnation=e.incarnation)
        return [Schedule(delay=sv.outage_delay(self.policy, e.outages), payload=payload)]

    def unreadable(self, msg: SessionUnreadable) -> list[Action]:
        """An incarnation found a stored row that does not decode: no restart can help.

        Accepted whatever the entry's state (its exit may have been taken for a crash
        first; the restart that scheduled then finds the entry failed and does nothing).
        """
        e = self.entries.get(msg.session_id)
        if e is None or e.incarnation != msg.incarnation or e.state == EntryState.FAILED:
            return []
        c, e.create = e.create, None
        out: list[Action] = []
        if c is not None:
            text = f"session {e.session_id} already exists and {msg.reason}"
            out.append(fail(c.reply_to, c.request_id, "SessionAlreadyExists", text, e.session_id))
        if e.address is not None:
            e.stop_reason = "failed"
        # What was in flight never reached a loaded session: it is answered, not redelivered.
        e.pending[:0] = e.in_flight.values()
        e.in_flight.clear()
        return out + self._mark_failed(e, msg.reason)

    def _mark_failed(self, e: Entry, reason: str) -> list[Action]:
        e.error = reason
        e.state = EntryState.FAILED
        self.counters["failed"] += 1
        return [RecordFailure(session_id=e.session_id, reason=reason), *e.drain()]

    def restart_due(self, due: RestartDue) -> list[Action]:
        """The backoff is over: start the next incarnation (unless something overtook it)."""
        e = self._current(due.session_id, due.incarnation)
        if e is None or e.state != EntryState.RESTARTING:
            return []
        return [e.spawn()]

    def passivation_due(self, now: float, keep: Collection[str] = ()) -> list[Action]:
        """Stop every session idle long enough (but those in ``keep``: a timer due soon),
        and schedule the next check."""
        out: list[Action] = []
        for e in self.entries.values():
            if e.address is not None and sv.may_passivate(
                live=e.state == EntryState.LIVE,
                busy=e.busy,
                in_flight=len(e.in_flight),
                subscribers=e.subscribers,
                idle_for=now - e.last_activity,
                idle_timeout=self.idle_timeout,
                timer_soon=e.session_id in keep,
            ):
                e.state, e.stop_reason = EntryState.STOPPING, "passivate"
                out.append(Stop(session_id=e.session_id, address=e.address))
        return out + self.start()
