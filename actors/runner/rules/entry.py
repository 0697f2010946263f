"""One session as the Runner's registry knows it: its typed state and the per-session
steps (spawn, forward, answer without a process) that return actions. Pure data."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import attrs

from ... import messages as m
from ...session.protocol import Routed
from .actions import Action, Fail, Forward, ReplayStored, Reply, Spawn, VerifyStored

#: Ingress that carries an idempotency key: tracked until committed, redelivered after a crash.
INGRESS = (
    m.SendMessage,
    m.Interrupt,
    m.SetMetadata,
    m.SwitchSession,
    m.SwitchBranch,
    m.DecideAction,
    m.SubmitGoal,
    m.ResumeGoal,
)


class EntryState(enum.StrEnum):
    """Where a session stands in the Runner's supervision."""

    #: Spawned, not ready yet: requests queue.
    STARTING = "starting"
    #: Ready: requests are forwarded.
    LIVE = "live"
    #: Asked to exit (passivation, close, a stale incarnation): requests queue.
    STOPPING = "stopping"
    #: Crashed; a new incarnation starts after the backoff: requests queue.
    RESTARTING = "restarting"
    #: No process; the next request spawns one.
    PASSIVATED = "passivated"
    #: Closed in its stream: reads and replays are served, ingress is refused.
    CLOSED = "closed"
    #: Over its restart budget (or failed in its stream): everything but reads is refused.
    FAILED = "failed"

    @property
    def public(self) -> str:
        """The state a `SessionInfo` reports: live, passivated, closed or failed."""
        if self in (EntryState.LIVE, EntryState.CLOSED, EntryState.FAILED):
            return self.value
        return EntryState.PASSIVATED.value


#: States in which a process is on the session or is about to be (after a crash's backoff).
WORKING = (EntryState.STARTING, EntryState.LIVE, EntryState.RESTARTING)
#: States in which the session serves no more ingress.
TERMINAL = (EntryState.CLOSED, EntryState.FAILED)


@attrs.frozen(kw_only=True)
class CreateRequest:
    """A `CreateSession` waiting for the new incarnation's `SessionReady`."""

    request_id: str
    reply_to: Any
    metadata: Mapping[str, str] = attrs.field(factory=dict)


def fail(to: Any, request_id: str, error: str, message: str, sid: str = "") -> Fail:
    return Fail(to=to, request_id=request_id, error=error, message=message, session_id=sid)


@attrs.define(kw_only=True)
class Entry:
    """One session as the Runner knows it."""

    session_id: str
    state: EntryState = EntryState.PASSIVATED
    address: Any = None
    incarnation: int = 0
    last_seq: int = 0
    busy: bool = False
    #: Stored messages waiting in the live incarnation for a turn (as it last reported).
    queued: int = 0
    last_activity: float = 0.0
    #: Why the Runner asked the current incarnation to stop ("" if it did not).
    stop_reason: str = ""
    metadata: Mapping[str, str] = attrs.field(factory=dict)
    #: Requests waiting for a live incarnation, in arrival order.
    pending: list[Routed] = attrs.field(factory=list)
    #: Keyed ingress forwarded to the live incarnation and not yet committed.
    in_flight: dict[str, Routed] = attrs.field(factory=dict)
    #: How many crashes each uncommitted key has been in flight through.
    crashes: dict[str, int] = attrs.field(factory=dict)
    #: Incarnations in a row stopped by an unreachable spine (not counted as crashes).
    outages: int = 0
    #: Times of the crashes that still count against the restart budget.
    crash_times: tuple[float, ...] = ()
    #: Protocol subscriptions held by the live incarnation (it is not passivated under them).
    subscribers: int = 0
    total_restarts: int = 0
    create: CreateRequest | None = None
    #: Poison keys the next live incarnation must record: (key, detail).
    poisoned: list[tuple[str, str]] = attrs.field(factory=list)
    #: Why the session failed, when this Runner saw it fail.
    error: str = ""

    def info(self) -> m.SessionInfo:
        return m.SessionInfo(
            session_id=self.session_id,
            state=self.state.public,
            last_seq=self.last_seq,
            restarts=self.total_restarts,
            metadata=self.metadata,
            error=self.error if self.state == EntryState.FAILED else "",
            working=self.state in WORKING,
        )

    def spawn(self) -> Spawn:
        """Start the next incarnation (its address arrives with `Registry.bind`)."""
        self.incarnation += 1
        self.state = EntryState.STARTING
        self.stop_reason = ""
        self.address = None
        c = self.create
        return Spawn(
            session_id=self.session_id,
            incarnation=self.incarnation,
            create=c is not None,
            metadata=c.metadata if c is not None else {},
        )

    def forward(self, routed: Routed, now: float) -> Forward:
        """Send a request to the live incarnation, tracking subscriptions and keyed ingress."""
        msg = routed.message
        if isinstance(msg, m.Subscribe):
            self.subscribers += 1
        elif isinstance(msg, m.Unsubscribe):
            self.subscribers = max(0, self.subscribers - 1)
        elif isinstance(msg, m.GetSession):
            routed = attrs.evolve(routed, restarts=self.total_restarts)
        elif isinstance(msg, INGRESS) and msg.key:
            self.in_flight[msg.key] = routed
        self.last_activity = now
        return Forward(session_id=self.session_id, address=self.address, routed=routed)

    def unservable(self, routed: Routed) -> Action:
        """Answer a request to a closed or failed session: reads and repeated closes
        succeed, everything else is refused with the session's state."""
        msg, to = routed.message, routed.reply_to
        if isinstance(msg, m.GetSession):
            return Reply(to=to, message=m.SessionReply(request_id=msg.request_id, info=self.info()))
        if isinstance(msg, m.CloseSession) and self.state == EntryState.CLOSED:
            return Reply(to=to, message=m.Done(request_id=msg.request_id))
        if isinstance(msg, m.VerifySession) and self.state == EntryState.FAILED:
            # Verification reads stored rows only: a failed session is verified all the same.
            return VerifyStored(session_id=self.session_id, request_id=msg.request_id, reply_to=to)
        if isinstance(msg, m.Subscribe) and self.state == EntryState.FAILED:
            # A subscription cut off by the crashes that failed it is taken up again here:
            # refusing it would hide the very event that says the session failed.
            return ReplayStored(session_id=self.session_id, request=msg, reply_to=to)
        error = "SessionClosed" if self.state == EntryState.CLOSED else "SessionFailed"
        text = f"session {self.session_id} is {self.state.value}"
        if self.state == EntryState.FAILED and self.error:
            text += f": {self.error}"
        return fail(to, msg.request_id, error, text, self.session_id)

    def drain(self) -> list[Action]:
        """Answer everything that waited for a session that will not serve again."""
        pending, self.pending = self.pending, []
        return [self.unservable(routed) for routed in pending]
