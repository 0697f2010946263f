"""`StatusReducer`: the status and index folds over the whole log, with checkpoints.

This is the engine the projection actor wraps; it has no Thespian in it, so the same code
runs under test, in the benchmark and in the actor. It folds the all-streams log page by
page from its checkpoint, commits the changed sessions with the new position per page, and
rebuilds from position 0 into a fresh generation when asked or when the fold's code version
differs from the checkpoint's. Queries read only a complete generation, never a half-built
one (see docs/projections.md).
"""

from __future__ import annotations

import gc
import hashlib
import os
import pathlib
from collections.abc import Mapping

from spine import CheckpointStore, open_checkpoints

from . import (
    _context,
    _index,
    _metadata,
    _status,
    _status_context,
    _status_events,
    _status_row_handlers,
    _status_rows,
)
from ._index import SessionInfo, SessionsIndex
from ._policy import Fail, FailurePolicy
from ._progress import FailureInfo as FailureInfo
from ._progress import Progress as Progress
from ._progress import StepResult as StepResult
from ._reader import LogReader
from ._reducer_folding import PageFolding
from ._row_fold import _Acc, _row_reader, _State
from ._status import Projection

#: Records folded (and, when live, committed) per step unless the caller says otherwise.
DEFAULT_BATCH = 5000
#: A rebuild commits its generation after at least this many records.
DEFAULT_REBUILD_COMMIT = 500_000


def _code_version() -> str:
    # Any change to the fold's source rebuilds the checkpoint: a stale fold is never served
    # as current, and a rebuild costs seconds.
    h = hashlib.sha256()
    for mod in (
        _status,
        _status_events,
        _status_rows,
        _status_row_handlers,
        _status_context,
        _context,
        _index,
        _metadata,
    ):
        f = getattr(mod, "__file__", None)
        if f:
            h.update(pathlib.Path(f).read_bytes())
    return "status-1-" + h.hexdigest()[:12]


#: The status fold's code version, recorded with each checkpoint generation.
STATUS_VERSION = _code_version()


class StatusReducer(PageFolding):
    """Folds a log into per-session `Projection`s and the `SessionsIndex`, checkpointed.

    ``log`` is any `LogReader`: every `Log` (a projection opens it read-only).

    ``checkpoint`` is where it checkpoints (a `spine.open_checkpoints` location: its own
    SQLite file, or the spine's PostgreSQL URL), or an open `CheckpointStore`. ``policy``
    says what to do with an event that cannot be folded. ``version`` defaults to
    `STATUS_VERSION`; a checkpoint of another version is served (marked stale) while a
    rebuild replaces it. One owner only: the reducer is not thread-safe.
    """

    def __init__(
        self,
        log: LogReader,
        checkpoint: str | os.PathLike[str] | CheckpointStore,
        *,
        policy: FailurePolicy | None = None,
        batch: int = DEFAULT_BATCH,
        rebuild_commit_every: int = DEFAULT_REBUILD_COMMIT,
        version: str = STATUS_VERSION,
    ) -> None:
        if batch <= 0 or rebuild_commit_every <= 0:
            raise ValueError("batch and rebuild_commit_every must be positive")
        self._log = log
        self._store = open_checkpoints(checkpoint)
        self.policy: FailurePolicy = policy if policy is not None else Fail()
        self.batch = batch
        self.version = version
        self.rebuild_commit_every = rebuild_commit_every
        self._failure: FailureInfo | None = None
        self._target = 0
        # Sessions changed since the last commit, and how many records that was.
        self._dirty: set[str] = set()
        self._uncommitted = 0
        # Pages up to this position are folded event by event (after a fast-path failure).
        self._careful_until = 0
        self._read = _row_reader(log)
        self._live: _State | None = None
        self._build: _State | None = None
        cur = self._store.current()
        if cur is not None:
            self._live = self._load(cur.gen, cur.version, cur.position, cur.skipped)
        if cur is None or cur.version != version:
            pending = self._store.pending()
            if pending is not None and pending.version == version:
                # Resume the rebuild a crash interrupted, from its own checkpoint.
                self._build = self._load(
                    pending.gen, pending.version, pending.position, pending.skipped
                )
                self._target = self._log.last_position()
            else:
                self._start_build()

    def _load(self, gen: int, version: str, position: int, skipped: int) -> _State:
        st = _State(gen, version, position, skipped)
        for stream, body in self._store.load(gen):
            st.sessions[stream] = _Acc.from_body(body)
        return st

    def _start_build(self) -> None:
        # Whatever a previous build had not committed belongs to a generation that is gone.
        self._dirty.clear()
        self._uncommitted = 0
        self._careful_until = 0
        g = self._store.begin_generation(self.version)
        self._build = _State(g.gen, g.version, 0)
        self._target = self._log.last_position()

    # -- control -------------------------------------------------------------------------

    @property
    def rebuilding(self) -> bool:
        return self._build is not None

    @property
    def failure(self) -> FailureInfo | None:
        return self._failure

    def request_rebuild(self) -> None:
        """Drop any rebuild under way and fold a fresh generation from position 0.

        The current complete state keeps answering queries until the rebuild catches up.
        A stopped reducer (after a failure) starts again.
        """
        self._failure = None
        self._start_build()

    def step(self, limit: int | None = None) -> StepResult:
        """Fold and commit one page of at most ``limit`` (default ``batch``) records."""
        gc_was_enabled = gc.isenabled()
        # A page allocates many small acyclic objects while the state holds many more;
        # the collections they trigger find nothing to free and cost about 15% of a rebuild.
        gc.disable()
        try:
            return self._step(limit)
        finally:
            if gc_was_enabled:
                gc.enable()

    def _step(self, limit: int | None) -> StepResult:
        st = self._build if self._build is not None else self._live
        assert st is not None
        if self._failure is not None:
            return StepResult(folded=0, position=st.position, more=False)
        n = limit or self.batch
        rows, folded, failure = self._fold(st, self._read(st.position, n), n)
        if folded:
            st.position = rows[folded - 1][2]
            self._uncommitted += folded
        caught_up = failure is None and len(rows) < n
        rebuilt = self._build is not None and caught_up
        # A live fold commits every page; a rebuild every `rebuild_commit_every` records,
        # since queries never read it before it completes and a crash only refolds.
        if (
            self._build is None
            or rebuilt
            or failure is not None
            or self._uncommitted >= self.rebuild_commit_every
        ):
            self._commit(st, complete=rebuilt)
        if failure is not None:
            self._failure = failure
        if rebuilt:
            self._live, self._build = self._build, None
        if self._build is not None and (st.position > self._target or not rows):
            self._target = max(self._target, self._log.last_position())
        return StepResult(
            folded=folded,
            position=st.position,
            more=failure is None and len(rows) >= n,
            rebuilt=rebuilt,
        )

    def _commit(self, st: _State, *, complete: bool) -> None:
        dirty = self._dirty
        self._store.commit(
            st.gen,
            st.position,
            [(s, st.sessions[s].body()) for s in dirty if s in st.sessions],
            skipped=st.skipped,
            complete=complete,
        )
        dirty.clear()
        self._uncommitted = 0

    def catch_up(self, max_steps: int | None = None) -> int:
        """Step until the log's end (or ``max_steps``); the number of records folded."""
        total = 0
        steps = 0
        while max_steps is None or steps < max_steps:
            r = self.step()
            total += r.folded
            steps += 1
            if not r.more:
                break
        return total

    def close(self) -> None:
        self._store.close()

    # -- queries -------------------------------------------------------------------------

    def progress(self) -> Progress:
        live, build = self._live, self._build
        return Progress(
            position=live.position if live is not None else 0,
            rebuilding=build is not None,
            rebuild_position=build.position if build is not None else 0,
            target=max(self._target, build.position if build is not None else 0),
            ready=live is not None,
            stale=live is not None and live.version != self.version,
            version=self.version,
            generation=(build or live).gen if (build or live) is not None else 0,  # type: ignore[union-attr]
            skipped=(build or live).skipped if (build or live) is not None else 0,  # type: ignore[union-attr]
            failure=self._failure,
        )

    @property
    def ready(self) -> bool:
        """Whether a complete state exists to answer queries."""
        return self._live is not None

    def status(self, session: str) -> Projection | None:
        """The session's status in the complete state (``None``: unknown or not ready)."""
        acc = self._live.sessions.get(session) if self._live is not None else None
        return None if acc is None else acc.status.freeze()

    def info(self, session: str) -> SessionInfo | None:
        acc = self._live.sessions.get(session) if self._live is not None else None
        return None if acc is None else acc.info.freeze()

    def index(self) -> SessionsIndex:
        """Every session in the complete state, in order of first appearance."""
        if self._live is None:
            return SessionsIndex()
        ordered = sorted(self._live.sessions.values(), key=lambda a: a.info.first_position)
        return SessionsIndex({a.info.session: a.info.freeze() for a in ordered})

    def statuses(self) -> Mapping[str, Projection]:
        """Every session's status in the complete state."""
        if self._live is None:
            return {}
        return {s: a.status.freeze() for s, a in self._live.sessions.items()}
