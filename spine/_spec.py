"""`LogSpec` and the openers: where a log (and its checkpoints and snapshots) lives, as a URL
that pickles, and how to open it.

Actors in other processes (and, with PostgreSQL, on other hosts) each open the log
themselves, so what travels in their configuration is a spec, never an open log. The
backend is chosen here, from the URL's scheme (`_backends.BACKENDS`), and nowhere above
the spine:

- ``sqlite:///relative/file.db`` or ``sqlite:////absolute/file.db`` (the path follows the
  third slash, as in SQLAlchemy), or a plain file path;
- ``postgresql://user@host:port/dbname`` (also ``postgres://``; any libpq URL), which needs
  the ``postgres`` extra.

A SQLite URL may end in ``?durability=full``: commits are then synced to disk before they
are acknowledged (``PRAGMA synchronous = FULL``: an acknowledged event survives a power
cut), where the default ``normal`` survives a crash of any process but may lose the last
commits to a power cut. A PostgreSQL spine's durability is the server's
(``synchronous_commit``, on by default: full).
"""

from __future__ import annotations

import os
import re
from typing import Any

import attrs

from ._backends import BACKENDS, Backend, scheme_of
from ._checkpoints import CheckpointStore
from ._errors import InvalidArgumentError
from ._log import Log
from ._snapshots import SnapshotStore

_SQLITE = "sqlite:///"
#: What an acknowledged append survives: ``normal`` a crash of any process, ``full`` a
#: power cut as well.
DURABILITY = ("normal", "full")
_DURABILITY_QUERY = "?durability="


@attrs.frozen
class LogSpec:
    """Where a log lives: a URL (see the module doc). Picklable and comparable."""

    url: str

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url:
            raise InvalidArgumentError(f"a log spec needs a non-empty URL, got {self.url!r}")
        if self.scheme == "sqlite" and not self.url[len(_SQLITE) :].partition(_DURABILITY_QUERY)[0]:
            raise InvalidArgumentError(f"the SQLite URL {self.url!r} names no file")
        if self.scheme not in BACKENDS:
            known = " or ".join(f"{b.prefixes[0]}..." for b in BACKENDS.values())
            raise InvalidArgumentError(f"unknown log URL {self.redacted()!r}: expected {known}")
        if self.scheme == "sqlite" and self.durability not in DURABILITY:
            raise InvalidArgumentError(
                f"unknown durability {self.durability!r} in {self.url!r}: expected "
                + " or ".join(DURABILITY)
            )

    @property
    def durability(self) -> str:
        """``normal`` or ``full`` (see the module doc); a PostgreSQL spine's is the server's."""
        if self.scheme != "sqlite" or _DURABILITY_QUERY not in self.url:
            return "normal"
        return self.url.rpartition(_DURABILITY_QUERY)[2]

    def durable(self, level: str) -> LogSpec:
        """This log at durability ``level``. A PostgreSQL spine takes ``full`` as it is
        (the server's default) and refuses ``normal``: that is the server's to lower."""
        if level not in DURABILITY:
            raise InvalidArgumentError(
                f"unknown durability {level!r}: expected " + " or ".join(DURABILITY)
            )
        if self.scheme != "sqlite":
            if level != "full":
                raise InvalidArgumentError(
                    "a PostgreSQL spine's durability is its server's synchronous_commit"
                )
            return self
        base = self.location
        return type(self)(base if level == "normal" else base + _DURABILITY_QUERY + level)

    @property
    def location(self) -> str:
        """The URL without the durability: where the log is, whatever its durability."""
        return self.url.partition(_DURABILITY_QUERY)[0] if self.scheme == "sqlite" else self.url

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
        if "://" in text:
            return cls(text)  # refused by the check, with the URL named
        return cls.sqlite(text)

    @property
    def scheme(self) -> str:
        """The scheme of the backend that serves it (``sqlite``, ``postgresql``)."""
        return scheme_of(self.url) or self.url.split(":", 1)[0]

    @property
    def backend(self) -> Backend:
        """The `Backend` that serves it."""
        return BACKENDS[self.scheme]

    @property
    def path(self) -> str:
        """The SQLite file of a ``sqlite:`` spec."""
        if self.scheme != "sqlite":
            raise InvalidArgumentError(f"{self.redacted()!r} is not a SQLite file")
        return self.location[len(_SQLITE) :]

    def redacted(self) -> str:
        """The URL with any password replaced, for messages and logs."""
        return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", self.url)

    def __repr__(self) -> str:
        return f"LogSpec({self.redacted()!r})"


def backend(spec: LogSpec | str | os.PathLike[str]) -> Backend:
    """The `Backend` serving the log ``spec`` names (what it can do: ``shared``, ...)."""
    return LogSpec.parse(spec).backend


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
    return s.backend.open_log(
        s,
        single_connection=single_connection,
        read_only=read_only,
        deferred_checkpoints=deferred_checkpoints,
        **options,
    )


def load_backend(spec: LogSpec | str | os.PathLike[str]) -> None:
    """Import the backend that ``spec`` names now, without opening anything.

    For a process that forks workers which each open the log (a member host's session
    processes): they inherit the imported modules instead of each importing them, which
    on a loaded host was most of a new session's start (psycopg's import alone takes a
    fraction of a second of CPU, and a host taking over a dead member's sessions starts
    them all at once). Raises `InvalidArgumentError` for a PostgreSQL spec without the
    ``postgres`` extra, as `open_log` would.
    """
    LogSpec.parse(spec).backend.load()


def checkpoints_at(spec: LogSpec | str | os.PathLike[str], data_dir: str) -> LogSpec:
    """Where a runtime whose log is ``spec`` and whose data directory is ``data_dir`` keeps
    its projection checkpoints: a file in the directory (SQLite), or the log's own database
    (PostgreSQL, so a reducer on any host resumes them)."""
    s = LogSpec.parse(spec)
    return s.backend.checkpoints_at(s, data_dir)


def snapshots_at(spec: LogSpec | str | os.PathLike[str], data_dir: str) -> LogSpec:
    """Where a runtime whose log is ``spec`` and whose data directory is ``data_dir`` keeps
    its session snapshots (a file in the directory, on every backend built in)."""
    s = LogSpec.parse(spec)
    return s.backend.snapshots_at(s, data_dir)


def open_checkpoints(
    location: LogSpec | str | os.PathLike[str] | CheckpointStore,
) -> CheckpointStore:
    """The checkpoint store at ``location`` (a spec, URL or SQLite file path, as for
    `open_log`; a store is returned as it is). Raises `CheckpointError` if it cannot be
    opened, `CheckpointBusyError` if another writer holds it."""
    if isinstance(location, CheckpointStore):
        return location
    s = LogSpec.parse(location)
    return s.backend.open_checkpoints(s)


def open_snapshots(location: LogSpec | str | os.PathLike[str]) -> SnapshotStore:
    """The snapshot store at ``location`` (a spec, URL or SQLite file path, as for
    `open_log`). Raises `StorageError` if it cannot be opened."""
    s = LogSpec.parse(location)
    return s.backend.open_snapshots(s)
