"""`SqliteWatch`: the mixin of `SqliteLog` that wakes its subscribers on other processes'
commits (a watcher thread) and checkpoints its WAL in the background."""

from __future__ import annotations

import os
import sqlite3
import threading
import time

from ._errors import StorageError
from ._filewatch import FileWrites, file_writes
from ._log import Wakeup
from ._sqlite_schema import _MAX_POSITION, _MOVED

#: Seconds the watcher polls every interval after a write or a change, before it sleeps
#: until the next write again.
_WATCH_HOT = 0.005
#: The first pause of that polling; each pause doubles up to the watch interval.
_WATCH_FIRST_PAUSE = 0.0001
#: The longest an idle watcher sleeps without hearing of a write (a missed one is found then).
_WATCH_IDLE = 0.25
#: Seconds between the background checkpointer's looks at the log (`start_checkpoints`).
_CHECKPOINT_EVERY = 0.25
#: WAL pages (16 MiB at 4 KiB pages) past which the checkpointer makes the WAL start over.
#: Readers that overlap all the time (subscribers, the watcher) keep a passive checkpoint
#: from ever letting it: under a sustained load of 50 sessions it grew by ~12 MB a second.
_WAL_RESTART_PAGES = 4096
#: Milliseconds a restarting checkpoint waits for readers; writers wait for it meanwhile.
_WAL_RESTART_WAIT_MS = 20


class SqliteWatch:
    """Watching a SQLite log for commits by other connections, and checkpointing it."""

    path: str
    wakeup: Wakeup
    watch_checks: int
    checkpoints: int
    wal_restarts: int
    _closed: bool
    _read_only: bool
    _watch_interval: float
    _watchers: int
    _watch_lock: threading.Lock
    _watch_thread: threading.Thread | None
    _changes: FileWrites | None
    _checkpoint_stop: threading.Event
    _checkpoint_thread: threading.Thread | None

    def _connect(self) -> sqlite3.Connection:
        """A new connection to the log's file (`SqliteLog` opens it)."""
        raise NotImplementedError

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
        reader; except that once the WAL is past `_WAL_RESTART_PAGES` a checkpoint waits up
        to `_WAL_RESTART_WAIT_MS` for the readers of older snapshots (new writers wait for
        it) so that the next commit starts the WAL over: readers that always overlap would
        otherwise let it grow as long as commits keep coming. Idempotent; it stops when the
        log is closed. Start it in a process that forks no more children (a thread holding
        SQLite's locks across a fork would leave them held in the child)."""
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
                    _, wal_pages, _ = c.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    last = v
                    self.checkpoints += 1
                    if wal_pages > _WAL_RESTART_PAGES:
                        self._restart_wal(c)
                except sqlite3.Error:
                    continue  # busy or closing: the next round tries again
        finally:
            c.close()

    def _restart_wal(self, c: sqlite3.Connection) -> None:
        """A RESTART checkpoint, waiting at most `_WAL_RESTART_WAIT_MS` for readers (the
        passive one just before has copied nearly everything, so it holds writers briefly)."""
        wait = c.execute("PRAGMA busy_timeout").fetchone()[0]
        c.execute(f"PRAGMA busy_timeout = {_WAL_RESTART_WAIT_MS}")
        try:
            if c.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()[0] == 0:
                self.wal_restarts += 1
        finally:
            c.execute(f"PRAGMA busy_timeout = {wait}")
