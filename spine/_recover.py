"""Recovery of a damaged SQLite spine: every readable event copied into a new file.

Rows are copied as stored (stream, seq, kind, version and the payload bytes), so seals over
intact ranges still verify in the copy, and global positions keep their order (renumbered
without gaps). A row that cannot be read (SQLite refuses it, or its payload does not decode
to an event) is reported by stream and seq and stands in the copy as a ``record.lost``
event at the same seq, so every later seq is kept and the stream still reads whole; the
seal that covered the lost row then fails there, as it should.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator

import attrs

from ._codec import decode_event, encode_events
from ._errors import DecodeError, InvalidArgumentError, StorageError
from ._event import Event, Kind
from ._log import _now
from ._sqlite import SqliteLog

#: The kind of the event that stands in for a row recovery could not read.
LOST_KIND = "record.lost"

_ROWS = (
    "SELECT position, stream, seq, kind, version, CAST(payload AS BLOB) FROM events "
    "WHERE position > ? ORDER BY position LIMIT ?"
)
_PAGE = 2000


@attrs.frozen(kw_only=True)
class LostRow:
    """A row recovery could not read: where it was and why."""

    stream: str
    seq: int
    problem: str

    def __str__(self) -> str:
        return f"{self.stream} seq {self.seq}: {self.problem}"


@attrs.frozen(kw_only=True)
class RecoveryReport:
    """What `recover_sqlite` copied: events per stream, the rows it could not read, and
    damage it could not place in a stream (pages SQLite refused, with the positions)."""

    copied: int
    streams: int
    lost: tuple[LostRow, ...]
    unplaced: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.lost and not self.unplaced


def _read_source(src: str, unplaced: list[str]) -> Iterator[tuple[int, str, int, str, int, bytes]]:
    """Every row SQLite still gives, in position order; pages it refuses are read row by
    row, and rows it refuses are skipped and noted."""
    uri = "file:" + os.path.abspath(src) + "?mode=ro"
    c = sqlite3.connect(uri, uri=True)
    try:
        try:
            top = int(c.execute("SELECT COALESCE(MAX(position), 0) FROM events").fetchone()[0])
        except sqlite3.DatabaseError as exc:
            raise StorageError(f"cannot read the events of {src!r}: {exc}") from None
        after = 0
        while after < top:
            try:
                page = c.execute(_ROWS, (after, _PAGE)).fetchall()
            except sqlite3.DatabaseError:
                page = None
            if page is not None:
                if not page:
                    return
                yield from page
                after = page[-1][0]
                continue
            # A damaged page: one row at a time up to the end of what this page would be.
            end = min(after + _PAGE, top)
            for pos in range(after + 1, end + 1):
                try:
                    row = c.execute(_ROWS, (pos - 1, 1)).fetchone()
                except sqlite3.DatabaseError as exc:
                    unplaced.append(f"position {pos}: {exc}")
                    continue
                if row is not None and row[0] == pos:
                    yield row
            after = end
    finally:
        c.close()


def recover_sqlite(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> RecoveryReport:
    """Copy every readable event of the SQLite spine ``src`` into a new spine ``dst``.

    ``dst`` must not exist. Streams and seqs are preserved; an unreadable row, or a seq
    missing from a stream, is reported (`RecoveryReport.lost`) and stored in the copy as
    a ``record.lost`` event at its seq. ``src`` is only read.
    """
    src, dst = os.fspath(src), os.fspath(dst)
    if not os.path.exists(src):
        raise InvalidArgumentError(f"no spine database at {src!r}")
    if os.path.exists(dst):
        raise InvalidArgumentError(f"{dst!r} exists; recovery writes a new database only")
    unplaced: list[str] = []
    SqliteLog(dst).close()  # the schema, file modes and format mark of a real spine
    out = sqlite3.connect(dst, isolation_level=None)
    copy = _Copy(out)
    try:
        out.execute("BEGIN IMMEDIATE")
        for _pos, stream, seq, kind, version, payload in _read_source(src, unplaced):
            copy.take(stream, seq, kind, version, payload, unplaced)
        _copy_keys(src, out)
        out.execute("COMMIT")
    except BaseException:
        if out.in_transaction:
            out.execute("ROLLBACK")
        raise
    finally:
        out.close()
    return RecoveryReport(
        copied=copy.copied, streams=len(copy.due), lost=tuple(copy.lost), unplaced=tuple(unplaced)
    )


class _Copy:
    """The copy being written: rows in position order, and the seq due next per stream."""

    def __init__(self, out: sqlite3.Connection) -> None:
        self.out = out
        self.position = 0
        # stream -> the next seq due in the copy
        self.due: dict[str, int] = {}
        self.lost: list[LostRow] = []
        self.copied = 0

    def take(
        self, stream: str, seq: int, kind: str, version: int, payload: bytes, unplaced: list[str]
    ) -> None:
        """Copy one source row, standing in for the seqs missing before it and for itself
        when it does not read back; a row that has no place in a stream goes to
        ``unplaced``."""
        if not isinstance(stream, str) or not isinstance(seq, int) or seq < 1:
            unplaced.append(f"a row with stream {stream!r} and seq {seq!r}")
            return
        nxt = self.due.get(stream, 1)
        if stream not in self.due and kind == Kind.SESSION_FORKED:
            # A fork by reference starts at its fork seq: its prefix is the parent's rows.
            nxt = seq
        if seq < nxt:
            self.lost.append(LostRow(stream=stream, seq=seq, problem="a second row at this seq"))
            return
        for gap in range(nxt, seq):
            self.stand_in(stream, gap, "the row is missing or unreadable")
        self.due[stream] = seq + 1
        problem = _unreadable(stream, seq, kind, version, payload)
        if problem is not None:
            self.stand_in(stream, seq, problem)
            return
        self.put(stream, seq, kind, version, bytes(payload))
        self.copied += 1

    def put(self, stream: str, seq: int, kind: str, version: int, payload: bytes) -> None:
        self.position += 1
        self.out.execute(
            "INSERT INTO events (position, stream, seq, kind, version, payload) "
            "VALUES (?,?,?,?,?,?)",
            (self.position, stream, seq, kind, version, payload),
        )
        self.out.execute(
            "INSERT INTO streams (stream, last_seq, last_position, first_position) "
            "VALUES (?,?,?,?) ON CONFLICT (stream) DO UPDATE SET "
            "last_seq = excluded.last_seq, last_position = excluded.last_position",
            (stream, seq, self.position, self.position),
        )

    def stand_in(self, stream: str, seq: int, problem: str) -> None:
        self.lost.append(LostRow(stream=stream, seq=seq, problem=problem))
        ev = Event(kind=LOST_KIND, error=f"lost in recovery: {problem}")
        [(_, kind, payload)] = encode_events([ev], seq, _now)
        self.put(stream, seq, kind, 1, payload)


def _copy_keys(src: str, out: sqlite3.Connection) -> None:
    """Carry the idempotency keys over, so a redelivery after recovery is still recognised;
    positions are the copy's own. A key table SQLite refuses is skipped (keys only save
    duplicates, they hold no events)."""
    uri = "file:" + os.path.abspath(src) + "?mode=ro"
    c = sqlite3.connect(uri, uri=True)
    try:
        rows = c.execute("SELECT stream, key, first_seq, last_seq FROM idempotency").fetchall()
    except sqlite3.DatabaseError:
        return
    finally:
        c.close()
    where = "SELECT position FROM events WHERE stream = ? AND seq = ?"
    for stream, key, first, last in rows:
        a = out.execute(where, (stream, first)).fetchone()
        b = out.execute(where, (stream, last)).fetchone()
        if a is None or b is None:
            continue
        out.execute(
            "INSERT OR IGNORE INTO idempotency VALUES (?,?,?,?,?,?)",
            (stream, key, first, last, a[0], b[0]),
        )


def _unreadable(
    stream: str, seq: int, kind: object, version: object, payload: object
) -> str | None:
    """Why a stored row cannot be read back as its event, or None when it can."""
    if not isinstance(payload, bytes | bytearray) or not isinstance(kind, str):
        return "the row's columns have the wrong types"
    if not isinstance(version, int):
        return f"the row's version is {version!r}"
    try:
        ev = decode_event(bytes(payload), stream=stream, seq=seq, version=version)
    except DecodeError as exc:
        return exc.problem
    if ev.seq != seq:
        return f"the payload says seq {ev.seq}"
    if ev.kind != kind:
        return f"the kind column says {kind!r}, the payload {ev.kind!r}"
    return None


__all__ = ["LOST_KIND", "LostRow", "RecoveryReport", "recover_sqlite"]
