"""`LogSpec` and `open_log`: where a log lives, as a URL that pickles, and how to open it.

Actors in other processes (and, with PostgreSQL, on other hosts) each open the log
themselves, so what travels in their configuration is a spec, never an open log. The
backend is chosen here, from the URL's scheme, and nowhere above the spine:

- ``sqlite:///relative/file.db`` or ``sqlite:////absolute/file.db`` (the path follows the
  third slash, as in SQLAlchemy), or a plain file path;
- ``postgresql://user@host:port/dbname`` (also ``postgres://``; any libpq URL), which needs
  the ``postgres`` extra.
"""

from __future__ import annotations

import os
import re
from typing import Any

import attrs

from ._errors import InvalidArgumentError
from ._log import Log

_SQLITE = "sqlite:///"
_PG_SCHEMES = ("postgresql://", "postgres://")


@attrs.frozen
class LogSpec:
    """Where a log lives: a URL (see the module doc). Picklable and comparable."""

    url: str

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url:
            raise InvalidArgumentError(f"a log spec needs a non-empty URL, got {self.url!r}")
        if self.scheme == "sqlite" and not self.url[len(_SQLITE) :]:
            raise InvalidArgumentError(f"the SQLite URL {self.url!r} names no file")
        if self.scheme not in ("sqlite", "postgresql"):
            raise InvalidArgumentError(
                f"unknown log URL {self.redacted()!r}: expected sqlite:///PATH or postgresql://..."
            )

    @classmethod
    def sqlite(cls, path: str | os.PathLike[str]) -> LogSpec:
        """The spec of a SQLite file (made absolute, so it means the same in any process)."""
        return cls(_SQLITE + os.path.abspath(os.fspath(path)))

    @classmethod
    def parse(cls, value: str | os.PathLike[str] | LogSpec) -> LogSpec:
        """A spec from a URL, a plain file path (SQLite) or a spec."""
        if isinstance(value, LogSpec):
            return value
        text = os.fspath(value)
        if not isinstance(text, str) or not text:
            raise InvalidArgumentError(f"a log location must be a URL or a path, got {value!r}")
        if text.startswith(_SQLITE) or text.startswith(_PG_SCHEMES):
            return cls(text)
        if "://" in text:
            return cls(text)  # refused by the check, with the URL named
        return cls.sqlite(text)

    @property
    def scheme(self) -> str:
        if self.url.startswith(_SQLITE):
            return "sqlite"
        if self.url.startswith(_PG_SCHEMES):
            return "postgresql"
        return self.url.split(":", 1)[0]

    @property
    def path(self) -> str:
        """The SQLite file of a ``sqlite:`` spec."""
        if self.scheme != "sqlite":
            raise InvalidArgumentError(f"{self.redacted()!r} is not a SQLite file")
        return self.url[len(_SQLITE) :]

    def redacted(self) -> str:
        """The URL with any password replaced, for messages and logs."""
        return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", self.url)

    def __repr__(self) -> str:
        return f"LogSpec({self.redacted()!r})"


def open_log(
    spec: LogSpec | str | os.PathLike[str],
    *,
    single_connection: bool = False,
    read_only: bool = False,
    deferred_checkpoints: bool = False,
    **options: Any,
) -> Log:
    """Open the log ``spec`` names.

    ``single_connection``: the caller uses the log from one thread at a time, so reads may
    share the writer's connection (a session's setting). ``read_only``: the caller only
    reads (a projection); on SQLite the file is then opened read-only and never locked
    for writing, and it must exist. ``deferred_checkpoints``: on SQLite this writer never
    checkpoints the WAL itself, another process does (`SqliteLog.start_checkpoints`; a
    session's setting); other backends ignore it. Other keywords go to the backend's
    constructor.
    """
    s = LogSpec.parse(spec)
    if s.scheme == "sqlite":
        from ._sqlite import SqliteLog

        return SqliteLog(
            s.path,
            single_connection=single_connection,
            read_only=read_only,
            autocheckpoint=not deferred_checkpoints,
            **options,
        )
    try:
        from ._postgres import PostgresLog
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise InvalidArgumentError(
            f"a PostgreSQL spine needs the postgres extra (pip install 'vertebra[postgres]'): {exc}"
        ) from exc
    return PostgresLog(s.url, single_connection=single_connection, read_only=read_only, **options)


def load_backend(spec: LogSpec | str | os.PathLike[str]) -> None:
    """Import the backend that ``spec`` names now, without opening anything.

    For a process that forks workers which each open the log (a member host's session
    processes): they inherit the imported modules instead of each importing them, which
    on a loaded host was most of a new session's start (psycopg's import alone takes a
    fraction of a second of CPU, and a host taking over a dead member's sessions starts
    them all at once). Raises `InvalidArgumentError` for a PostgreSQL spec without the
    ``postgres`` extra, as `open_log` would.
    """
    if LogSpec.parse(spec).scheme == "sqlite":
        from . import _sqlite  # noqa: F401

        return
    try:
        from . import _postgres  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise InvalidArgumentError(
            f"a PostgreSQL spine needs the postgres extra (pip install 'vertebra[postgres]'): {exc}"
        ) from exc
