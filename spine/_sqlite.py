"""`SqliteLog`: the durable log in one SQLite file (WAL), safe for several processes.

The schema and statements are in `spine._sqlite_schema`, the cross-process wakes and the
background checkpointer in `spine._sqlite_watch`.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from ._codec import decode_stored
from ._errors import ConflictError, InvalidArgumentError, StorageError
from ._event import Event
from ._filewatch import FileWrites
from ._forks import ForkReads, Links, check_fork, fork_link
from ._log import (
    DEFAULT_PAGE,
    AppendResult,
    Record,
    Row,
    StreamInfo,
    Wakeup,
    appended,
    check_append,
    check_kinds,
    check_page,
    encode_batch,
    gc_paused,
    make_record,
    wake_marks,
)
from ._private import private_sqlite
from ._sqlite_schema import (
    _COLUMNS,
    _INSERT,
    _MOVED,
    _PRIOR_KEY,
    _READ_ROWS,
    _SCHEMA,
    _SYNC_MODES,
    _UPSERT_STREAM,
    connect,
    init_schema,
    insert_batch,
)
from ._sqlite_watch import SqliteWatch

# The statements stay importable from here: the benchmark and the tests use them.
__all__ = ["_INSERT", "_MOVED", "_SCHEMA", "_UPSERT_STREAM", "SqliteLog"]

_REPLAY_PAGE = 2000
#: Above every seq (SQLite integers are 64-bit).
_NO_END = 2**63 - 1


class SqliteLog(ForkReads, SqliteWatch):
    """A `Log` in one SQLite file.

    Appends take ``BEGIN IMMEDIATE``, so writers in several processes serialize on the file
    and global positions follow commit order without gaps. ``synchronous`` is SQLite's
    setting: ``NORMAL`` (default) survives a process crash, ``FULL`` also a power loss.
    Appends by other processes wake local subscribers through a watcher that asks
    ``PRAGMA data_version`` while anyone subscribes: after the kernel reports a write to
    the log's files (Linux), polling every ``watch_interval`` seconds for a few ms after
    each; where it cannot report writes, every ``watch_interval`` seconds.
    ``single_connection`` makes reads share the writer's connection (serialized with
    appends) instead of one connection per reading thread: for a process with one user of
    the log, such as a session actor, it saves a connection's memory (about 0.3 MB).
    ``read_only`` opens an existing file read-only (a projection's reader): it never
    creates the schema, never takes the write lock, and refuses appends.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "NORMAL",
        busy_timeout: float = 30.0,
        watch_interval: float = 0.001,
        single_connection: bool = False,
        read_only: bool = False,
        autocheckpoint: bool = True,
    ) -> None:
        if synchronous.upper() not in _SYNC_MODES:
            raise InvalidArgumentError(f"synchronous must be one of {_SYNC_MODES}")
        self.path = os.fspath(path)
        self._sync = synchronous.upper()
        self._busy = busy_timeout
        self._watch_interval = watch_interval
        self._single = single_connection
        self._read_only = read_only
        self._autocheckpoint = autocheckpoint
        self._checkpoint_stop = threading.Event()
        self._checkpoint_thread: threading.Thread | None = None
        #: Checkpoints the background checkpointer has run (`start_checkpoints`).
        self.checkpoints = 0
        #: Of those, the ones that made the WAL start over (`_WAL_RESTART_PAGES`).
        self.wal_restarts = 0
        self._wlock = threading.Lock()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._closed = False
        self.wakeup = Wakeup()
        self._watchers = 0
        self._watch_lock = threading.Lock()
        self._changes: FileWrites | None = None
        #: Passes of the watcher's loop (each one asks SQLite whether anything changed).
        self.watch_checks = 0
        self._watch_thread: threading.Thread | None = None
        if read_only and not os.path.exists(self.path):
            raise StorageError(f"spine database {self.path!r} does not exist")
        if not read_only and self.path != ":memory:" and not self.path.startswith("file:"):
            private_sqlite(self.path)
        self._links = Links(self._first_row)
        self._w = self._connect()
        if not read_only:
            init_schema(self._w, self.path)

    # -- connections -------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        return connect(
            self.path,
            read_only=self._read_only,
            busy=self._busy,
            sync=self._sync,
            autocheckpoint=self._autocheckpoint,
        )

    def _reader(self) -> sqlite3.Connection:
        if self._single:
            if self._closed:
                raise StorageError(f"spine log {self.path!r} is closed")
            return self._w
        c: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if c is None:
            if self._closed:
                raise StorageError(f"spine log {self.path!r} is closed")
            c = self._connect()
            self._local.conn = c
            with self._readers_lock:
                self._readers.append(c)
        return c

    # -- writes ------------------------------------------------------------------------

    def append(
        self,
        stream: str,
        events: Sequence[Event],
        *,
        expected_seq: int | None = None,
        idempotency_key: str | None = None,
    ) -> AppendResult:
        check_append(stream, events, expected_seq, idempotency_key)
        # Encode outside the write lock when the seqs are known in advance.
        pre = encode_batch(events, expected_seq + 1, stream) if expected_seq is not None else None
        with self._wlock:
            if self._closed:
                raise StorageError(f"spine log {self.path!r} is closed")
            if self._read_only:
                raise StorageError(f"spine log {self.path!r} is open read-only")
            c = self._w
            try:
                c.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StorageError(f"cannot begin an append on {self.path!r}: {exc}") from exc
            try:
                if idempotency_key is not None:
                    prior = c.execute(_PRIOR_KEY, (stream, idempotency_key)).fetchone()
                    if prior is not None:
                        c.execute("COMMIT")
                        return self._duplicate(stream, *prior)
                last, pos0, encoded, rows = insert_batch(
                    c, stream, events, expected_seq, idempotency_key, pre
                )
                c.execute("COMMIT")
            except BaseException as exc:
                with contextlib.suppress(sqlite3.Error):
                    c.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise StorageError(f"append to {stream!r} failed: {exc}") from exc
                raise
        self.wakeup.bump(wake_marks(stream, encoded))
        return appended(stream, last + 1, encoded, pos0 + 1, rows)

    def fork(
        self, stream: str, parent: str, at: int, events: Sequence[Event] = (), *, root: bool = True
    ) -> AppendResult:
        """Make ``stream`` a fork of ``parent`` at ``at`` by reference (`spine._forks`):
        a ``session.forked`` event at seq ``at + 1``, then ``events``, and no copy.
        `ConflictError` if ``stream`` exists; `InvalidArgumentError` if ``parent`` has
        fewer than ``at`` events."""
        check_fork(stream, parent, at, events)
        pre = encode_batch([fork_link(self, parent, at, root), *events], at + 1, stream)
        with self._wlock:
            if self._closed:
                raise StorageError(f"spine log {self.path!r} is closed")
            if self._read_only:
                raise StorageError(f"spine log {self.path!r} is open read-only")
            c = self._w
            try:
                c.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StorageError(f"cannot begin a fork on {self.path!r}: {exc}") from exc
            try:
                _, pos0, encoded, rows = self._insert_fork(c, stream, parent, at, pre)
                c.execute("COMMIT")
            except BaseException as exc:
                with contextlib.suppress(sqlite3.Error):
                    c.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise StorageError(f"fork into {stream!r} failed: {exc}") from exc
                raise
        self.wakeup.bump(wake_marks(stream, encoded))
        return appended(stream, at + 1, encoded, pos0 + 1, rows)

    @staticmethod
    def _insert_fork(
        c: sqlite3.Connection, stream: str, parent: str, at: int, pre: list[tuple[int, str, bytes]]
    ) -> tuple[int, int, list[tuple[int, str, bytes]], list[tuple[str, int, int, str, bytes, int]]]:
        have = c.execute("SELECT last_seq FROM streams WHERE stream=?", (stream,)).fetchone()
        if have is not None:
            raise ConflictError(stream, 0, have[0])
        top = c.execute("SELECT last_seq FROM streams WHERE stream=?", (parent,)).fetchone()
        if top is None or top[0] < at:
            has = 0 if top is None else top[0]
            raise InvalidArgumentError(
                f"cannot fork {parent!r} at seq {at}: it has {has} events; nothing was written"
            )
        pos0 = c.execute("SELECT COALESCE(MAX(position), 0) FROM events").fetchone()[0]
        # The stream starts at the fork's seq: its first own row is at + 1.
        c.execute(_UPSERT_STREAM, (stream, at, pos0, pos0 + 1))
        return insert_batch(c, stream, (), at, None, pre)

    def find_key(self, stream: str, idempotency_key: str) -> AppendResult | None:
        try:
            with self._wlock:
                prior = self._w.execute(_PRIOR_KEY, (stream, idempotency_key)).fetchone()
                return None if prior is None else self._duplicate(stream, *prior)
        except sqlite3.Error as exc:
            raise StorageError(f"read from {self.path!r} failed: {exc}") from exc

    def _duplicate(
        self, stream: str, first_seq: int, last_seq: int, first_pos: int, last_pos: int
    ) -> AppendResult:
        rows = self._w.execute(
            f"SELECT {_COLUMNS} FROM events WHERE stream=? AND seq BETWEEN ? AND ? ORDER BY seq",
            (stream, first_seq, last_seq),
        ).fetchall()
        return AppendResult(
            stream=stream,
            first_seq=first_seq,
            last_seq=last_seq,
            first_position=first_pos,
            last_position=last_pos,
            records=tuple(map(make_record, rows)),
            duplicate=True,
        )

    # -- reads -------------------------------------------------------------------------

    def _own_read(
        self,
        stream: str,
        after: int,
        upto: int | None,
        limit: int | None,
        kinds: tuple[str, ...] | None,
    ) -> list[Record]:
        sql = f"SELECT {_COLUMNS} FROM events WHERE stream=? AND seq>?"
        args: list[object] = [stream, after]
        if upto is not None:
            sql += " AND seq<=?"
            args.append(upto)
        if kinds is not None:
            sql += f" AND kind IN ({','.join('?' * len(kinds))})"
            args.extend(kinds)
        sql += " ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        rows = self._query(sql, args)
        return list(map(make_record, rows))

    def _first_row(self, stream: str) -> Record | None:
        rows = self._query(
            f"SELECT {_COLUMNS} FROM events WHERE stream=? ORDER BY seq LIMIT 1", (stream,)
        )
        return make_record(rows[0]) if rows else None

    def _own_events(self, stream: str, after: int, upto: int | None) -> list[Event]:
        # One statement, so the events come from one consistent snapshot of the stream.
        out: list[Event] = []
        try:
            # A shared connection is serialized with appends for the whole read.
            shared = self._wlock if self._single else contextlib.nullcontext()
            with shared:
                cur = self._reader().execute(
                    "SELECT seq, version, CAST(payload AS BLOB) FROM events "
                    "WHERE stream=? AND seq>? AND seq<=? ORDER BY seq",
                    (stream, after, _NO_END if upto is None else upto),
                )
                # Decode page by page so rows do not pile up next to the events made from
                # them. Close the cursor even if a row fails to decode: an open statement
                # holds a read snapshot, which would keep the WAL from being checkpointed.
                with contextlib.closing(cur), gc_paused():
                    while rows := cur.fetchmany(_REPLAY_PAGE):
                        out.extend(decode_stored(rows, stream))
        except sqlite3.Error as exc:
            raise StorageError(f"read from {self.path!r} failed: {exc}") from exc
        return out

    def read_all(
        self,
        after_position: int = 0,
        limit: int | None = DEFAULT_PAGE,
        kinds: Iterable[str] | None = None,
    ) -> list[Record]:
        check_page(after_position, limit, "after_position")
        ks = check_kinds(kinds)
        sql = f"SELECT {_COLUMNS} FROM events WHERE position>?"
        args: list[object] = [after_position]
        if ks is not None:
            sql += f" AND kind IN ({','.join('?' * len(ks))})"
            args.extend(ks)
        sql += " ORDER BY position"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        rows = self._query(sql, args)
        return list(map(make_record, rows))

    def read_rows(self, after_position: int = 0, limit: int | None = DEFAULT_PAGE) -> list[Row]:
        check_page(after_position, limit, "after_position")
        return self._query(_READ_ROWS, (after_position, -1 if limit is None else limit))

    def streams(self) -> list[StreamInfo]:
        rows = self._query(
            "SELECT stream, last_seq, last_position FROM streams ORDER BY first_position", ()
        )
        return [StreamInfo(stream=s, last_seq=q, last_position=p) for s, q, p in rows]

    def last_seq(self, stream: str) -> int:
        rows = self._query("SELECT last_seq FROM streams WHERE stream=?", (stream,))
        return int(rows[0][0]) if rows else 0

    def last_position(self) -> int:
        rows = self._query("SELECT COALESCE(MAX(position), 0) FROM events", ())
        return int(rows[0][0])

    def _query(self, sql: str, args: Sequence[object]) -> list[Any]:
        # A read outside a transaction sees one consistent snapshot per statement.
        try:
            if self._single:
                with self._wlock:
                    return self._reader().execute(sql, args).fetchall()
            return self._reader().execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise StorageError(f"read from {self.path!r} failed: {exc}") from exc

    def release_memory(self) -> None:
        """Give back the page cache of the writer and of this thread's reader (after bulk
        reads: it refills as needed)."""
        with self._wlock:
            if self._closed:
                return
            conns = {id(c): c for c in (self._w, getattr(self._local, "conn", None)) if c}
            for c in conns.values():
                with contextlib.suppress(sqlite3.Error):
                    c.execute("PRAGMA shrink_memory")

    def close(self) -> None:
        with self._wlock:
            if self._closed:
                return
            self._closed = True
            self._w.close()
        self._checkpoint_stop.set()
        if self._checkpoint_thread is not None:
            self._checkpoint_thread.join(timeout=2.0)
        with self._readers_lock:
            for c in self._readers:
                with contextlib.suppress(sqlite3.Error):
                    c.close()
            self._readers.clear()
        with self._watch_lock:
            if self._changes is not None:
                self._changes.interrupt()
        t = self._watch_thread
        if t is not None:
            t.join(timeout=1.0)
        self.wakeup.bump()

    def __enter__(self) -> SqliteLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
