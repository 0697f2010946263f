"""`Spare`: a session process started ahead of need, standing by until it is configured.

It watches the Runner (it must not outlive one that dies first), opens the log and the
snapshot store every session opens first and reads through them once, and starts its threads
and runs a chat turn in memory (`warmup.warm_spare`), all while nothing waits for it; the
incarnation it becomes takes what it opened.
"""

from __future__ import annotations

import os
from typing import Any

from spine import Log, open_log

from ..._runtime.system import configure_actor_logging
from ..protocol import SessionConfig, Standby
from .execution import session_log
from .parent import Parent
from .snapshots import SnapshotStore
from .warmup import WARM_UP, warm_spare

#: What a session opens first: its log and its snapshot store.
Stores = tuple[Log, SnapshotStore]


def open_stores(db_path: str, spine: str) -> Stores:
    """The session's log (one connection: the session is its only user in this process)
    and its snapshot store."""
    log = open_log(spine or db_path, single_connection=True, deferred_checkpoints=True)
    try:
        return log, SnapshotStore(os.path.dirname(db_path), spine or db_path)
    except Exception:
        log.close()
        raise


class Spare:
    """A standing-by session process: its parent watch and the stores it opened ahead."""

    def __init__(self, actor: Any, msg: Standby) -> None:
        self.parent = Parent(actor)
        #: Stores opened ahead, by the (db_path, spine) they were opened for.
        self.opened: dict[tuple[str, str], Stores] = {}
        if msg.db_path:
            self._open_ahead(msg)
        if not msg.warm:
            return
        try:
            # The first run of a session's paths, in memory: see `warmup`.
            warm_spare()
        except Exception:
            session_log().warning("spare session process: warm-up failed", exc_info=True)

    def _open_ahead(self, msg: Standby) -> None:
        """Open what every session opens first, and read through it once. On failure the
        session opens them itself once configured, and reports what fails."""
        try:
            configure_actor_logging(os.path.dirname(msg.db_path))
            log, snapshots = open_stores(msg.db_path, msg.spine)
        except Exception:
            return
        self.opened[(msg.db_path, msg.spine)] = (log, snapshots)
        try:
            # A session's first reads (its stream, a snapshot, an idempotency key).
            log.last_seq(WARM_UP)
            log.find_key(WARM_UP, WARM_UP)
            list(log.read_events(WARM_UP, 0))
            snapshots.load(WARM_UP)
        except Exception:
            pass  # the session reads them again, and reports what fails

    def stores(self, cfg: SessionConfig) -> Stores:
        """The stores for ``cfg``: those opened ahead if they match, else new ones."""
        warm = self.opened.pop((cfg.db_path, cfg.spine), None)
        self.close()
        return warm if warm is not None else open_stores(cfg.db_path, cfg.spine)

    def close(self) -> None:
        """Close what was opened ahead and not taken."""
        for log, snapshots in self.opened.values():
            log.close()
            snapshots.close()
        self.opened.clear()
