"""Session snapshots: a session's folded state at a seq, so a long stream restarts fast.

Snapshots are a cache, never the truth: the spine stores them (`spine.open_snapshots`, at
`spine.snapshots_at`), as the pickled state with the version of the fold that wrote it,
and a missing, stale or unreadable snapshot only means folding from the start.
"""

from __future__ import annotations

import logging
import os
import pickle

from spine import LogSpec, Snapshot, StorageError, open_snapshots, snapshots_at

from ...policy import SnapshotPolicy
from ..rules.state import SNAPSHOT_VERSION, SessionState

#: A snapshot is due once a session has this many events past its last one, by default
#: (`actors.policy.SnapshotPolicy`, which also bounds the bytes).
SNAPSHOT_EVERY = SnapshotPolicy().events


class SnapshotStore:
    """The snapshots of the sessions of a runtime whose log is ``spine`` (a spec, URL or
    SQLite path) and whose data directory is ``data_dir``."""

    def __init__(self, data_dir: str, spine: LogSpec | str | os.PathLike[str]) -> None:
        self._store = open_snapshots(snapshots_at(spine, data_dir))
        self.path = self._store.path

    def load(self, session_id: str) -> SessionState | None:
        snap = self._store.load(session_id)
        if snap is None or snap.version != SNAPSHOT_VERSION:
            return None
        try:
            state = pickle.loads(snap.body)
        except Exception:
            return None
        if not isinstance(state, SessionState) or state.last_seq != snap.seq:
            return None
        return state

    def save(self, state: SessionState) -> bool:
        """Store ``state``; False (and nothing stored) if the store cannot take it: a
        snapshot is a cache, and a failed one only means a longer fold next time."""
        try:
            body = pickle.dumps(state)
            self._store.save(Snapshot(state.session_id, state.last_seq, SNAPSHOT_VERSION, body))
        except (StorageError, pickle.PicklingError, TypeError) as exc:
            logging.getLogger("vertebra.session").warning(
                "snapshot of %s at seq %d not saved: %s", state.session_id, state.last_seq, exc
            )
            return False
        return True

    def close(self) -> None:
        self._store.close()
