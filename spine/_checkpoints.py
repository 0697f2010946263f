"""`CheckpointStore`: where a reader of the log (a projection's reducer) keeps its state and
its global position, as generations; each backend implements it (`_backends`).

A generation is one fold of the log by one code version: its position, whether it is
complete (folded up to the log's end at least once, so queries may read it) and one state
row (opaque bytes) per stream. Each batch commits the rows it changed together with the new
position in one transaction, so a crash at any point leaves a state that is exactly the fold
of the log up to the recorded position. A rebuild folds a fresh generation next to the
complete one and, when it has caught up, makes it current and drops the old one in one
transaction. A store has one writer at a time.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator

import attrs


@attrs.frozen(kw_only=True)
class Generation:
    """One fold of the log by one code version, as the checkpoint store records it."""

    gen: int
    version: str
    position: int
    complete: bool
    skipped: int = 0


class CheckpointStore(abc.ABC):
    """A reader's checkpoints (one writer: the reducer that owns them).

    Failures raise `CheckpointError` (`CheckpointBusyError` when another writer holds
    them); a failed `commit` leaves the store as it was before it.
    """

    #: Where the store lives, for messages (a file path, or a URL without its password).
    path: str

    @abc.abstractmethod
    def generations(self) -> list[Generation]:
        """Every generation, oldest first."""

    @abc.abstractmethod
    def begin_generation(self, version: str) -> Generation:
        """Start an empty generation after every existing one; stale pending ones go."""

    @abc.abstractmethod
    def load(self, gen: int) -> Iterator[tuple[str, bytes]]:
        """Every stream's state row of ``gen``."""

    @abc.abstractmethod
    def load_one(self, gen: int, stream: str) -> bytes | None:
        """The state row of ``stream`` in ``gen``, None if it has none."""

    @abc.abstractmethod
    def commit(
        self,
        gen: int,
        position: int,
        rows: Iterable[tuple[str, bytes]],
        *,
        skipped: int = 0,
        complete: bool = False,
    ) -> None:
        """Write changed stream rows and the new position of ``gen`` atomically.

        With ``complete`` the generation becomes the current one and every older one is
        dropped in the same transaction.
        """

    @abc.abstractmethod
    def close(self) -> None: ...

    def generation(self, gen: int) -> Generation | None:
        for g in self.generations():
            if g.gen == gen:
                return g
        return None

    def current(self) -> Generation | None:
        """The newest complete generation."""
        done = [g for g in self.generations() if g.complete]
        return done[-1] if done else None

    def pending(self) -> Generation | None:
        """The newest incomplete generation (a rebuild under way), if any."""
        gens = self.generations()
        if gens and not gens[-1].complete:
            return gens[-1]
        return None

    def __enter__(self) -> CheckpointStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
