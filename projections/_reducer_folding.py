"""`PageFolding`: how `StatusReducer` folds a page: fast by kind, and after a failure
event by event against snapshots, under its failure policy.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from spine import CheckpointStore

from ._policy import FailurePolicy, RetryThenFail, Skip
from ._progress import FailureInfo
from ._reader import LogReader
from ._row_fold import Row, _Acc, _record, _State, fold_page, fold_record

log = logging.getLogger("projections")


class PageFolding:
    """The page folds of `StatusReducer`, a mixin: the reducer holds the state."""

    policy: FailurePolicy
    _log: LogReader
    _store: CheckpointStore
    _dirty: set[str]
    _uncommitted: int
    _careful_until: int
    _read: Callable[[int, int], list[Row]]

    def _fold(
        self, st: _State, rows: list[Row], n: int
    ) -> tuple[list[Row], int, FailureInfo | None]:
        """Fold a page; returns the rows actually considered, how many folded, any failure."""
        if st.position < self._careful_until:
            folded, failure = self._fold_careful(st, rows, self._dirty)
            return rows, folded, failure
        try:
            fold_page(st.sessions, rows, self._dirty)
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

    def _fold_careful(
        self, st: _State, rows: Sequence[Row], dirty: set[str]
    ) -> tuple[int, FailureInfo | None]:
        # Event by event with a snapshot, so a failure never leaves half an event folded.
        for i, row in enumerate(rows):
            rec = _record(row)
            attempt = 0
            while True:
                try:
                    fold_record(st.sessions, rec, dirty)
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
