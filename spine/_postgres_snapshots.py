"""Snapshots in the spine's PostgreSQL database, beside the log (table ``spine_snapshots``).

One row per stream, replaced by each save; on its own connection, autocommitted (a save is
one statement).
"""

from __future__ import annotations

import contextlib

import psycopg

from ._errors import StorageError
from ._snapshots import Snapshot, SnapshotStore
from ._spec import LogSpec

_SCHEMA = """
CREATE TABLE IF NOT EXISTS spine_snapshots (
    stream  TEXT   PRIMARY KEY,
    seq     BIGINT NOT NULL,
    version BIGINT NOT NULL,
    body    BYTEA  NOT NULL
)
"""
# Any constant: serialises the schema's creation by stores opening at once.
_SCHEMA_LOCK = 0x736E617073686F74


class PostgresSnapshotStore(SnapshotStore):
    """Snapshots in PostgreSQL, shared by every host of the database."""

    def __init__(self, url: str) -> None:
        self.path = LogSpec(url).redacted()
        try:
            self._pg = psycopg.connect(url, autocommit=True)
        except psycopg.Error as exc:
            raise StorageError(f"cannot open the snapshot table: {exc}") from exc
        try:
            with self._pg.transaction():
                self._pg.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                self._pg.execute(_SCHEMA)
        except psycopg.Error as exc:
            self._pg.close()
            raise StorageError(f"cannot create the snapshot table: {exc}") from exc

    def load(self, stream: str) -> Snapshot | None:
        try:
            row = self._pg.execute(
                "SELECT seq, version, body FROM spine_snapshots WHERE stream = %s",
                (stream,),
                binary=True,
            ).fetchone()
        except psycopg.Error as exc:
            raise StorageError(f"cannot read a snapshot of {stream!r}: {exc}") from exc
        return None if row is None else Snapshot(stream, row[0], row[1], bytes(row[2]))

    def save(self, snapshot: Snapshot) -> None:
        try:
            self._pg.execute(
                "INSERT INTO spine_snapshots (stream, seq, version, body) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (stream) DO UPDATE SET "
                "seq = excluded.seq, version = excluded.version, body = excluded.body",
                (snapshot.stream, snapshot.seq, snapshot.version, snapshot.body),
            )
        except psycopg.Error as exc:
            raise StorageError(f"cannot write a snapshot of {snapshot.stream!r}: {exc}") from exc

    def close(self) -> None:
        with contextlib.suppress(psycopg.Error):
            self._pg.close()
