"""`SqliteLog`: the durable log in one SQLite file (WAL), safe for several processes."""

from __future__ import annotations

import contextlib
import os
import pathlib
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from ._codec import SCHEMA_VERSION, decode_event
from ._errors import ConflictError, InvalidArgumentError, StorageError
from ._event import Event
from ._filewatch import FileWrites, file_writes
from ._log import (
    DEFAULT_PAGE,
    AppendResult,
    Record,
    Row,
    StreamInfo,
    Wakeup,
    check_append,
    check_kinds,
    check_page,
    encode_batch,
    gc_paused,
    make_record,
)
from ._private import private_sqlite

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    position INTEGER PRIMARY KEY,
    stream   TEXT    NOT NULL,
    seq      INTEGER NOT NULL,
    kind     TEXT    NOT NULL,
    version  INTEGER NOT NULL,
    payload  BLOB    NOT NULL,
    UNIQUE (stream, seq)
);
CREATE TABLE IF NOT EXISTS streams (
    stream         TEXT PRIMARY KEY,
    last_seq       INTEGER NOT NULL,
    last_position  INTEGER NOT NULL,
    first_position INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS idempotency (
    stream         TEXT NOT NULL,
    key            TEXT NOT NULL,
    first_seq      INTEGER NOT NULL,
    last_seq       INTEGER NOT NULL,
    first_position INTEGER NOT NULL,
    last_position  INTEGER NOT NULL,
    PRIMARY KEY (stream, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS spine_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
-- Stored bytes are what seals hash: the log itself never rewrites or removes them.
CREATE TRIGGER IF NOT EXISTS events_append_only_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_append_only_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
"""

# Columns in `Record` field order, so the records an append returns are its insert rows.
_INSERT = "INSERT INTO events (stream, seq, position, kind, payload, version) VALUES (?,?,?,?,?,?)"
# The CAST keeps `Record.payload` bytes even for a row someone rewrote as TEXT (SQLite's
# string functions return TEXT): a tampered row must reach the verifier, not crash it.
_COLUMNS = "stream, seq, position, kind, CAST(payload AS BLOB), version"
# What an idempotency key appended before: the append checks it, `find_key` reports it.
_PRIOR_KEY = (
    "SELECT first_seq, last_seq, first_position, last_position "
    "FROM idempotency WHERE stream=? AND key=?"
)
_MAX_POSITION = "SELECT COALESCE(MAX(position), 0) FROM events"
#: Seconds the watcher polls every interval after a write or a change, before it sleeps
#: until the next write again.
_WATCH_HOT = 0.005
#: The first pause of that polling; each pause doubles up to the watch interval.
_WATCH_FIRST_PAUSE = 0.0001
#: The longest an idle watcher sleeps without hearing of a write (a missed one is found then).
_WATCH_IDLE = 0.25
#: Seconds between the background checkpointer's looks at the log (`start_checkpoints`).
_CHECKPOINT_EVERY = 0.25

#: Which streams moved since a position. NOT INDEXED: for the GROUP BY, SQLite's planner
#: otherwise walks the whole (stream, seq) index instead of the few new rows by position,
#: so every change cost the watcher time in proportion to the log's size (1.2 ms at 20,000
#: events, 8 us with the rowid range).
_MOVED = (
    "SELECT stream, kind, MAX(seq), MAX(position) FROM events NOT INDEXED "
    "WHERE position > ? GROUP BY stream, kind"
)
_UPSERT_STREAM = (
    "INSERT INTO streams (stream, last_seq, last_position, first_position) VALUES (?,?,?,?) "
    "ON CONFLICT (stream) DO UPDATE SET last_seq = excluded.last_seq, "
    "last_position = excluded.last_position"
)
_READ_ROWS = (
    "SELECT stream, seq, position, kind, version, CAST(payload AS BLOB) FROM events "
    "WHERE position > ? ORDER BY position LIMIT ?"
)
_SYNC_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")
_REPLAY_PAGE = 2000


class SqliteLog:
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
        self._w = self._connect()
        if not read_only:
            self._init_schema()

    # -- connections -------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        try:
            target, uri = self.path, False
            if self._read_only:
                target, uri = pathlib.Path(self.path).resolve().as_uri() + "?mode=ro", True
            c = sqlite3.connect(
                target, isolation_level=None, check_same_thread=False, timeout=self._busy, uri=uri
            )
            c.execute(f"PRAGMA busy_timeout = {int(self._busy * 1000)}")
            c.execute(f"PRAGMA synchronous = {self._sync}")
            if not self._autocheckpoint:
                # Left to a checkpointer elsewhere (`start_checkpoints`): the commit that
                # crosses SQLite's threshold otherwise copies the WAL into the database
                # and syncs it before it returns, a few milliseconds on that commit.
                c.execute("PRAGMA wal_autocheckpoint = 0")
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open spine database {self.path!r}: {exc}") from exc
        return c

    def _init_schema(self) -> None:
        c = self._w
        try:
            mode = c.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StorageError(f"{self.path!r} cannot use WAL (journal mode {mode})")
            c.executescript("BEGIN IMMEDIATE;" + _SCHEMA + "COMMIT;")
            c.execute("BEGIN IMMEDIATE")
            try:
                row = c.execute("SELECT value FROM spine_meta WHERE key='format'").fetchone()
                if row is None:
                    c.execute("INSERT INTO spine_meta VALUES ('format', 'vertebra-spine-1')")
                elif row[0] != "vertebra-spine-1":
                    raise StorageError(f"{self.path!r} holds an unknown spine format {row[0]!r}")
                c.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    c.execute("ROLLBACK")
                raise
        except sqlite3.DatabaseError as exc:
            c.close()
            raise StorageError(f"{self.path!r} is not a usable spine database: {exc}") from exc

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
                row = c.execute("SELECT last_seq FROM streams WHERE stream=?", (stream,)).fetchone()
                last = row[0] if row else 0
                if expected_seq is not None and expected_seq != last:
                    raise ConflictError(stream, expected_seq, last)
                encoded = pre if pre is not None else encode_batch(events, last + 1, stream)
                pos0 = c.execute("SELECT COALESCE(MAX(position), 0) FROM events").fetchone()[0]
                # Positions run on from the newest row in the file, whichever process wrote it.
                shift = pos0 - last
                rows = [
                    (stream, seq, seq + shift, kind, payload, SCHEMA_VERSION)
                    for seq, kind, payload in encoded
                ]
                # Plain tuples bind faster than any tuple subclass; records are made after.
                c.executemany(_INSERT, rows)
                first_pos, last_pos = pos0 + 1, pos0 + len(rows)
                c.execute(_UPSERT_STREAM, (stream, encoded[-1][0], last_pos, first_pos))
                if idempotency_key is not None:
                    c.execute(
                        "INSERT INTO idempotency VALUES (?,?,?,?,?,?)",
                        (stream, idempotency_key, last + 1, encoded[-1][0], first_pos, last_pos),
                    )
                c.execute("COMMIT")
            except BaseException as exc:
                with contextlib.suppress(sqlite3.Error):
                    c.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise StorageError(f"append to {stream!r} failed: {exc}") from exc
                raise
        self.wakeup.bump([(stream, kind, seq) for seq, kind, _ in encoded])
        return AppendResult(
            stream=stream,
            first_seq=last + 1,
            last_seq=encoded[-1][0],
            first_position=first_pos,
            last_position=last_pos,
            records=tuple(map(make_record, rows)),
        )

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

    def read(
        self,
        stream: str,
        after_seq: int = 0,
        limit: int | None = DEFAULT_PAGE,
        kinds: Iterable[str] | None = None,
    ) -> list[Record]:
        check_page(after_seq, limit, "after_seq")
        ks = check_kinds(kinds)
        sql = f"SELECT {_COLUMNS} FROM events WHERE stream=? AND seq>?"
        args: list[object] = [stream, after_seq]
        if ks is not None:
            sql += f" AND kind IN ({','.join('?' * len(ks))})"
            args.extend(ks)
        sql += " ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        rows = self._query(sql, args)
        return list(map(make_record, rows))

    def read_events(self, stream: str, after_seq: int = 0) -> list[Event]:
        """Every event of ``stream`` after ``after_seq``, decoded: the replay fast path.

        One statement, so the events come from one consistent snapshot of the stream.
        """
        check_page(after_seq, None, "after_seq")
        out: list[Event] = []
        try:
            # A shared connection is serialized with appends for the whole read.
            shared = self._wlock if self._single else contextlib.nullcontext()
            with shared:
                cur = self._reader().execute(
                    "SELECT seq, version, CAST(payload AS BLOB) FROM events "
                    "WHERE stream=? AND seq>? ORDER BY seq",
                    (stream, after_seq),
                )
                # Decode page by page so rows do not pile up next to the events made from
                # them. Close the cursor even if a row fails to decode: an open statement
                # holds a read snapshot, which would keep the WAL from being checkpointed.
                with contextlib.closing(cur), gc_paused():
                    while rows := cur.fetchmany(_REPLAY_PAGE):
                        out.extend(
                            [decode_event(b, stream=stream, seq=s, version=v) for s, v, b in rows]
                        )
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

    # -- cross-process wakes -----------------------------------------------------------

    def watch(self) -> None:
        with self._watch_lock:
            self._watchers += 1
            if self._watch_thread is None and not self._closed:
                # Told of writes before the baseline is taken, so none falls between.
                changes = self._file_writes()
                # Take the baseline here, before returning: a subscriber reads the log after
                # watch(), so every commit it has not read is one the watcher will notice.
                # A baseline taken later in the thread could swallow a commit made between.
                c = self._connect()
                try:
                    # The position first: a commit between the two reads is after the
                    # position, so the first change the watcher notices reports it. Until
                    # then it is unmarked; that is safe because the marks are forgotten
                    # below, after this baseline, and every subscriber reads on its first
                    # pass after that.
                    pos = c.execute(_MAX_POSITION).fetchone()[0]
                    last = c.execute("PRAGMA data_version").fetchone()[0]
                except sqlite3.Error as exc:
                    c.close()
                    if changes is not None:
                        changes.close()
                    self._watchers -= 1
                    raise StorageError(f"cannot watch {self.path!r}: {exc}") from exc
                # Marks from before this watcher may have missed commits made while
                # nobody watched: forget them.
                self.wakeup.bump(None)
                self._changes = changes
                t = threading.Thread(
                    target=self._watch_loop,
                    args=(c, last, pos, changes),
                    name="spine-watch",
                    daemon=True,
                )
                self._watch_thread = t
                t.start()

    def _file_writes(self) -> FileWrites | None:
        """Writes to this log's files, told by the kernel; None: poll every interval."""
        if not os.path.isfile(self.path):
            return None
        base = os.path.basename(self.path)
        return file_writes(os.path.dirname(os.path.abspath(self.path)), {base, base + "-wal"})

    def unwatch(self) -> None:
        with self._watch_lock:
            self._watchers = max(0, self._watchers - 1)
            if self._watchers == 0 and self._changes is not None:
                self._changes.interrupt()  # let the watcher see it is no longer wanted

    def _watch_loop(
        self, c: sqlite3.Connection, last: int, pos: int, changes: FileWrites | None
    ) -> None:
        # data_version changes when another connection (another process, or this one's
        # writer) commits; that is the cross-process wake. It is only a hint: subscribers
        # re-read the log and keep their poll floor. Where the kernel tells of writes to
        # the log's files, an idle watcher sleeps until one (or `_WATCH_IDLE`); after a
        # write or a change it polls every interval for `_WATCH_HOT`, because the write
        # can come a moment before the commit is visible, and busy logs write again soon.
        hot_until = time.monotonic() + _WATCH_HOT
        pause = _WATCH_FIRST_PAUSE
        try:
            while True:
                self.watch_checks += 1
                with self._watch_lock:
                    if self._watchers == 0 or self._closed:
                        self._watch_thread = None
                        self._changes = None
                        return
                if changes is None:
                    time.sleep(self._watch_interval)
                elif time.monotonic() < hot_until:
                    # Soon after a write the commit is most likely just being published.
                    time.sleep(min(pause, self._watch_interval))
                    pause *= 2
                elif changes.wait(_WATCH_IDLE):
                    hot_until = time.monotonic() + _WATCH_HOT
                    pause = _WATCH_FIRST_PAUSE
                try:
                    v = c.execute("PRAGMA data_version").fetchone()[0]
                    if v == last:
                        continue
                    # Which streams moved, in one indexed read of the new rows: each
                    # subscriber then reads only when its own stream did.
                    moved = c.execute(_MOVED, (pos,)).fetchall()
                except sqlite3.Error:
                    continue
                last = v
                # A busy log: look again every interval, as long as it keeps changing.
                hot_until = time.monotonic() + _WATCH_HOT
                pause = self._watch_interval
                if moved:
                    pos = max(row[3] for row in moved)
                self.wakeup.bump([(stream, kind, seq) for stream, kind, seq, _ in moved])
        finally:
            c.close()
            if changes is not None:
                changes.close()

    def start_checkpoints(self, every: float = _CHECKPOINT_EVERY) -> None:
        """Checkpoint the WAL from a thread of this process every ``every`` seconds in
        which something was committed, so that writers opened with
        ``autocheckpoint=False`` (sessions, whose acknowledgements wait for their commits)
        never pay for a checkpoint. Passive: it never waits for, nor blocks, a writer or a
        reader. Idempotent; it stops when the log is closed. Start it in a process that
        forks no more children (a thread holding SQLite's locks across a fork would leave
        them held in the child)."""
        with self._watch_lock:
            if self._checkpoint_thread is not None or self._closed or self._read_only:
                return
            c = self._connect()
            t = threading.Thread(
                target=self._checkpoint_loop, args=(c, every), name="spine-checkpoint", daemon=True
            )
            self._checkpoint_thread = t
            t.start()

    def _checkpoint_loop(self, c: sqlite3.Connection, every: float) -> None:
        last = None
        try:
            while not self._checkpoint_stop.wait(every):
                try:
                    v = c.execute("PRAGMA data_version").fetchone()[0]
                    if v == last:
                        continue
                    c.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    last = v
                    self.checkpoints += 1
                except sqlite3.Error:
                    continue  # busy or closing: the next round tries again
        finally:
            c.close()

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
