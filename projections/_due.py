"""`DueIndex`: when every session's timers are due next, folded from the log and
checkpointed, so the Runner wakes the right sessions at the right time without polling
any of them and without a process per waiting session.

The fold reads only the ``timer.*`` kinds (`read_all` with a kind filter from the
checkpointed position, and a fork's prefix through the fork's first row): a ``timer.set``
puts a timer in, a ``timer.fired`` moves it to its next time (or takes it out), a
``timer.cancelled`` takes it out. Each session is the only writer of its timers, so the
index only ever lags the truth; a session asked to fire decides for itself what is due.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Iterator

from sortedcontainers import SortedList

from spine import Kind, Log, Record

#: The kinds the index folds.
DUE_KINDS = (Kind.TIMER_SET, Kind.TIMER_CANCELLED, Kind.TIMER_FIRED)
#: What catch-up reads: the timers, and the first row of each fork (its prefix's timers).
_READ_KINDS = (*DUE_KINDS, Kind.SESSION_FORKED)
#: Rows read per page while catching up.
PAGE = 1000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS position (id INTEGER PRIMARY KEY CHECK (id = 0), position INTEGER);
CREATE TABLE IF NOT EXISTS due (
    stream TEXT NOT NULL, timer TEXT NOT NULL, due REAL NOT NULL, PRIMARY KEY (stream, timer)
);
"""


class DueIndex:
    """Every set timer's next due time; ``catch_up`` folds what the log added since."""

    def __init__(self, log: Log, path: str | os.PathLike[str]) -> None:
        self._log = log
        self._db = sqlite3.connect(os.fspath(path), isolation_level=None, check_same_thread=False)
        # A checkpoint the log can rebuild: WAL keeps it whole across a crash, and NORMAL
        # spares each catch-up a sync.
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        row = self._db.execute("SELECT position FROM position WHERE id = 0").fetchone()
        self.position = int(row[0]) if row else 0
        #: Each session's timers (id to due time) and the same by due time, and each
        #: session's earliest once: the Runner's questions (who is due, when next) then
        #: cost per session, not per timer, which matters with thousands overdue after
        #: an outage; the session's id is held once, not per timer.
        self._due: dict[str, dict[str, float]] = {}
        self._per: dict[str, SortedList] = {}
        self._heads: SortedList = SortedList()
        self._count = 0
        for stream, timer, due in self._db.execute("SELECT stream, timer, due FROM due"):
            self._put(stream, timer, float(due))

    def _put(self, stream: str, timer: str, due: float | None) -> None:
        mine, ids = self._per.get(stream), self._due.get(stream)
        if mine is None or ids is None:
            if due is None:
                return
            mine, ids = SortedList(), {}
            self._per[stream], self._due[stream] = mine, ids
        head = mine[0][0] if mine else None
        old = ids.pop(timer, None)
        if old is not None:
            mine.discard((old, timer))
            self._count -= 1
        if due is not None:
            ids[timer] = due
            mine.add((due, timer))
            self._count += 1
        new = mine[0][0] if mine else None
        if new != head:
            if head is not None:
                self._heads.discard((head, stream))
            if new is not None:
                self._heads.add((new, stream))
        if not mine:
            del self._per[stream], self._due[stream]

    def fold(self, records: Iterable[Record]) -> dict[tuple[str, str], float | None]:
        """Fold ``records`` (in position order); returns what changed."""
        changed: dict[tuple[str, str], float | None] = {}
        for r in records:
            ev = r.event()
            timer = ev.extra.get("timer")
            if not isinstance(timer, str):
                continue
            due: float | None = None
            if r.kind == Kind.TIMER_SET:
                due = float(ev.extra.get("due", 0.0))
            elif r.kind == Kind.TIMER_FIRED:
                nxt = ev.extra.get("next")
                due = None if nxt is None else float(nxt)
            self._put(r.stream, timer, due)
            changed[(r.stream, timer)] = due
        return changed

    def catch_up(self) -> set[str]:
        """Fold every timer event stored after the checkpoint; returns the sessions whose
        timers changed. The new position and the changed timers are committed together."""
        top = self._log.last_position()
        if top <= self.position:
            return set()
        changed: dict[tuple[str, str], float | None] = {}
        position = self.position
        while True:
            page = self._log.read_all(position, PAGE, kinds=_READ_KINDS)
            changed.update(self.fold(self._with_prefixes(page)))
            if page:
                position = page[-1].position
            if len(page) < PAGE:
                # Every row at or below ``top`` was committed before it was read.
                position = max(position, top)
                break
        self._commit(position, changed)
        return {stream for stream, _ in changed}

    def _with_prefixes(self, page: list[Record]) -> Iterator[Record]:
        """``page`` with the timers a fork's prefix (read by reference, not stored in
        the fork) set, before the fork's first row: a fork keeps its parent's timers."""
        for r in page:
            if r.kind == Kind.SESSION_FORKED:
                prefix = self._log.read(r.stream, 0, None, kinds=DUE_KINDS)
                yield from (p for p in prefix if p.seq < r.seq)
            else:
                yield r

    def _commit(self, position: int, changed: dict[tuple[str, str], float | None]) -> None:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            for (stream, timer), due in changed.items():
                if due is None:
                    db.execute("DELETE FROM due WHERE stream = ? AND timer = ?", (stream, timer))
                else:
                    db.execute(
                        "INSERT OR REPLACE INTO due (stream, timer, due) VALUES (?, ?, ?)",
                        (stream, timer, due),
                    )
            db.execute("INSERT OR REPLACE INTO position (id, position) VALUES (0, ?)", (position,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self.position = position

    def next_due(self) -> float | None:
        """The earliest due time of any timer, None if none is set."""
        return self._heads[0][0] if self._heads else None

    def due(self, now: float) -> list[str]:
        """The sessions with a timer due at ``now``, earliest first, each once."""
        out: list[str] = []
        for due, stream in self._heads:
            if due > now:
                break
            out.append(stream)
        return out

    def entries(self) -> Iterator[tuple[float, str]]:
        """Each session's earliest timer as (due time, session), earliest first."""
        yield from self._heads

    def next_after(self, stream: str, when: float) -> float | None:
        """The earliest due time of ``stream``'s timers later than ``when``, if any."""
        mine = self._per.get(stream)
        if not mine:
            return None
        i = mine.bisect_right((when, "\U0010ffff"))
        return float(mine[i][0]) if i < len(mine) else None

    def timers(self, stream: str) -> dict[str, float]:
        return dict(self._due.get(stream, {}))

    def __len__(self) -> int:
        return self._count

    def close(self) -> None:
        self._db.close()
