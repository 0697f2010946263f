"""The sessions index: every session with its created time, last seq, activity and state.

It folds from the all-streams log (records carry their stream and global position), so a
daemon lists and picks sessions without opening each one. `reduce_info` is the per-session
rule; `SessionsIndex` holds one `SessionInfo` per stream in order of first appearance.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

import attrs

from spine import REVIVING_PHASES, TERMINAL_PHASES, Event, Kind, Record

#: ``SessionInfo.terminal`` when the session was closed (it may be reopened).
CLOSED = "closed"

_RUN_END = {str(Kind.CONVERGED): "converged", str(Kind.STALLED): "stalled"}
# The lifecycle rules are spine's (`TERMINAL_PHASES`, `REVIVING_PHASES`), shared by every fold.
_LIFECYCLE_END = TERMINAL_PHASES
_NEW_INPUT = frozenset({str(Kind.USER_MESSAGE), str(Kind.SESSION_STARTED)})
_CHILD_SPAWNED = str(Kind.CHILD_SPAWNED)
_LIFECYCLE = str(Kind.LIFECYCLE)
#: Kinds whose rows can change an entry's terminal state, phase or children.
STATE_KINDS = frozenset({*_RUN_END, *_NEW_INPUT, _LIFECYCLE, _CHILD_SPAWNED})


def _freeze_children(value: Iterable[str]) -> frozenset[str]:
    return frozenset(value)


@attrs.frozen(kw_only=True)
class SessionInfo:
    """One session as the index knows it.

    ``first_position`` and ``last_position`` are global log positions. ``terminal`` is why
    the session is not live: ``converged`` or ``stalled`` (the run's outcome; new input
    clears it), ``failed`` or ``closed`` (lifecycle; reopening clears it), or empty while
    live. ``phase`` is the latest lifecycle phase. ``children`` are the
    spawned child goals, so that a child's own terminal event is not taken for the
    session's.
    """

    session: str
    created: datetime | None = None
    first_position: int = 0
    last_seq: int = 0
    last_position: int = 0
    last_activity: datetime | None = None
    events: int = 0
    terminal: str = ""
    phase: str = ""
    children: frozenset[str] = attrs.field(factory=frozenset, converter=_freeze_children)

    @property
    def live(self) -> bool:
        return not self.terminal


def _terminal_after(
    terminal: str, kind: str, goal: str, phase: str, children: frozenset[str] | set[str]
) -> str:
    end = _RUN_END.get(kind)
    if end is not None:
        return terminal if goal and goal in children else end
    if kind in _NEW_INPUT:
        return ""
    if kind == _LIFECYCLE and phase:
        end = _LIFECYCLE_END.get(phase)
        if end is not None:
            return end
        if phase in REVIVING_PHASES and terminal in _LIFECYCLE_END.values():
            return ""
    return terminal


def reduce_info(info: SessionInfo, ev: Event, position: int = 0) -> SessionInfo:
    """Fold one event of ``info.session`` (at global ``position``) into its entry.

    Every stored event counts, whatever its kind: the index tracks the stream, not its
    vocabulary.
    """
    children = info.children
    if ev.kind == _CHILD_SPAWNED and ev.child:
        children = children | {ev.child}
    return attrs.evolve(
        info,
        created=info.created if info.created is not None else ev.time,
        first_position=info.first_position or position,
        last_seq=ev.seq,
        last_position=position or info.last_position,
        last_activity=ev.time if ev.time is not None else info.last_activity,
        events=info.events + 1,
        terminal=_terminal_after(info.terminal, ev.kind, ev.goal, ev.phase, children),
        phase=ev.phase if ev.kind == _LIFECYCLE and ev.phase else info.phase,
        children=children,
    )


def _freeze_sessions(value: Mapping[str, SessionInfo]) -> dict[str, SessionInfo]:
    return dict(value)


@attrs.frozen
class SessionsIndex:
    """Every session seen, in order of first appearance, keyed by session id."""

    sessions: Mapping[str, SessionInfo] = attrs.field(factory=dict, converter=_freeze_sessions)

    def get(self, session: str) -> SessionInfo | None:
        return self.sessions.get(session)

    def __len__(self) -> int:
        return len(self.sessions)

    def __iter__(self) -> Iterator[SessionInfo]:
        return iter(self.sessions.values())

    def __contains__(self, session: object) -> bool:
        return session in self.sessions

    def live(self) -> list[SessionInfo]:
        """Sessions that are not terminal, in order of first appearance."""
        return [s for s in self.sessions.values() if not s.terminal]

    def by_activity(self) -> list[SessionInfo]:
        """Sessions with the most recent activity first (undated ones last)."""
        dated = [s for s in self.sessions.values() if s.last_activity is not None]
        undated = [s for s in self.sessions.values() if s.last_activity is None]
        dated.sort(key=lambda s: s.last_activity, reverse=True)  # type: ignore[arg-type,return-value]
        return dated + undated


def reduce_index(index: SessionsIndex, stream: str, ev: Event, position: int = 0) -> SessionsIndex:
    """Fold one event of ``stream`` into the index (copies the mapping: for live use)."""
    info = index.sessions.get(stream) or SessionInfo(session=stream)
    sessions = dict(index.sessions)
    sessions[stream] = reduce_info(info, ev, position)
    return SessionsIndex(sessions)


def index_from(records: Iterable[Record], start: SessionsIndex | None = None) -> SessionsIndex:
    """Fold records of the all-streams log (in position order) into an index."""
    sessions = dict(start.sessions) if start is not None else {}
    for r in records:
        info = sessions.get(r.stream) or SessionInfo(session=r.stream)
        sessions[r.stream] = reduce_info(info, r.event(), r.position)
    return SessionsIndex(sessions)


class InfoFolder:
    """The index rule on decoded stored rows (the rebuild path), mutable like `StatusFolder`.

    Times stay RFC 3339 text until `freeze`, which parses them once.
    """

    __slots__ = (
        "children",
        "created",
        "events",
        "first_position",
        "last_activity",
        "last_position",
        "last_seq",
        "phase",
        "session",
        "terminal",
    )

    def __init__(self, session: str) -> None:
        self.session = session
        self.created: str | None = None
        self.first_position = 0
        self.last_seq = 0
        self.last_position = 0
        self.last_activity: str | None = None
        self.events = 0
        self.terminal = ""
        self.phase = ""
        self.children: set[str] = set()

    def feed(self, d: Mapping[str, Any], position: int) -> None:
        """Fold one decoded stored row at global ``position``."""
        t = d.get("time")
        if t is not None:
            if self.created is None:
                self.created = t
            self.last_activity = t
        self.last_seq = d.get("seq", 0)
        if position:
            self.last_position = position
            if not self.first_position:
                self.first_position = position
        self.events += 1
        if d["kind"] in STATE_KINDS:
            self.feed_state(d)

    def feed_state(self, d: Mapping[str, Any]) -> None:
        """The part of `feed` that only rows of `STATE_KINDS` need."""
        h = INFO_STATE_HANDLERS.get(d["kind"])
        if h is not None:
            h(self, d)

    def feed_tail(
        self, first: Mapping[str, Any], last: Mapping[str, Any], position: int, n: int
    ) -> None:
        """The rest of `feed` for ``n`` rows at once, from the first and last of them.

        Equal to feeding each row when every row carries its time, as stored rows do
        (the log stamps a time on every append).
        """
        if self.created is None:
            self.created = first.get("time")
        t = last.get("time")
        if t is not None:
            self.last_activity = t
        self.last_seq = last.get("seq", 0)
        if position:
            self.last_position = position
        self.events += n

    def freeze(self) -> SessionInfo:
        return SessionInfo(
            session=self.session,
            created=None if self.created is None else datetime.fromisoformat(self.created),
            first_position=self.first_position,
            last_seq=self.last_seq,
            last_position=self.last_position,
            last_activity=(
                None if self.last_activity is None else datetime.fromisoformat(self.last_activity)
            ),
            events=self.events,
            terminal=self.terminal,
            phase=self.phase,
            children=self.children,
        )

    def dump(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "created": self.created,
            "firstPosition": self.first_position,
            "lastSeq": self.last_seq,
            "lastPosition": self.last_position,
            "lastActivity": self.last_activity,
            "events": self.events,
            "terminal": self.terminal,
            "phase": self.phase,
            "children": sorted(self.children),
        }

    @classmethod
    def load(cls, d: Mapping[str, Any]) -> InfoFolder:
        f = cls(d["session"])
        f.created = d["created"]
        f.first_position = d["firstPosition"]
        f.last_seq = d["lastSeq"]
        f.last_position = d["lastPosition"]
        f.last_activity = d["lastActivity"]
        f.events = d["events"]
        f.terminal = d["terminal"]
        f.phase = d["phase"]
        f.children = set(d["children"])
        return f


# -- the index's state rule per kind, on dicts (the row path) -----------------------------


def _new_input(f: InfoFolder, d: Mapping[str, Any]) -> None:
    f.terminal = ""


def _run_end(end: str) -> Callable[[InfoFolder, Mapping[str, Any]], None]:
    def h(f: InfoFolder, d: Mapping[str, Any]) -> None:
        goal = d.get("goal")
        if not goal or goal not in f.children:
            f.terminal = end

    return h


def _lifecycle(f: InfoFolder, d: Mapping[str, Any]) -> None:
    phase = d.get("phase", "")
    f.terminal = _terminal_after(f.terminal, _LIFECYCLE, "", phase, f.children)
    if phase:
        f.phase = phase


def _child_spawned(f: InfoFolder, d: Mapping[str, Any]) -> None:
    c = d.get("child")
    if c:
        f.children.add(c)


#: For each of `STATE_KINDS`, what a row of that kind changes in an `InfoFolder`.
INFO_STATE_HANDLERS: dict[str, Callable[[InfoFolder, Mapping[str, Any]], None]] = {
    **{k: _new_input for k in _NEW_INPUT},
    **{k: _run_end(end) for k, end in _RUN_END.items()},
    _LIFECYCLE: _lifecycle,
    _CHILD_SPAWNED: _child_spawned,
}
