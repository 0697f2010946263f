"""Checkpoints in a SQLite file of their own (a projection's ``projections.db``).

The generations of `CheckpointStore` as two tables (``generations`` and ``state``); the
store never touches the spine's file, so the reducer never holds the log's write lock.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterable, Iterator

from ._checkpoints import CheckpointStore, Generation
from ._errors import CheckpointError, StorageError
from ._private import private_sqlite

_SCHEMA = """
CREATE TABLE IF NOT EXISTS generations (
    gen      INTEGER PRIMARY KEY,
    version  TEXT    NOT NULL,
    position INTEGER NOT NULL,
    complete INTEGER NOT NULL,
    skipped  INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS state (
    gen    INTEGER NOT NULL,
    stream TEXT    NOT NULL,
    body   BLOB    NOT NULL,
    PRIMARY KEY (gen, stream)
) WITHOUT ROWID;
"""


class SqliteCheckpointStore(CheckpointStore):
    """A checkpoint file (one writer: the reducer that owns it)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        try:
            private_sqlite(self.path)
            self._c = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._c.execute("PRAGMA journal_mode = WAL")
            # A checkpoint lost to a power cut is refolded from the log, so NORMAL suffices.
            self._c.execute("PRAGMA synchronous = NORMAL")
            self._c.executescript(_SCHEMA)
        except (sqlite3.Error, StorageError) as exc:
            raise CheckpointError(f"cannot open checkpoint file {self.path!r}: {exc}") from exc

    def generations(self) -> list[Generation]:
        rows = self._c.execute(
            "SELECT gen, version, position, complete, skipped FROM generations ORDER BY gen"
        ).fetchall()
        return [
            Generation(gen=g, version=v, position=p, complete=bool(c), skipped=s)
            for g, v, p, c, s in rows
        ]

    def begin_generation(self, version: str) -> Generation:
        with self._tx() as c:
            for g in self.generations():
                if not g.complete:
                    c.execute("DELETE FROM state WHERE gen=?", (g.gen,))
                    c.execute("DELETE FROM generations WHERE gen=?", (g.gen,))
            row = c.execute("SELECT COALESCE(MAX(gen), 0) FROM generations").fetchone()
            gen = int(row[0]) + 1
            c.execute(
                "INSERT INTO generations (gen, version, position, complete) VALUES (?,?,0,0)",
                (gen, version),
            )
        return Generation(gen=gen, version=version, position=0, complete=False)

    def load(self, gen: int) -> Iterator[tuple[str, bytes]]:
        for stream, body in self._c.execute(
            "SELECT stream, body FROM state WHERE gen=?", (gen,)
        ).fetchall():
            yield stream, bytes(body)

    def load_one(self, gen: int, stream: str) -> bytes | None:
        row = self._c.execute(
            "SELECT body FROM state WHERE gen=? AND stream=?", (gen, stream)
        ).fetchone()
        return None if row is None else bytes(row[0])

    def commit(
        self,
        gen: int,
        position: int,
        rows: Iterable[tuple[str, bytes]],
        *,
        skipped: int = 0,
        complete: bool = False,
    ) -> None:
        with self._tx() as c:
            c.executemany(
                "INSERT OR REPLACE INTO state (gen, stream, body) VALUES (?,?,?)",
                ((gen, s, b) for s, b in rows),
            )
            c.execute(
                "UPDATE generations SET position=?, skipped=?, complete=MAX(complete, ?) "
                "WHERE gen=?",
                (position, skipped, int(complete), gen),
            )
            if complete:
                c.execute("DELETE FROM state WHERE gen<?", (gen,))
                c.execute("DELETE FROM generations WHERE gen<?", (gen,))

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        c = self._c
        try:
            c.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise CheckpointError(f"cannot write checkpoint {self.path!r}: {exc}") from exc
        try:
            yield c
            c.execute("COMMIT")
        except BaseException as exc:
            with contextlib.suppress(sqlite3.Error):
                c.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise CheckpointError(f"checkpoint write to {self.path!r} failed: {exc}") from exc
            raise

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._c.close()
