"""The Runner's registry: every session it knows, as a state machine without effects.

No Thespian, no I/O, no clock. Each input (a request, a session's report, a child's exit,
a timer) is a method that updates the registry and returns the `actions` the actor shell
carries out, in order. What the registry cannot know without I/O (a stream's last seq in
the log) the shell reads first and passes in (`load`). Times are the shell's monotonic
clock, passed as ``now``.

Per session: ``PASSIVATED`` (no process; the next request spawns one) -> ``STARTING``
(spawned, requests queue) -> ``LIVE`` (requests are forwarded) -> ``STOPPING`` (asked to
exit: passivation, close, a stale incarnation) -> ``PASSIVATED``/``CLOSED``/``FAILED``. A
process that exits unasked crashed: ``RESTARTING`` (after a backoff, a new incarnation)
or, over the restart budget, ``FAILED``. Those exits, restarts and passivation are
`RegistryExits` (``exits.py``), a mixin of `Registry`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from projections import secret_problem
from spine import SpineError, validate_session_id

from ... import messages as m
from ...policy import RestartPolicy
from ...session.protocol import (
    WAITING,
    Appended,
    Behind,
    FindRequest,
    RequestWhere,
    Routed,
    SessionReady,
    SessionStopping,
)
from .actions import (
    Action,
    CloseStored,
    Deliver,
    Forward,
    RecordPoison,
    Reply,
    Stop,
    WakeProjection,
)
from .entry import TERMINAL, CreateRequest, Entry, EntryState, fail
from .exits import RegistryExits


def _counters() -> dict[str, int]:
    names = ("created", "restarts", "passivated", "rehydrated", "poisoned", "failed", "outages")
    return dict.fromkeys((*names, "redelivered"), 0)


def _valid(sid: str) -> str:
    """Why ``sid`` is not a valid session id ("" when it is)."""
    try:
        validate_session_id(sid)
    except SpineError as exc:
        return str(exc)
    return ""


@attrs.define
class Registry(RegistryExits):
    """Every session the Runner knows, keyed by id (addresses are not hashable).

    ``own_address`` is where the Runner's own requests (close-all's closes) are answered.
    """

    policy: RestartPolicy = attrs.field(factory=RestartPolicy)
    idle_timeout: float | None = None
    own_address: Any = None
    entries: dict[str, Entry] = attrs.field(factory=dict)
    #: After close-all the Runner refuses new work.
    closed: bool = False
    counters: dict[str, int] = attrs.field(factory=_counters)

    # -- what the shell read from the log --------------------------------------------------

    def load(self, sid: str, stored_seq: int) -> Entry | None:
        """Take the stream's last seq from the log: the truth for `SessionInfo.last_seq`.

        A stream the registry has not seen becomes a passivated entry.
        """
        e = self.entries.get(sid)
        if e is None and stored_seq > 0:
            e = self.entries[sid] = Entry(session_id=sid)
        if e is not None:
            e.last_seq = max(stored_seq, 0)
        return e

    # -- registry requests -----------------------------------------------------------------

    def create(
        self, sid: str, request_id: str, reply_to: Any, metadata: Mapping[str, str]
    ) -> list[Action]:
        """`CreateSession` (``sid`` already chosen); answered once the session is ready."""
        if self.closed:
            return [fail(reply_to, request_id, "RunnerClosed", "the runner is closed", sid)]
        why = _valid(sid) or secret_problem(metadata)
        if why:
            return [fail(reply_to, request_id, "InvalidRequest", why, sid)]
        if sid in self.entries:
            text = f"session {sid} already exists"
            return [fail(reply_to, request_id, "SessionAlreadyExists", text, sid)]
        e = self.entries[sid] = Entry(session_id=sid)
        e.create = CreateRequest(request_id=request_id, reply_to=reply_to, metadata=metadata)
        return [e.spawn()]

    def register(self, sid: str, request_id: str, reply_to: Any) -> list[Action]:
        """`RegisterSession`: insert without checking, answer what the registry knows."""
        why = _valid(sid)
        if why:
            return [fail(reply_to, request_id, "InvalidRequest", why, sid)]
        e = self.entries.get(sid)
        if e is None:
            e = self.entries[sid] = Entry(session_id=sid)
        return [Reply(to=reply_to, message=m.SessionReply(request_id=request_id, info=e.info()))]

    def list_sessions(self, request_id: str, reply_to: Any, only: str = "") -> list[Action]:
        """`ListSessions`: every entry (the shell loaded the log's streams first), or the
        entry named ``only``, if there is one."""
        if only:
            infos = tuple(e.info() for e in (self.entries.get(only),) if e is not None)
        else:
            infos = tuple(e.info() for e in self.entries.values())
        return [
            Reply(to=reply_to, message=m.SessionListReply(request_id=request_id, sessions=infos))
        ]

    def close_all(self, request_id: str, reply_to: Any, now: float) -> list[Action]:
        """`CloseAll`: close every session the registry knows (the shell loaded every stream
        of the log first), then refuse new work.

        A session with a process (or about to have one) is sent `CloseSession`; one without
        is closed in the log by the Runner itself (`CloseStored`), which is then its only
        writer. Closed and failed sessions stay as they are.
        """
        out: list[Action] = []
        for e in list(self.entries.values()):
            if e.state in TERMINAL:
                continue
            if e.state == EntryState.PASSIVATED:
                out.append(CloseStored(session_id=e.session_id))
                continue
            close = m.CloseSession(request_id=f"close-all:{e.session_id}", session_id=e.session_id)
            out += self.route(e.session_id, close, self.own_address, now)
        self.closed = True
        out.append(Reply(to=reply_to, message=m.Done(request_id=request_id)))
        return out

    def stored_terminal(self, sid: str, terminal: str, last_seq: int) -> list[Action]:
        """The shell found (or made) the stream ``terminal`` ("closed" or "failed") in the log."""
        e = self.entries.get(sid)
        if e is None or e.state != EntryState.PASSIVATED:
            return []
        e.state = EntryState(terminal)
        e.last_seq = last_seq
        return []

    # -- session-addressed requests --------------------------------------------------------

    def route(self, sid: str, msg: Any, reply_to: Any, now: float) -> list[Action]:
        """Any request addressed to one session: forward, queue, spawn, or answer here."""
        rid = msg.request_id
        is_get = isinstance(msg, m.GetSession)
        if self.closed and not is_get:
            return [fail(reply_to, rid, "RunnerClosed", "the runner is closed", sid)]
        why = _valid(sid)
        e = None if why else self.entries.get(sid)
        if e is None and why and not is_get:
            return [fail(reply_to, rid, "InvalidRequest", why, sid)]
        if e is None:
            return [fail(reply_to, rid, "SessionNotFound", f"session {sid} not found", sid)]
        routed = Routed(message=msg, reply_to=reply_to, session_id=sid)
        if e.state == EntryState.LIVE:
            return [e.forward(routed, now)]
        if e.state == EntryState.CLOSED and isinstance(msg, m.Subscribe):
            # Replaying a closed session is still allowed: bring it back to serve the backlog.
            e.pending.append(routed)
            return [e.spawn()]
        if e.state in TERMINAL:
            return [e.unservable(routed)]
        # A request the stopping incarnation bounced back (or the Host sent again) may
        # still be tracked as in flight: it waits in one place only, or it is served twice.
        key = getattr(msg, "key", None)
        if key:
            e.in_flight.pop(key, None)
            e.pending = [p for p in e.pending if getattr(p.message, "key", None) != key]
        e.pending.append(routed)
        if e.state != EntryState.PASSIVATED:
            return []
        self.counters["rehydrated"] += 1
        return [e.spawn()]

    def find(self, msg: FindRequest, reply_to: Any) -> list[Action]:
        """Where the Host's request ``msg.about`` stands: queued here for an incarnation
        that is not ready (`WAITING`); keyed ingress forwarded to the live incarnation and
        not committed, asked of that incarnation behind it (`Behind`); else none held."""
        e = self.entries.get(msg.session_id)
        where = ""
        if e is not None and any(p.message.request_id == msg.about for p in e.pending):
            where = WAITING
        elif (
            e is not None
            and e.state == EntryState.LIVE
            and e.address is not None
            and any(r.message.request_id == msg.about for r in e.in_flight.values())
        ):
            behind = Behind(request_id=msg.request_id, reply_to=reply_to)
            return [Reply(to=e.address, message=behind)]
        return [Reply(to=reply_to, message=RequestWhere(request_id=msg.request_id, where=where))]

    def bind(self, sid: str, incarnation: int, address: Any) -> None:
        """The shell created incarnation ``incarnation`` at ``address``."""
        e = self.entries.get(sid)
        if e is not None and e.incarnation == incarnation:
            e.address = address

    # -- reports from session incarnations -------------------------------------------------

    def _current(self, sid: str, incarnation: int) -> Entry | None:
        e = self.entries.get(sid)
        return e if e is not None and e.incarnation == incarnation else None

    def session_ready(self, msg: SessionReady, now: float) -> list[Action]:
        """An incarnation loaded its stream: answer its creator and what waited for it."""
        e = self._current(msg.session_id, msg.incarnation)
        if e is None:
            return []
        e.last_seq, e.metadata, e.last_activity = msg.last_seq, dict(msg.metadata), now
        e.outages = 0
        stopping = e.state == EntryState.STOPPING
        if not stopping:
            e.state = _ready_state(msg)
        out = self._answer_create(e, msg)
        if stopping:
            # It asked to be stopped before it was ready: what waits goes to the next one.
            return out
        poisoned, e.poisoned = e.poisoned, []
        if e.address is not None:
            out += [
                RecordPoison(session_id=e.session_id, address=e.address, key=k, detail=d)
                for k, d in poisoned
            ]
        pending, e.pending = e.pending, []
        for routed in pending:
            if e.state == EntryState.LIVE:
                out.append(e.forward(routed, now))
            elif isinstance(routed.message, m.Subscribe | m.Unsubscribe):
                # A closed session still serves replays of its stream.
                out.append(Forward(session_id=e.session_id, address=e.address, routed=routed))
            else:
                out.append(e.unservable(routed))
        if e.state in TERMINAL and e.address is not None:
            # It only came back to answer (a replay, a refusal): its process is not needed.
            e.stop_reason = e.state.value
            out.append(Stop(session_id=e.session_id, address=e.address))
        return out

    def _answer_create(self, e: Entry, msg: SessionReady) -> list[Action]:
        c, e.create = e.create, None
        if c is None:
            return []
        if msg.already_exists:
            text = f"session {e.session_id} already exists"
            return [fail(c.reply_to, c.request_id, "SessionAlreadyExists", text, e.session_id)]
        self.counters["created"] += 1
        reply = m.SessionReply(request_id=c.request_id, info=e.info())
        return [Reply(to=c.reply_to, message=reply)]

    def appended(self, msg: Appended, now: float) -> list[Action]:
        """An incarnation stored records (and/or committed keys, produced live items)."""
        e = self._current(msg.session_id, msg.incarnation)
        if e is not None:
            if msg.records:
                e.last_seq = max(e.last_seq, msg.records[-1][0])
            for k in msg.keys:
                e.in_flight.pop(k, None)
                e.crashes.pop(k, None)
            e.busy = msg.busy
            e.queued = msg.queued
            e.last_activity = now
        out: list[Action] = [WakeProjection()] if msg.records else []
        if msg.records or msg.live:
            out.append(Deliver(session_id=msg.session_id, records=msg.records, live=msg.live))
        return out

    def stopping(self, msg: SessionStopping) -> list[Action]:
        """An incarnation closed itself (or found itself stale) and asks to be stopped."""
        e = self._current(msg.session_id, msg.incarnation)
        if e is None or e.address is None:
            return []
        e.stop_reason = msg.reason
        e.state = EntryState.STOPPING
        return [Stop(session_id=e.session_id, address=e.address)]

    def poison(self, routed: Routed, details: str) -> list[Action]:
        """A request's handler raised twice in the session (Thespian's `PoisonMessage`)."""
        inner = routed.message
        sid = getattr(inner, "session_id", "") or routed.session_id
        key = getattr(inner, "key", "") or ""
        self.counters["poisoned"] += 1
        detail = f"{type(inner).__name__} crashed the session twice: {details}"
        out: list[Action] = [
            fail(routed.reply_to, inner.request_id, "PoisonMessageError", detail, sid)
        ]
        e = self.entries.get(sid)
        if e is not None:
            e.in_flight.pop(key, None)
            if e.state == EntryState.LIVE and e.address is not None:
                out.append(RecordPoison(session_id=sid, address=e.address, key=key, detail=detail))
        return out

    # -- counters and queues ---------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        out = dict(self.counters)
        out["live"] = sum(1 for e in self.entries.values() if e.state == EntryState.LIVE)
        out["known"] = len(self.entries)
        queues = self.queues().values()
        out["ingress_pending"] = sum(q[0] for q in queues)
        out["ingress_in_flight"] = sum(q[1] for q in queues)
        out["ingress_queued"] = sum(q[2] for q in queues)
        return out

    def queues(self) -> dict[str, tuple[int, int, int]]:
        """Each session's ingress as the Runner knows it, for sessions with any:
        ``(pending, in_flight, queued)``: requests waiting here for a live incarnation,
        keyed ingress forwarded to it and not committed yet (in its mailbox or being
        decided), and stored messages it reported waiting for a turn."""
        out: dict[str, tuple[int, int, int]] = {}
        for sid, e in self.entries.items():
            queued = e.queued if e.state == EntryState.LIVE else 0
            q = (len(e.pending), len(e.in_flight), queued)
            if any(q):
                out[sid] = q
        return out


def _ready_state(msg: SessionReady) -> EntryState:
    if msg.closed:
        return EntryState.CLOSED
    return EntryState.FAILED if msg.failed else EntryState.LIVE
