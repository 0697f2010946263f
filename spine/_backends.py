"""The storage backends, by URL scheme: each one opens a log, checkpoints and snapshots.

Everything above the spine reaches storage through `open_log`, `open_checkpoints` and
`open_snapshots` (and asks `backend` what a backend can do); none of it names a scheme or a
class. A new backend is its modules in ``spine/`` (a `Log`, a `CheckpointStore`, a
`SnapshotStore`, each with the contract suite of `spine.testing` run against it) and one
`Backend` value added to `BACKENDS` here.

Each backend's modules are imported when first used: a PostgreSQL backend needs the
``postgres`` extra, a SQLite-only installation never imports it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from ._errors import InvalidArgumentError

if TYPE_CHECKING:
    from ._checkpoints import CheckpointStore
    from ._log import Log
    from ._snapshots import SnapshotStore
    from ._spec import LogSpec


def _nothing(log: Log) -> None:
    del log


def _unchecked(spec: LogSpec) -> None:
    del spec


@attrs.frozen(kw_only=True, repr=False)
class Backend:
    """What a storage backend provides; every opener takes the `LogSpec` of its location.

    ``open_log(spec, *, single_connection, read_only, deferred_checkpoints, **options)``
    opens the log (see `open_log` for the flags). ``checkpoints_at(spec, data_dir)`` and
    ``snapshots_at(spec, data_dir)`` say where a runtime whose log is ``spec`` and whose
    data directory is ``data_dir`` keeps its projection checkpoints and session snapshots
    (the same database, or a file in the directory); ``open_checkpoints`` and
    ``open_snapshots`` open a location of this backend. ``load`` imports the backend's
    modules ahead of use (`load_backend`). ``shared``: several hosts may share one log
    (a cluster needs that). ``start_upkeep(log)`` starts the log's background work, in a
    process that forks no more children (the Host's). ``check_pages(spec)`` checks the
    storage under the log (``["ok"]``, or the problems; `FileNotFoundError` if it holds
    nothing yet), None where its server keeps its own pages sound.
    """

    scheme: str
    prefixes: tuple[str, ...]
    open_log: Callable[..., Log]
    open_checkpoints: Callable[[LogSpec], CheckpointStore]
    open_snapshots: Callable[[LogSpec], SnapshotStore]
    checkpoints_at: Callable[[LogSpec, str], LogSpec]
    snapshots_at: Callable[[LogSpec, str], LogSpec]
    load: Callable[[], None]
    shared: bool = False
    start_upkeep: Callable[[Log], None] = _nothing
    check_pages: Callable[[LogSpec], list[str] | None] = _unchecked

    def __repr__(self) -> str:
        return f"<Backend {self.scheme}>"


# -- SQLite: a file per store --------------------------------------------------------------


def _sqlite_log(
    spec: LogSpec,
    *,
    single_connection: bool,
    read_only: bool,
    deferred_checkpoints: bool,
    **options: Any,
) -> Log:
    from ._sqlite import SqliteLog

    if spec.durability == "full":
        options["synchronous"] = "FULL"
    return SqliteLog(
        spec.path,
        single_connection=single_connection,
        read_only=read_only,
        autocheckpoint=not deferred_checkpoints,
        **options,
    )


def _sqlite_checkpoints(spec: LogSpec) -> CheckpointStore:
    from ._sqlite_checkpoints import SqliteCheckpointStore

    return SqliteCheckpointStore(spec.path)


def _sqlite_snapshots(spec: LogSpec) -> SnapshotStore:
    from ._sqlite_snapshots import SqliteSnapshotStore

    return SqliteSnapshotStore(spec.path)


def _in_data_dir(name: str) -> Callable[[LogSpec, str], LogSpec]:
    def at(spec: LogSpec, data_dir: str) -> LogSpec:
        return type(spec).sqlite(os.path.join(data_dir, name))

    return at


def _sqlite_load() -> None:
    from . import _sqlite, _sqlite_checkpoints, _sqlite_snapshots  # noqa: F401


def _sqlite_upkeep(log: Log) -> None:
    from ._sqlite import SqliteLog

    # Sessions leave the WAL's checkpoints to this process (`deferred_checkpoints`).
    if isinstance(log, SqliteLog):
        log.start_checkpoints()


def _sqlite_pages(spec: LogSpec) -> list[str]:
    from ._sqlite_schema import integrity_check

    return integrity_check(spec.path)


SQLITE = Backend(
    scheme="sqlite",
    prefixes=("sqlite:///",),
    open_log=_sqlite_log,
    open_checkpoints=_sqlite_checkpoints,
    open_snapshots=_sqlite_snapshots,
    checkpoints_at=_in_data_dir("projections.db"),
    snapshots_at=_in_data_dir("snapshots.db"),
    load=_sqlite_load,
    start_upkeep=_sqlite_upkeep,
    check_pages=_sqlite_pages,
)


# -- PostgreSQL: tables of one database, shared by hosts -----------------------------------


def _postgres_load() -> None:
    try:
        from . import _postgres, _postgres_checkpoints, _postgres_snapshots  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise InvalidArgumentError(
            f"a PostgreSQL spine needs the postgres extra (pip install 'vertebra[postgres]'): {exc}"
        ) from exc


def _postgres_log(
    spec: LogSpec,
    *,
    single_connection: bool,
    read_only: bool,
    deferred_checkpoints: bool,
    **options: Any,
) -> Log:
    del deferred_checkpoints  # the server checkpoints its own WAL
    _postgres_load()
    from ._postgres import PostgresLog

    return PostgresLog(
        spec.url, single_connection=single_connection, read_only=read_only, **options
    )


def _postgres_checkpoints(spec: LogSpec) -> CheckpointStore:
    _postgres_load()
    from ._postgres_checkpoints import PostgresCheckpointStore

    return PostgresCheckpointStore(spec.url)


def _postgres_snapshots(spec: LogSpec) -> SnapshotStore:
    _postgres_load()
    from ._postgres_snapshots import PostgresSnapshotStore

    return PostgresSnapshotStore(spec.url)


def _same_database(spec: LogSpec, data_dir: str) -> LogSpec:
    del data_dir
    return spec


POSTGRES = Backend(
    scheme="postgresql",
    prefixes=("postgresql://", "postgres://"),
    open_log=_postgres_log,
    open_checkpoints=_postgres_checkpoints,
    open_snapshots=_postgres_snapshots,
    checkpoints_at=_same_database,
    # A session process holds one connection, its log's; a second one per session for a
    # cache would halve how many sessions a server serves. The snapshots stay in the
    # host's data directory: one written on another host is only missed, never wrong.
    snapshots_at=_in_data_dir("snapshots.db"),
    load=_postgres_load,
    shared=True,
)


#: Every backend, by scheme.
BACKENDS: dict[str, Backend] = {b.scheme: b for b in (SQLITE, POSTGRES)}


def scheme_of(url: str) -> str | None:
    """The scheme of the backend whose prefix ``url`` starts with, None if none claims it."""
    for b in BACKENDS.values():
        if url.startswith(b.prefixes):
            return b.scheme
    return None
