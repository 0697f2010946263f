"""Session snapshots: a session's folded state at a seq, so a long stream restarts fast.

Snapshots are a cache, never the truth: they live in their own SQLite file, carry the
version of the fold that wrote them, and a missing, stale or unreadable snapshot only
means folding from the start.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import sqlite3

from spine import private_sqlite

from ..rules.state import SNAPSHOT_VERSION, SessionState

#: Write a snapshot once a session has this many events past its last one.
SNAPSHOT_EVERY = 1000


class SnapshotStore:
    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(data_dir, "snapshots.db")
        # The actor serializes every use, but on the single-process base its handlers run
        # on whichever thread drives the system: the connection must not be thread-bound.
        private_sqlite(self.path)
        self._c = sqlite3.connect(
            self.path, isolation_level=None, timeout=30, check_same_thread=False
        )
        self._c.execute("PRAGMA journal_mode = WAL")
        self._c.execute("PRAGMA synchronous = NORMAL")
        self._c.execute(
            "CREATE TABLE IF NOT EXISTS snapshots (session_id TEXT PRIMARY KEY, "
            "seq INTEGER NOT NULL, version INTEGER NOT NULL, state BLOB NOT NULL)"
        )

    def load(self, session_id: str) -> SessionState | None:
        row = self._c.execute(
            "SELECT seq, version, state FROM snapshots WHERE session_id = ?", (session_id,)
        ).fetchone()
        if row is None or row[1] != SNAPSHOT_VERSION:
            return None
        try:
            state = pickle.loads(row[2])
        except Exception:
            return None
        if not isinstance(state, SessionState) or state.last_seq != row[0]:
            return None
        return state

    def save(self, state: SessionState) -> bool:
        """Store ``state``; False (and nothing stored) if the store cannot take it: a
        snapshot is a cache, and a failed one only means a longer fold next time."""
        try:
            self._save(state)
        except (sqlite3.Error, pickle.PicklingError, TypeError) as exc:
            logging.getLogger("vertebra.session").warning(
                "snapshot of %s at seq %d not saved: %s", state.session_id, state.last_seq, exc
            )
            return False
        return True

    def _save(self, state: SessionState) -> None:
        self._c.execute(
            "INSERT INTO snapshots VALUES (?, ?, ?, ?) ON CONFLICT (session_id) DO UPDATE SET "
            "seq = excluded.seq, version = excluded.version, state = excluded.state",
            (state.session_id, state.last_seq, SNAPSHOT_VERSION, pickle.dumps(state)),
        )

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._c.close()
