"""`LogReader`: the part of a `Log` a reducer needs, and a read-only SQLite one.

A projection only reads the spine. Opening a `SqliteLog` would create its schema under
``BEGIN IMMEDIATE`` (the log's write lock); `SqliteLogReader` opens the file read-only
instead, so a reducer never takes that lock, not even at start.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import sqlite3
from typing import Any, Protocol, runtime_checkable

from spine import DEFAULT_PAGE, Record, StorageError


@runtime_checkable
class LogReader(Protocol):
    """What `StatusReducer` reads: every `Log` is one."""

    def read(
        self, stream: str, after_seq: int = 0, limit: int | None = DEFAULT_PAGE
    ) -> list[Record]: ...

    def read_all(
        self, after_position: int = 0, limit: int | None = DEFAULT_PAGE
    ) -> list[Record]: ...

    def last_position(self) -> int: ...


def connect_read_only(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """A read-only connection to an existing spine file (one per thread that uses it)."""
    p = pathlib.Path(path)
    if not p.exists():
        raise StorageError(f"spine database {str(path)!r} does not exist")
    try:
        return sqlite3.connect(p.resolve().as_uri() + "?mode=ro", uri=True, check_same_thread=False)
    except sqlite3.Error as exc:
        raise StorageError(f"cannot open spine database {str(path)!r}: {exc}") from exc


class SqliteLogReader:
    """Reads a `SqliteLog` file through a read-only connection; writes nothing, ever."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._c = connect_read_only(self.path)

    def read(
        self, stream: str, after_seq: int = 0, limit: int | None = DEFAULT_PAGE
    ) -> list[Record]:
        rows = self._query(
            "SELECT seq, position, kind, version, payload FROM events "
            "WHERE stream=? AND seq>? ORDER BY seq LIMIT ?",
            (stream, after_seq, -1 if limit is None else limit),
        )
        return [Record(stream, s, p, k, bytes(b), v) for s, p, k, v, b in rows]

    def read_all(self, after_position: int = 0, limit: int | None = DEFAULT_PAGE) -> list[Record]:
        rows = self._query(
            "SELECT stream, seq, position, kind, version, payload FROM events "
            "WHERE position>? ORDER BY position LIMIT ?",
            (after_position, -1 if limit is None else limit),
        )
        return [Record(st, s, p, k, bytes(b), v) for st, s, p, k, v, b in rows]

    def last_position(self) -> int:
        rows = self._query("SELECT COALESCE(MAX(position), 0) FROM events", ())
        return int(rows[0][0])

    def _query(self, sql: str, args: tuple[object, ...]) -> list[Any]:
        try:
            return self._c.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise StorageError(f"read from {self.path!r} failed: {exc}") from exc

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._c.close()

    def __enter__(self) -> SqliteLogReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
