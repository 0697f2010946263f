"""Snapshots in a SQLite file of their own (a data directory's ``snapshots.db``).

One row per stream in table ``snapshots`` (``session_id``, ``seq``, ``version``, ``state``:
the names the session's own store gave them, so files written before stay readable).
Synchronous NORMAL: a snapshot lost to a power cut only means a longer fold.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3

from ._errors import StorageError
from ._private import private_sqlite
from ._snapshots import Snapshot, SnapshotStore

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS snapshots (session_id TEXT PRIMARY KEY, "
    "seq INTEGER NOT NULL, version INTEGER NOT NULL, state BLOB NOT NULL)"
)


class SqliteSnapshotStore(SnapshotStore):
    """A snapshot file. Its connection is not bound to a thread: an actor on the
    single-process base runs its handlers on whichever thread drives the system (uses are
    serialised by the caller)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        try:
            private_sqlite(self.path)
            self._c = sqlite3.connect(
                self.path, isolation_level=None, timeout=30, check_same_thread=False
            )
            self._c.execute("PRAGMA journal_mode = WAL")
            self._c.execute("PRAGMA synchronous = NORMAL")
            self._c.execute(_SCHEMA)
        except (sqlite3.Error, StorageError) as exc:
            raise StorageError(f"cannot open snapshot file {self.path!r}: {exc}") from exc

    def load(self, stream: str) -> Snapshot | None:
        try:
            row = self._c.execute(
                "SELECT seq, version, state FROM snapshots WHERE session_id = ?", (stream,)
            ).fetchone()
        except sqlite3.Error as exc:
            raise StorageError(f"cannot read snapshot file {self.path!r}: {exc}") from exc
        if row is None:
            return None
        seq, version, body = row
        if not (isinstance(seq, int) and isinstance(version, int) and isinstance(body, bytes)):
            return None  # not a row this store wrote: as good as none
        return Snapshot(stream, seq, version, body)

    def save(self, snapshot: Snapshot) -> None:
        try:
            self._c.execute(
                "INSERT INTO snapshots VALUES (?, ?, ?, ?) ON CONFLICT (session_id) DO UPDATE "
                "SET seq = excluded.seq, version = excluded.version, state = excluded.state",
                (snapshot.stream, snapshot.seq, snapshot.version, snapshot.body),
            )
        except sqlite3.Error as exc:
            raise StorageError(f"cannot write snapshot file {self.path!r}: {exc}") from exc

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._c.close()
