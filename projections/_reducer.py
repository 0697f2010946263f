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
import logging
import os
import pathlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from typing import Any

import attrs
import orjson

from spine import SCHEMA_VERSION, Record, event_to_dict

from . import _index, _metadata, _status, _status_rows
from ._checkpoints import CheckpointStore, open_checkpoints
from ._errors import FoldError
from ._index import INFO_STATE_HANDLERS, InfoFolder, SessionInfo, SessionsIndex
from ._policy import Fail, FailurePolicy, RetryThenFail, Skip
from ._reader import LogReader
from ._status import Projection
from ._status_rows import STATUS_HANDLERS, StatusFolder

log = logging.getLogger("projections")

#: Records folded (and, when live, committed) per step unless the caller says otherwise.
DEFAULT_BATCH = 5000
#: A rebuild commits its generation after at least this many records.
DEFAULT_REBUILD_COMMIT = 500_000

#: A stored row as the reducer reads it: stream, seq, position, kind, version, payload.
Row = tuple[str, int, int, str, int, bytes]


def _code_version() -> str:
    # Any change to the fold's source rebuilds the checkpoint: a stale fold is never served
    # as current, and a rebuild costs seconds.
    h = hashlib.sha256()
    for mod in (_status, _status_rows, _index, _metadata):
        f = getattr(mod, "__file__", None)
        if f:
            h.update(pathlib.Path(f).read_bytes())
    return "status-1-" + h.hexdigest()[:12]


#: The status fold's code version, recorded with each checkpoint generation.
STATUS_VERSION = _code_version()


@attrs.frozen(kw_only=True)
class FailureInfo:
    """Where and why folding stopped under a failing policy."""

    position: int
    stream: str
    seq: int
    problem: str

    def as_error(self) -> FoldError:
        return FoldError(self.problem, position=self.position, stream=self.stream, seq=self.seq)


@attrs.frozen(kw_only=True)
class Progress:
    """Where a reducer stands.

    ``position`` is the global position its queryable state has folded up to; while
    ``rebuilding``, ``rebuild_position`` climbs towards ``target`` (the log's end when last
    looked at). ``ready`` says a complete state exists to answer queries; ``stale`` that
    it comes from another code version (a rebuild is replacing it).
    """

    position: int
    rebuilding: bool
    rebuild_position: int
    target: int
    ready: bool
    stale: bool
    version: str
    generation: int
    skipped: int
    failure: FailureInfo | None = None


@attrs.frozen(kw_only=True)
class StepResult:
    """What one step folded: ``folded`` records up to ``position``; ``more`` when the page
    was full (the log may hold more), ``rebuilt`` when this step completed a rebuild."""

    folded: int
    position: int
    more: bool
    rebuilt: bool = False


class _Acc(StatusFolder):
    """One session's folds: the status (the folder itself, so that the status handlers
    take it directly in the hot loop) and its index entry."""

    __slots__ = ("info",)

    def __init__(self) -> None:
        super().__init__()
        self.info = InfoFolder("")

    @property
    def status(self) -> StatusFolder:
        return self

    @classmethod
    def new(cls, stream: str) -> _Acc:
        acc = cls()
        acc.info = InfoFolder(stream)
        return acc

    def body(self) -> bytes:
        return orjson.dumps({"s": self.view(), "i": self.info.dump()})

    @classmethod
    def from_body(cls, body: bytes) -> _Acc:
        d = orjson.loads(body)
        acc = cls.load(d["s"])
        acc.info = InfoFolder.load(d["i"])
        return acc


RowHandler = Callable[[_Acc, Mapping[str, Any]], None]


def _with_state(
    h: Callable[[StatusFolder, Mapping[str, Any]], None] | None,
    ih: Callable[[InfoFolder, Mapping[str, Any]], None],
) -> RowHandler:
    def both(acc: _Acc, d: Mapping[str, Any]) -> None:
        if h is not None:
            h(acc, d)
        ih(acc.info, d)

    return both


#: Per kind, everything a stored row of that kind changes (status, then index state).
ROW_HANDLERS: dict[str, RowHandler] = {
    **STATUS_HANDLERS,
    **{k: _with_state(STATUS_HANDLERS.get(k), ih) for k, ih in INFO_STATE_HANDLERS.items()},
}


class _State:
    """One generation in memory: its sessions and the position they are folded up to."""

    __slots__ = ("gen", "position", "sessions", "skipped", "version")

    def __init__(self, gen: int, version: str, position: int, skipped: int = 0) -> None:
        self.gen = gen
        self.version = version
        self.position = position
        self.skipped = skipped
        self.sessions: dict[str, _Acc] = {}


def _record(row: Row) -> Record:
    stream, seq, position, kind, version, payload = row
    return Record(stream, seq, position, kind, payload, version)


def _row_reader(log: LogReader) -> Callable[[int, int], list[Row]]:
    """A page reader over the all-streams log: ``read(after_position, limit)``.

    Every `Log` reads plain tuples through its own `read_rows` (no `Record` per row; on
    SQLite a read never takes the log's write lock); a reader without it goes through
    `read_all`.
    """
    fast = getattr(log, "read_rows", None)
    if fast is not None:
        return fast  # type: ignore[no-any-return]

    def read_records(after: int, limit: int) -> list[Row]:
        return [
            (r.stream, r.seq, r.position, r.kind, r.version, r.payload)
            for r in log.read_all(after, limit)
        ]

    return read_records


def _stored_dict(r: Record) -> dict[str, Any]:
    # The strict path: validate the row as an Event (naming stream and seq on failure),
    # and upcast older schema versions, before the fast fold reads it.
    ev = r.event()
    if r.version == SCHEMA_VERSION:
        try:
            d = orjson.loads(r.payload)
        except orjson.JSONDecodeError:
            # JSON that orjson refuses but the event accepts (a tool's raw input, kept as
            # the writer spelled it): the event's own fields in the stored shape.
            return event_to_dict(ev)
        if not isinstance(d, dict):  # pragma: no cover - r.event() already refused it
            raise TypeError("payload is not an object")
        return d
    return event_to_dict(ev)


class StatusReducer:
    """Folds a log into per-session `Projection`s and the `SessionsIndex`, checkpointed.

    ``log`` is any `LogReader`: every `Log` (a projection opens it read-only).

    ``checkpoint`` is the reducer's own SQLite file. ``policy`` says what to do with an
    event that cannot be folded. ``version`` defaults to `STATUS_VERSION`; a checkpoint of
    another version is served (marked stale) while a rebuild replaces it. One owner only:
    the reducer is not thread-safe.
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
            more=failure is None and len(rows) == n,
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

    # -- folding -------------------------------------------------------------------------

    def _fold(
        self, st: _State, rows: list[Row], n: int
    ) -> tuple[list[Row], int, FailureInfo | None]:
        """Fold a page; returns the rows actually considered, how many folded, any failure."""
        if st.position < self._careful_until:
            folded, failure = self._fold_careful(st, rows, self._dirty)
            return rows, folded, failure
        try:
            self._fold_fast(st.sessions, rows, self._dirty)
            return rows, len(rows), None
        except Exception:
            # Undo everything since the last commit, then go event by event from there
            # to past this page, so the policy sees the exact failing event.
            self._rollback(st)
            self._careful_until = rows[-1][2]
            rows = self._read(st.position, n)
            folded, failure = self._fold_careful(st, rows, self._dirty)
            return rows, folded, failure

    def _rollback(self, st: _State) -> None:
        for s in self._dirty:
            body = self._store.load_one(st.gen, s)
            if body is None:
                st.sessions.pop(s, None)
            else:
                st.sessions[s] = _Acc.from_body(body)
        self._dirty.clear()
        self._uncommitted = 0
        g = self._store.generation(st.gen)
        st.position = g.position if g is not None else 0
        st.skipped = g.skipped if g is not None else 0

    @staticmethod
    def _fold_fast(sessions: dict[str, _Acc], rows: Sequence[Row], dirty: set[str]) -> None:
        # The hot loop of a rebuild. Rows are dispatched on the stored kind column (the
        # spine writes the payload's kind there), so rows of kinds no rule reads are not
        # even decoded; the index's per-row bookkeeping (count, last seq, time, position)
        # is taken per session per page from C-level passes over the page.
        current = SCHEMA_VERSION
        if set(map(itemgetter(4), rows)) - {current}:
            # Another schema version: validate and upcast row by row (rare).
            for row in rows:
                StatusReducer._fold_row(sessions, row, _stored_dict(_record(row)), dirty)
            return
        loads = orjson.loads
        streams = list(map(itemgetter(0), rows))
        lasts = dict(zip(streams, rows, strict=True))
        counts = Counter(streams)
        # Marked before folding, so that a failure mid-page rolls back every session it
        # may have touched.
        dirty.update(lasts)
        fresh = [s for s in lasts if s not in sessions]
        if fresh:
            firsts = dict(zip(reversed(streams), reversed(rows), strict=True))
            for s in fresh:
                first = firsts[s]
                acc = sessions[s] = _Acc.new(s)
                acc.info.first_position = first[2]
                acc.info.created = loads(first[5]).get("time")
        handlers = ROW_HANDLERS
        for stream, _seq, _position, kind, _version, payload in rows:
            h = handlers.get(kind)
            if h is not None:
                d = loads(payload)
                # The one check the fast path makes: a row that is not an object of its
                # own kind goes to the careful path, which names the problem.
                if d["kind"] != kind:
                    raise ValueError(f"payload kind differs from the stored kind {kind!r}")
                h(sessions[stream], d)
        for s, last in lasts.items():
            d = loads(last[5])
            sessions[s].info.feed_tail(d, d, last[2], counts[s])

    @staticmethod
    def _fold_row(sessions: dict[str, _Acc], row: Row, d: dict[str, Any], dirty: set[str]) -> None:
        acc = sessions.get(row[0])
        if acc is None:
            acc = sessions[row[0]] = _Acc.new(row[0])
        acc.status.feed(d)
        acc.info.feed(d, row[2])
        dirty.add(row[0])

    def _fold_careful(
        self, st: _State, rows: Sequence[Row], dirty: set[str]
    ) -> tuple[int, FailureInfo | None]:
        # Event by event with a snapshot, so a failure never leaves half an event folded.
        for i, row in enumerate(rows):
            rec = _record(row)
            attempt = 0
            while True:
                try:
                    self._fold_one(st.sessions, rec, dirty)
                    break
                except Exception as exc:
                    problem = f"{type(exc).__name__}: {exc}"
                    policy = self.policy
                    if isinstance(policy, RetryThenFail) and attempt < policy.attempts:
                        attempt += 1
                        again = self._log.read(rec.stream, rec.seq - 1, 1)
                        rec = again[0] if again else rec
                        continue
                    if isinstance(policy, Skip):
                        log.error(
                            "skipping %r seq %d (position %d): %s",
                            rec.stream,
                            rec.seq,
                            rec.position,
                            problem,
                        )
                        st.skipped += 1
                        break
                    log.error(
                        "stopping at %r seq %d (position %d): %s",
                        rec.stream,
                        rec.seq,
                        rec.position,
                        problem,
                    )
                    return i, FailureInfo(
                        position=rec.position, stream=rec.stream, seq=rec.seq, problem=problem
                    )
        return len(rows), None

    @staticmethod
    def _fold_one(sessions: dict[str, _Acc], r: Record, dirty: set[str]) -> None:
        d = _stored_dict(r)
        acc = sessions.get(r.stream)
        snapshot = None if acc is None else acc.body()
        fresh = acc if acc is not None else _Acc.new(r.stream)
        try:
            fresh.status.feed(d)
            fresh.info.feed(d, r.position)
        except Exception:
            if snapshot is not None:
                sessions[r.stream] = _Acc.from_body(snapshot)
            raise
        sessions[r.stream] = fresh
        dirty.add(r.stream)

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
