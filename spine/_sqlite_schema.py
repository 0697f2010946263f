"""The SQLite spine's schema and statements, and the steps `SqliteLog` takes on a bare
connection with them: opening it, making the schema, inserting an append's batch."""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import sqlite3
from collections.abc import Sequence

from ._codec import SCHEMA_VERSION
from ._errors import ConflictError, StorageError
from ._event import Event
from ._log import encode_batch

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


def connect(
    path: str, *, read_only: bool, busy: float, sync: str, autocheckpoint: bool
) -> sqlite3.Connection:
    """A connection to the spine file at ``path``, set up as every `SqliteLog` uses it."""
    try:
        if read_only:
            c = connect_read_only(path, busy=busy)
        else:
            c = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=busy)
        c.execute(f"PRAGMA busy_timeout = {int(busy * 1000)}")
        c.execute(f"PRAGMA synchronous = {sync}")
        if not autocheckpoint:
            # Left to a checkpointer elsewhere (`start_checkpoints`): the commit that
            # crosses SQLite's threshold otherwise copies the WAL into the database
            # and syncs it before it returns, a few milliseconds on that commit.
            c.execute("PRAGMA wal_autocheckpoint = 0")
    except sqlite3.Error as exc:
        raise StorageError(f"cannot open spine database {path!r}: {exc}") from exc
    return c


def connect_read_only(path: str, *, busy: float = 30.0) -> sqlite3.Connection:
    """A read-only connection to the SQLite file at ``path``, also where its directory
    cannot be written (a read-only mount, a backup).

    ``mode=ro`` reads through the WAL, but SQLite must be able to open or create the
    ``-shm`` file beside the database for that. Where it cannot, and the directory is not
    writable, the file is opened ``immutable=1`` (no locks, no shared memory, the WAL
    unread); that is only right when the WAL holds nothing, so a non-empty ``-wal``
    without a usable ``-shm`` is refused instead of read without its latest commits.
    """
    uri = pathlib.Path(path).resolve().as_uri()
    c = _probe(uri + "?mode=ro", busy)
    if isinstance(c, sqlite3.Connection):
        return c
    folder = os.path.dirname(os.path.abspath(path))
    if os.access(folder, os.W_OK):
        raise StorageError(f"cannot open spine database {path!r} read-only: {c}")
    try:
        wal = os.path.getsize(path + "-wal")
    except OSError:
        wal = 0
    if wal:
        raise StorageError(
            f"cannot read {path!r}: its directory is read-only and its write-ahead log "
            f"({wal} bytes) cannot be read without a {os.path.basename(path)}-shm file "
            f"there; copy the directory somewhere writable and read the copy"
        )
    c = _probe(uri + "?mode=ro&immutable=1", busy)
    if isinstance(c, sqlite3.Connection):
        return c
    raise StorageError(f"cannot open spine database {path!r} read-only: {c}")


def _probe(uri: str, busy: float) -> sqlite3.Connection | sqlite3.Error:
    """A connection to ``uri`` that has read the schema (a WAL file's ``-shm`` is only
    opened by the first read), or the error that read met."""
    try:
        c = sqlite3.connect(
            uri, isolation_level=None, check_same_thread=False, timeout=busy, uri=True
        )
    except sqlite3.Error as exc:
        return exc
    try:
        c.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as exc:
        c.close()
        return exc
    return c


def init_schema(c: sqlite3.Connection, path: str) -> None:
    """Make the schema in a new file (WAL mode), or check the format mark of an old one;
    the connection is closed when the file is not a usable spine."""
    try:
        mode = c.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StorageError(f"{path!r} cannot use WAL (journal mode {mode})")
        c.executescript("BEGIN IMMEDIATE;" + _SCHEMA + "COMMIT;")
        c.execute("BEGIN IMMEDIATE")
        try:
            row = c.execute("SELECT value FROM spine_meta WHERE key='format'").fetchone()
            if row is None:
                c.execute("INSERT INTO spine_meta VALUES ('format', 'vertebra-spine-1')")
            elif row[0] != "vertebra-spine-1":
                raise StorageError(f"{path!r} holds an unknown spine format {row[0]!r}")
            c.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                c.execute("ROLLBACK")
            raise
    except sqlite3.DatabaseError as exc:
        c.close()
        raise StorageError(f"{path!r} is not a usable spine database: {exc}") from exc


def insert_batch(
    c: sqlite3.Connection,
    stream: str,
    events: Sequence[Event],
    expected_seq: int | None,
    idempotency_key: str | None,
    pre: list[tuple[int, str, bytes]] | None,
) -> tuple[int, int, list[tuple[int, str, bytes]], list[tuple[str, int, int, str, bytes, int]]]:
    """Write an append's batch inside its transaction (``pre``: the events already encoded).

    Returns the stream's last seq and the log's last position before the batch, the encoded
    events and the rows inserted. `ConflictError` when ``expected_seq`` is not the last seq.
    """
    row = c.execute("SELECT last_seq FROM streams WHERE stream=?", (stream,)).fetchone()
    last = row[0] if row else 0
    if expected_seq is not None and expected_seq != last:
        raise ConflictError(stream, expected_seq, last)
    encoded = pre if pre is not None else encode_batch(events, last + 1, stream)
    pos0 = c.execute("SELECT COALESCE(MAX(position), 0) FROM events").fetchone()[0]
    # Positions run on from the newest row in the file, whichever process wrote it.
    shift = pos0 - last
    rows = [
        (stream, seq, seq + shift, kind, payload, SCHEMA_VERSION) for seq, kind, payload in encoded
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
    return last, pos0, encoded, rows


def integrity_check(path: str) -> list[str]:
    """SQLite's ``PRAGMA integrity_check`` on the file, opened read-only (``["ok"]``: sound;
    else the problems, or why it cannot be read). `FileNotFoundError` if there is no file."""
    if not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, "no log file", path)
    try:
        c = connect_read_only(path)
    except StorageError as exc:
        return [str(exc)]
    try:
        return [str(r[0]) for r in c.execute("PRAGMA integrity_check")]
    except sqlite3.DatabaseError as exc:
        return [str(exc)]
    finally:
        c.close()
