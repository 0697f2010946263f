"""`ConversationCommands`: the `Host` methods that shape a conversation: steer a running
turn (`send(..., mode="steer")` is in `SessionCommands`), edit and regenerate on the turn
tree, list and switch branches, fork a session at any seq, replay it on another model.

A fork is by reference (`spine.Log.fork`): the new stream stores one ``session.forked``
row naming the parent and the seq (under which the parent's seals in the prefix verify as
the parent's), then one ``session.properties`` event of provenance (the parent and the
seq, as metadata `Host.info` shows), then, for a fork inside a turn, that turn's end (reason
``forked``). The prefix is read through the parent's rows by every per-stream read, so a
fork costs the same at any length. The ``session.forked`` row also names the Merkle root
of the prefix (``root``; ``Host.fork(root=False)``: not), from the parent's newest seal at or below
the seq and the rows after it (`spine.Log.fork`). Forks made by copying, before forks by
reference, are ordinary streams and read as they always did.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from projections import Branch, Turn, branches, thread_from
from spine import (
    ConflictError,
    Event,
    Kind,
    Log,
    Record,
    StorageError,
    Usage,
    new_session_id,
    validate_session_id,
)
from spine.seal import merkle_root, row_leaf_hash

from .. import messages as m
from ..errors import InvalidRequest, SessionAlreadyExists, SessionNotFound
from ..policy import BusyPolicy
from ..runner import spine_spec
from ..session.rules.recovery import recovery_events
from ..session.rules.state import SessionState, fold
from ..session.shell.snapshots import SnapshotStore
from ..spec import REPLAY_OF, REPLAY_TURN
from .replies import request_id

#: Provenance keys a fork stores (as metadata: `Host.info` shows them).
FORK_PARENT = "fork.parent"
FORK_SEQ = "fork.seq"


@attrs.frozen(kw_only=True)
class ReplayTurn:
    """One user message re-run by `Host.replay`: its seq in the parent and in the copy,
    and the answer each got."""

    parent_seq: int
    seq: int
    text: str
    parent_reply: str
    reply: str
    stop_reason: str = ""
    #: The tool calls each run asked for, as (tool, input JSON), in order.
    parent_calls: tuple[tuple[str, str], ...] = ()
    calls: tuple[tuple[str, str], ...] = ()
    #: Each tool result as (result, is_error), in order: a replay's are the parent's
    #: stored ones, or a refusal where the call differs.
    parent_results: tuple[tuple[str, bool], ...] = ()
    results: tuple[tuple[str, bool], ...] = ()
    parent_usage: Usage = attrs.field(factory=Usage)
    usage: Usage = attrs.field(factory=Usage)

    @property
    def same(self) -> bool:
        return (
            self.parent_reply == self.reply
            and self.parent_calls == self.calls
            and self.parent_results == self.results
        )


@attrs.frozen(kw_only=True)
class Replay:
    """What `Host.replay` did: the new session, where it forked, each re-run turn, and the
    first parent seq whose answer differs (0: none did)."""

    session_id: str
    at: int
    turns: tuple[ReplayTurn, ...]

    @property
    def diverged_at(self) -> int:
        return next((t.parent_seq for t in self.turns if not t.same), 0)

    @property
    def tokens_delta(self) -> int:
        """Input and output tokens the replay spent, less what the parent's turns did."""
        used = sum(t.usage.input_tokens + t.usage.output_tokens for t in self.turns)
        was = sum(t.parent_usage.input_tokens + t.parent_usage.output_tokens for t in self.turns)
        return used - was


def _calls(events: list[Event], turn: Turn) -> tuple[tuple[str, str], ...]:
    answers = set(turn.answers)
    return tuple((e.tool, e.input) for e in events if e.seq in answers and e.kind == Kind.TOOL_CALL)


def fork_root(records: list[Record]) -> str:
    """The Merkle root (hex) of stored rows, as seals compute it."""
    return merkle_root([row_leaf_hash(r.payload, r.version) for r in records]).hex()


def _prefix(log: Log, sid: str, at: int) -> list[Record]:
    out: list[Record] = []
    while len(out) < at:
        page = log.read(sid, out[-1].seq if out else 0, min(1000, at - len(out)))
        if not page:
            break
        out.extend(page)
    return out


def _tail(log: Log, sid: str, at: int) -> list[Event]:
    """The events of ``sid`` up to ``at`` from its last ``turn.started`` (all of them if
    it has none), read backwards in growing windows: a fork needs only the turn it is in."""
    window = 256
    while True:
        start = max(0, at - window)
        events = [r.event() for r in log.read(sid, start, at - start)]
        first = _last_start(events)
        if first >= 0 or start == 0:
            return events[max(first, 0) :]
        window *= 4


def _last_start(events: list[Event]) -> int:
    return next(
        (i for i in range(len(events) - 1, -1, -1) if events[i].kind == Kind.TURN_STARTED), -1
    )


_ENDS = frozenset({Kind.TURN_COMPLETED, Kind.TURN_CANCELLED})


def _own(ev: Event, sid: str) -> bool:
    # A child's events mirrored here (attributed by goal) open and close the child's turns.
    return not ev.goal or ev.goal == sid


def _queues(ev: Event) -> bool:
    """A message a turn will run for (a steer is not one until it is dropped)."""
    if ev.kind == Kind.USER_MESSAGE:
        return ev.extra.get("steer") is not True
    return ev.kind == Kind.STEER_DROPPED and ev.extra.get("handed") == "next"


def safe_point(
    events: list[Event], sid: str, open_turn: bool = False, waiting: int = 0, best: int = 0
) -> int:
    """The last seq of ``events`` at which no turn was open and no message waited for one
    (0: none): a fork there starts idle, without re-running what the parent was doing.
    ``open_turn``, ``waiting`` and ``best`` say where the session stood before ``events``
    (by default: at its start)."""
    for ev in events:
        if _own(ev, sid):
            kind = ev.kind
            if kind == Kind.TURN_STARTED:
                open_turn, waiting = True, max(0, waiting - 1)
            elif kind in _ENDS:
                open_turn = False
            elif _queues(ev):
                waiting += 1
        if not open_turn and not waiting:
            best = ev.seq
    return best


def safe_point_after(state: SessionState, tail: list[Event], sid: str) -> int:
    """`safe_point` of a stream of which ``state`` is the fold up to ``state.last_seq``
    (a snapshot) and ``tail`` the events after it; 0 when it cannot tell from there (the
    session was busy at the snapshot and stayed busy): the caller reads the stream whole."""
    busy = state.busy
    return safe_point(
        tail, sid, state.open_turn is not None, len(state.pending), 0 if busy else state.last_seq
    )


def stored_safe_point(data_dir: str, spine: str, log: Log, sid: str) -> int:
    """`safe_point` of ``sid``, from its snapshot and the events after it when it has one
    (a long stream is not read whole), else from its whole stream."""
    try:
        store = SnapshotStore(data_dir, spine_spec(data_dir, spine))
    except (StorageError, OSError):
        store = None  # a snapshot is a cache: without one, the stream is read whole
    if store is not None:
        try:
            snap = store.load(sid)
        finally:
            store.close()
        if snap is not None:
            tail = [r.event() for r in log.read(sid, snap.last_seq, None)]
            found = safe_point_after(snap, tail, sid)
            if found:
                return found
    return safe_point(log.read_events(sid), sid)


def _left_open(log: Log, sid: str, at: int) -> list[Event]:
    """What closes a turn the prefix ends inside (reason ``forked``): the session's own
    recovery, folded from that turn's start only (a whole long stream needs no fold)."""
    events = _tail(log, sid, at)
    if not events or events[0].kind != Kind.TURN_STARTED:
        return []
    if any(e.kind in _ENDS and _own(e, sid) for e in events):
        return []
    meta = [
        e.event() for e in log.read(sid, 0, None, kinds=[Kind.PROPERTIES]) if e.seq < events[0].seq
    ]
    st = fold(SessionState(session_id=sid), [*meta, *events])
    return recovery_events(st, "forked")


def fork_events(log: Log, parent: str, at: int, metadata: Mapping[str, str]) -> list[Event]:
    """What a fork at ``at`` stores after its link: its provenance, the end of a turn the
    prefix left open (reason ``forked``), and the new metadata, if any."""
    prov = {FORK_PARENT: parent, FORK_SEQ: str(at)}
    out = [Event(kind=Kind.PROPERTIES, properties=prov)]
    out.extend(_left_open(log, parent, at))
    if metadata:
        out.append(Event(kind=Kind.PROPERTIES, properties=dict(metadata)))
    return out


class ConversationCommands:
    """Branches, forks and replays. A mixin of `Host` (the spine and the round trip)."""

    _log: Log
    data_dir: str
    spine: Any

    if TYPE_CHECKING:

        def _request(self, msg: Any, *, timeout: float | None = None) -> Any: ...
        def send(
            self,
            session_id: str,
            text: str,
            *,
            key: str | None = None,
            mode: str | BusyPolicy = "",
            edits: int = 0,
            regenerates: int = 0,
        ) -> m.Ack: ...
        def wait_turn(
            self, session_id: str, after_seq: int = 0, timeout: float = 30.0
        ) -> Event: ...
        def get(self, session_id: str) -> m.SessionInfo: ...
        def set_metadata(
            self, session_id: str, properties: Mapping[str, str | None], *, key: str | None = None
        ) -> m.Ack: ...

    def edit(self, session_id: str, seq: int, text: str, *, key: str | None = None) -> m.Ack:
        """Start a new branch from the user message at ``seq``, with ``text`` in its place;
        its turn runs on the path up to that message's parent."""
        _positive("seq", seq)
        return self.send(session_id, text, key=key, edits=seq)

    def regenerate(
        self, session_id: str, seq: int | None = None, *, key: str | None = None
    ) -> m.Ack:
        """Answer the user message at ``seq`` (default: the latest on the active path)
        again, as a sibling branch; the old answer stays in the log and the tree."""
        if seq is not None:
            _positive("seq", seq)
        return self.send(session_id, "", key=key, regenerates=seq or -1)

    def switch_branch(self, session_id: str, turn: int, *, key: str | None = None) -> m.Ack:
        """Make the branch through ``turn`` (its user message's seq) the active path."""
        _positive("turn", turn)
        msg = m.SwitchBranch(
            request_id=request_id(), session_id=session_id, key=key or request_id(), turn=turn
        )
        return self._request(msg)  # type: ignore[no-any-return]

    def branches(self, session_id: str) -> list[Branch]:
        """Every branch of the session's turn tree (a path to a leaf), the active one marked."""
        events = self._log.read_events(session_id)
        if not events:
            raise SessionNotFound(f"no session {session_id}", session_id=session_id)
        return branches(thread_from(events))

    def fork(
        self,
        session_id: str,
        at: int | None = None,
        *,
        new_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        root: bool = True,
    ) -> str:
        """A new session whose stream starts with ``session_id``'s events up to ``at``
        (default: its last seq with no turn running and no message waiting, found from
        its snapshot and the rows after it, or from its whole stream without one), by
        reference, then their provenance; its fold at ``at`` is the
        parent's. Its first event (``session.forked``) names the prefix's Merkle root
        (``root=False``: not), found from the parent's seals. Returns the new id."""
        child = new_id if new_id is not None else new_session_id()
        try:
            validate_session_id(child)
        except ValueError as exc:
            raise InvalidRequest(str(exc), session_id=str(child)) from None
        last = self._log.last_seq(session_id)
        if not last:
            raise SessionNotFound(f"no session {session_id}", session_id=session_id)
        if at is None:
            at = stored_safe_point(self.data_dir, self.spine, self._log, session_id) or last
        _positive("at", at)
        if at > last:
            raise InvalidRequest(f"session {session_id} has {last} events, not {at}")
        if child == session_id:
            raise SessionAlreadyExists(
                f"session {child} already exists: a session cannot be forked into itself",
                session_id=child,
            )
        events = fork_events(self._log, session_id, at, metadata or {})
        try:
            if child == session_id:  # the parent's own id is taken, by the parent
                raise ConflictError(child, 0, last)
            self._log.fork(child, session_id, at, events, root=root)
        except ConflictError:
            raise SessionAlreadyExists(
                f"session {child} already exists: a fork never overwrites a stream",
                session_id=child,
            ) from None
        self.get(child)  # bring it up: it settles (a message the prefix left waiting runs)
        return child

    def replay(
        self,
        session_id: str,
        *,
        at: int | None = None,
        metadata: Mapping[str, str] | None = None,
        new_id: str | None = None,
        timeout: float = 60.0,
    ) -> Replay:
        """Fork before the first user message after ``at`` (default: the first) with
        ``metadata`` (e.g. ``ore.model.*``), re-send the parent's user messages of its
        active path one turn at a time, and compare the answers. No tool runs: each call
        the new run makes is answered with the result the parent's turn stored for the
        same call (`TurnInput.recorded`), and a call the parent did not make is refused
        and shows as the divergence. The fork serves on as usual afterwards."""
        events = self._log.read_events(session_id)
        path = [t for t in thread_from(events).turns() if t.id > (at or 0)]
        if not path:
            raise InvalidRequest(f"session {session_id} has no user message to replay")
        md = {**(metadata or {}), REPLAY_OF: session_id}
        child = self.fork(session_id, path[0].id - 1, new_id=new_id, metadata=md)
        done: list[ReplayTurn] = []
        try:
            for t in path:
                self.set_metadata(child, {REPLAY_TURN: str(t.id)})
                done.append(self._replay_turn(child, events, t, timeout))
        finally:
            self.set_metadata(child, {REPLAY_OF: None, REPLAY_TURN: None})
        return Replay(session_id=child, at=path[0].id - 1, turns=tuple(done))

    def _replay_turn(self, child: str, events: list[Event], t: Turn, timeout: float) -> ReplayTurn:
        ack = self.send(child, t.text)
        end = self.wait_turn(child, ack.seq, timeout)
        now = self._log.read_events(child)
        mine = thread_from(now).turns()[-1]
        return ReplayTurn(
            parent_seq=t.id,
            seq=ack.seq,
            text=t.text,
            parent_reply=t.reply,
            reply=mine.reply,
            stop_reason=end.stop_reason or end.reason,
            parent_calls=_calls(events, t),
            calls=_calls(now, mine),
            parent_results=_results(events, t),
            results=_results(now, mine),
            parent_usage=t.usage,
            usage=mine.usage,
        )


def _results(events: list[Event], turn: Turn) -> tuple[tuple[str, bool], ...]:
    answers = set(turn.answers)
    return tuple(
        (e.result, e.is_error) for e in events if e.seq in answers and e.kind == Kind.TOOL_RESULT
    )


def _positive(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidRequest(f"{name} must be a seq of at least 1, got {value!r}")
