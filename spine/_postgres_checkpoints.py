"""Checkpoints in the spine's PostgreSQL database, beside the log (tables ``projection_*``).

The generations of `CheckpointStore`, so a reducer on any host can resume or rebuild: the
state rows and the position of a page commit in one transaction. One writer at a time per
database: the reducer takes a session-level advisory lock, so a second reducer elsewhere
does not interleave: it gets `CheckpointBusyError` and stands by (the projection actor
retries), taking over when the first one's connection ends.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import psycopg

from ._checkpoints import CheckpointStore, Generation
from ._errors import CheckpointBusyError, CheckpointError
from ._spec import LogSpec

_SCHEMA = """
CREATE TABLE IF NOT EXISTS projection_generations (
    gen      BIGINT  PRIMARY KEY,
    version  TEXT    NOT NULL,
    position BIGINT  NOT NULL,
    complete BOOLEAN NOT NULL,
    skipped  BIGINT  NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS projection_state (
    gen    BIGINT NOT NULL,
    stream TEXT   NOT NULL,
    body   BYTEA  NOT NULL,
    PRIMARY KEY (gen, stream)
);
"""
# Any constant, paired with the schema's name: one checkpoint writer per schema (the spines
# of several data directories may share a database, each in a schema of its own).
_OWNER_LOCK = 0x70726F6A
_OWN = "SELECT pg_try_advisory_lock(%s, hashtext(current_schema()))"


class PostgresCheckpointStore(CheckpointStore):
    """Checkpoints in PostgreSQL (one writer: the reducer that owns it)."""

    def __init__(self, url: str) -> None:
        self.path = LogSpec(url).redacted()
        try:
            self._pg = psycopg.connect(url, autocommit=True)
        except psycopg.Error as exc:
            raise CheckpointError(f"cannot open the checkpoint tables: {exc}") from exc
        try:
            row = self._pg.execute(_OWN, (_OWNER_LOCK,)).fetchone()
            if row is None or not row[0]:
                raise CheckpointBusyError("another reducer holds this database's checkpoints")
            with self._pg.transaction():
                self._pg.execute(
                    "SELECT pg_advisory_xact_lock(%s, hashtext(current_schema()))",
                    (_OWNER_LOCK + 1,),
                )
                self._pg.execute(_SCHEMA)
        except BaseException as exc:
            self._pg.close()
            if isinstance(exc, psycopg.Error):
                raise CheckpointError(f"cannot create the checkpoint tables: {exc}") from exc
            raise

    def generations(self) -> list[Generation]:
        rows = self._pg.execute(
            "SELECT gen, version, position, complete, skipped FROM projection_generations "
            "ORDER BY gen"
        ).fetchall()
        return [
            Generation(gen=g, version=v, position=p, complete=bool(c), skipped=s)
            for g, v, p, c, s in rows
        ]

    def begin_generation(self, version: str) -> Generation:
        with self._tx() as c:
            c.execute(
                "DELETE FROM projection_state WHERE gen IN "
                "(SELECT gen FROM projection_generations WHERE NOT complete)"
            )
            c.execute("DELETE FROM projection_generations WHERE NOT complete")
            row = c.execute("SELECT COALESCE(MAX(gen), 0) FROM projection_generations").fetchone()
            gen = int(row[0]) + 1 if row is not None else 1
            c.execute(
                "INSERT INTO projection_generations (gen, version, position, complete) "
                "VALUES (%s, %s, 0, false)",
                (gen, version),
            )
        return Generation(gen=gen, version=version, position=0, complete=False)

    def load(self, gen: int) -> Iterator[tuple[str, bytes]]:
        rows = self._pg.execute(
            "SELECT stream, body FROM projection_state WHERE gen = %s", (gen,), binary=True
        ).fetchall()
        for stream, body in rows:
            yield stream, bytes(body)

    def load_one(self, gen: int, stream: str) -> bytes | None:
        row = self._pg.execute(
            "SELECT body FROM projection_state WHERE gen = %s AND stream = %s",
            (gen, stream),
            binary=True,
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
            c.cursor().executemany(
                "INSERT INTO projection_state (gen, stream, body) VALUES (%s, %s, %s) "
                "ON CONFLICT (gen, stream) DO UPDATE SET body = excluded.body",
                [(gen, s, b) for s, b in rows],
            )
            c.execute(
                "UPDATE projection_generations SET position = %s, skipped = %s, "
                "complete = complete OR %s WHERE gen = %s",
                (position, skipped, complete, gen),
            )
            if complete:
                c.execute("DELETE FROM projection_state WHERE gen < %s", (gen,))
                c.execute("DELETE FROM projection_generations WHERE gen < %s", (gen,))

    @contextlib.contextmanager
    def _tx(self) -> Iterator[Any]:
        try:
            with self._pg.transaction():
                yield self._pg
        except psycopg.Error as exc:
            raise CheckpointError(f"checkpoint write failed: {exc}") from exc

    def close(self) -> None:
        with contextlib.suppress(psycopg.Error):
            # Given back before the connection goes: its server process may outlive the
            # close for a moment, and the next owner (a reducer started again) would find
            # the lock still held.
            self._pg.execute(
                "SELECT pg_advisory_unlock(%s, hashtext(current_schema()))", (_OWNER_LOCK,)
            )
        with contextlib.suppress(psycopg.Error):
            self._pg.close()
