"""The checkpoint and snapshot stores of every backend, against `spine.testing`'s contracts,
and the backend registry that chooses them by URL scheme."""

from __future__ import annotations

import pathlib
import pickle
import sqlite3

import pytest

import spine
from spine import (
    BACKENDS,
    CheckpointBusyError,
    CheckpointStore,
    InvalidArgumentError,
    LogSpec,
    Snapshot,
    SnapshotStore,
    backend,
    checkpoints_at,
    open_checkpoints,
    open_log,
    open_snapshots,
    snapshots_at,
)
from spine.testing import CheckpointContract, SnapshotContract


class TestSqliteCheckpoints(CheckpointContract):
    def new_store(self, tmp_path: pathlib.Path) -> CheckpointStore:
        return open_checkpoints(tmp_path / "projections.db")


class TestSqliteCheckpointsOpenedByUrl(CheckpointContract):
    def new_store(self, tmp_path: pathlib.Path) -> CheckpointStore:
        return open_checkpoints(LogSpec.sqlite(tmp_path / "projections.db").url)


class TestPostgresCheckpoints(CheckpointContract):
    url = ""

    @pytest.fixture(autouse=True)
    def _schema(self, pg_url: str) -> None:
        self.url = pg_url

    def new_store(self, tmp_path: pathlib.Path) -> CheckpointStore:
        return open_checkpoints(self.url)

    def test_a_second_writer_is_told_busy_until_the_first_is_gone(
        self, store: CheckpointStore
    ) -> None:
        g = store.begin_generation("v1")
        store.commit(g.gen, 3, [("a", b"x")], complete=True)
        with pytest.raises(CheckpointBusyError, match="another reducer"):
            open_checkpoints(self.url)
        store.close()
        with open_checkpoints(self.url) as second:
            assert second.current() == g.__class__(
                gen=g.gen, version="v1", position=3, complete=True
            )


class TestSqliteSnapshots(SnapshotContract):
    def new_store(self, tmp_path: pathlib.Path) -> SnapshotStore:
        return open_snapshots(tmp_path / "snapshots.db")


class TestPostgresSnapshots(SnapshotContract):
    url = ""

    @pytest.fixture(autouse=True)
    def _schema(self, pg_url: str) -> None:
        self.url = pg_url

    def new_store(self, tmp_path: pathlib.Path) -> SnapshotStore:
        return open_snapshots(self.url)


# -- stored bytes written before the stores moved into the spine -------------------------


def test_a_checkpoint_file_in_the_first_format_is_read_and_written(
    tmp_path: pathlib.Path,
) -> None:
    """The tables a projection has always written (created here by hand) are the store's."""
    path = tmp_path / "projections.db"
    c = sqlite3.connect(path)
    c.executescript(
        "CREATE TABLE generations (gen INTEGER PRIMARY KEY, version TEXT NOT NULL, "
        "position INTEGER NOT NULL, complete INTEGER NOT NULL, skipped INTEGER NOT NULL "
        "DEFAULT 0); CREATE TABLE state (gen INTEGER NOT NULL, stream TEXT NOT NULL, "
        "body BLOB NOT NULL, PRIMARY KEY (gen, stream)) WITHOUT ROWID;"
        "INSERT INTO generations VALUES (3, 'v7', 42, 1, 1);"
        "INSERT INTO state VALUES (3, 's-1', x'00ff10');"
    )
    c.commit()
    c.close()
    with open_checkpoints(path) as store:
        current = store.current()
        assert current is not None and (current.gen, current.version) == (3, "v7")
        assert (current.position, current.skipped) == (42, 1)
        assert store.load_one(3, "s-1") == b"\x00\xff\x10"
        store.commit(3, 43, [("s-2", b"new")])
    with sqlite3.connect(path) as c:
        assert c.execute("SELECT position FROM generations").fetchall() == [(43,)]
        assert c.execute("SELECT stream FROM state ORDER BY stream").fetchall() == [
            ("s-1",),
            ("s-2",),
        ]


def test_a_snapshot_file_in_the_first_format_is_read(tmp_path: pathlib.Path) -> None:
    """The table a session has always written its snapshots to is the store's, both ways."""
    path = tmp_path / "snapshots.db"
    body = pickle.dumps({"any": "pickle"})
    with sqlite3.connect(path) as c:
        c.execute(
            "CREATE TABLE snapshots (session_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, "
            "version INTEGER NOT NULL, state BLOB NOT NULL)"
        )
        c.execute("INSERT INTO snapshots VALUES ('s-1', 1200, 6, ?)", (body,))
    c.close()
    with open_snapshots(path) as store:
        assert store.load("s-1") == Snapshot("s-1", 1200, 6, body)
        store.save(Snapshot("s-2", 5, 6, b"x"))
    with sqlite3.connect(path) as c:
        assert c.execute("SELECT * FROM snapshots WHERE session_id='s-2'").fetchall() == [
            ("s-2", 5, 6, b"x")
        ]
    c.close()


def test_a_snapshot_row_of_the_wrong_types_reads_as_none(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "snapshots.db"
    open_snapshots(path).close()
    with sqlite3.connect(path) as c:
        c.execute("INSERT INTO snapshots VALUES ('s', 'x', 6, 'text, not bytes')")
    c.close()
    with open_snapshots(path) as store:
        assert store.load("s") is None


def test_an_unopenable_store_raises_the_spines_errors(tmp_path: pathlib.Path) -> None:
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(spine.CheckpointError, match="cannot open checkpoint file"):
        open_checkpoints(tmp_path / "dir.db")
    with pytest.raises(spine.StorageError, match="cannot open snapshot file"):
        open_snapshots(tmp_path / "dir.db")


# -- the registry ---------------------------------------------------------------------


def test_every_backend_is_chosen_by_its_own_prefixes() -> None:
    prefixes = [p for b in BACKENDS.values() for p in b.prefixes]
    assert len(prefixes) == len(set(prefixes))
    for b in BACKENDS.values():
        for p in b.prefixes:
            assert backend(p + "somewhere") is b
    assert backend("plain/file.db") is BACKENDS["sqlite"]
    assert backend("postgres://u@h/db") is BACKENDS["postgresql"]
    assert repr(BACKENDS["sqlite"]) == "<Backend sqlite>"


def test_an_unknown_scheme_is_refused_by_every_opener_naming_the_url(
    tmp_path: pathlib.Path,
) -> None:
    url = "mysql://root:secret@localhost/db"
    for opener in (open_log, open_checkpoints, open_snapshots, spine.load_backend, backend):
        with pytest.raises(InvalidArgumentError, match=r"mysql://root:\*\*\*@localhost") as e:
            opener(url)
        assert "secret" not in str(e.value)
        assert "sqlite:///" in str(e.value) and "postgresql://" in str(e.value)


def test_where_a_runtime_keeps_checkpoints_and_snapshots_follows_its_log() -> None:
    data = "/srv/vertebra"
    sqlite = LogSpec.sqlite(f"{data}/spine.db")
    assert checkpoints_at(sqlite, data) == LogSpec.sqlite(f"{data}/projections.db")
    assert snapshots_at(sqlite, data) == LogSpec.sqlite(f"{data}/snapshots.db")
    pg = "postgresql://app@db.internal:5432/vertebra"
    # Checkpoints beside the shared log (a reducer on any host resumes them); snapshots
    # stay a local cache, as they always were.
    assert checkpoints_at(pg, data) == LogSpec(pg)
    assert snapshots_at(pg, data) == LogSpec.sqlite(f"{data}/snapshots.db")
    assert backend(pg).shared and not backend(sqlite).shared


def test_an_open_checkpoint_store_is_passed_through(tmp_path: pathlib.Path) -> None:
    with open_checkpoints(tmp_path / "ck.db") as store:
        assert open_checkpoints(store) is store
