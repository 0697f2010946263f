"""`LogReader`: the part of a `Log` a reducer needs, and a read-only SQLite one.

A projection only reads the spine. `spine.open_log(spec, read_only=True)` opens a SQLite
file read-only (creating its schema would take the log's write lock), so a reducer never
takes that lock, not even at start; `SqliteLogReader` is that log under its old name.
"""

from __future__ import annotations

import os
from typing import Protocol, runtime_checkable

from spine import DEFAULT_PAGE, Record, SqliteLog


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


class SqliteLogReader(SqliteLog):
    """Reads a `SqliteLog` file through read-only connections; writes nothing, ever."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path, read_only=True)
