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
CREATE INDEX IF NOT EXISTS due_by_stream ON due (stream, due);
"""
#: KiB of page cache the index's connection may hold: what it reads is one session's
#: timers at a time, by index, and the file stays in the operating system's cache anyway.
CACHE_KIB = 256


class DueIndex:
    """Every set timer's next due time, in ``timers.db``; in memory only each session's
    earliest (and how many it has), which is all the Runner asks about on its hot path.
    ``catch_up`` folds what the log added since."""

    def __init__(self, log: Log, path: str | os.PathLike[str]) -> None:
        self._log = log
        self._db = sqlite3.connect(os.fspath(path), isolation_level=None, check_same_thread=False)
        # A checkpoint the log can rebuild: WAL keeps it whole across a crash, and NORMAL
        # spares each catch-up a sync.
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
        self._db.executescript(_SCHEMA)
        row = self._db.execute("SELECT position FROM position WHERE id = 0").fetchone()
        self.position = int(row[0]) if row else 0
        #: Each session's earliest due time and timer count, and the same heads by due
        #: time: the Runner's questions (who is due, when next) cost per session, not per
        #: timer (thousands overdue after an outage), and memory is per session too.
        self._head: dict[str, tuple[float, int]] = {}
        self._heads: SortedList = SortedList()
        self._count = 0
        rows = self._db.execute("SELECT stream, MIN(due), COUNT(*) FROM due GROUP BY stream")
        for stream, due, n in rows:
            self._set_head(stream, (float(due), int(n)))

    def _set_head(self, stream: str, head: tuple[float, int] | None) -> None:
        old = self._head.pop(stream, None)
        if old is not None:
            self._heads.discard((old[0], stream))
            self._count -= old[1]
        if head is not None:
            self._head[stream] = head
            self._heads.add((head[0], stream))
            self._count += head[1]

    def _refresh(self, streams: Iterable[str]) -> None:
        """Read the heads of ``streams`` back from the file after a commit."""
        for stream in streams:
            due, n = self._db.execute(
                "SELECT MIN(due), COUNT(*) FROM due WHERE stream = ?", (stream,)
            ).fetchone()
            self._set_head(stream, None if due is None else (float(due), int(n)))

    @staticmethod
    def fold(records: Iterable[Record]) -> dict[tuple[str, str], float | None]:
        """What ``records`` (in position order) change: each (stream, timer) to its due
        time, None for a timer that ended. The last event of a timer says all of it."""
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
        streams = {stream for stream, _ in changed}
        self._refresh(streams)
        return streams

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
        if stream not in self._head:
            return None
        row = self._db.execute(
            "SELECT MIN(due) FROM due WHERE stream = ? AND due > ?", (stream, when)
        ).fetchone()
        return None if row[0] is None else float(row[0])

    def timers(self, stream: str) -> dict[str, float]:
        rows = self._db.execute("SELECT timer, due FROM due WHERE stream = ?", (stream,))
        return {str(t): float(d) for t, d in rows}

    def release_memory(self) -> None:
        """Give back the page caches of the file and of the log's reads (the fold of
        every ``timer.set``; only SQLite's log has one) after bulk work: they refill as
        needed."""
        self._db.execute("PRAGMA shrink_memory")
        release = getattr(self._log, "release_memory", None)
        if release is not None:
            release()

    def __len__(self) -> int:
        return self._count

    def close(self) -> None:
        self._db.close()
