"""The session's snapshot cache over the spine's snapshot store: the pickled state and its
fold version, read from the files sessions have always written."""

from __future__ import annotations

import logging
import os
import pathlib
import pickle
import sqlite3

import pytest

from actors.session.rules.state import SNAPSHOT_VERSION, SessionState
from actors.session.shell.snapshots import SnapshotStore
from spine import Snapshot, open_snapshots


def _state(seq: int = 1200) -> SessionState:
    return SessionState(session_id="s-1", last_seq=seq, metadata={"k": "v"}, turns=3)


def _write_old_file(data: pathlib.Path, seq: int, version: int, body: bytes) -> None:
    """The snapshot file as sessions wrote it before the store moved into the spine."""
    with sqlite3.connect(data / "snapshots.db") as c:
        c.execute(
            "CREATE TABLE snapshots (session_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, "
            "version INTEGER NOT NULL, state BLOB NOT NULL)"
        )
        c.execute("INSERT INTO snapshots VALUES ('s-1', ?, ?, ?)", (seq, version, body))
    c.close()


def test_a_snapshot_file_written_before_is_loaded(tmp_path: pathlib.Path) -> None:
    _write_old_file(tmp_path, 1200, SNAPSHOT_VERSION, pickle.dumps(_state()))
    store = SnapshotStore(str(tmp_path), str(tmp_path / "spine.db"))
    try:
        assert store.load("s-1") == _state()
        assert store.load("other") is None
    finally:
        store.close()


@pytest.mark.parametrize(
    ("seq", "version", "body"),
    [
        (1200, SNAPSHOT_VERSION - 1, pickle.dumps(_state())),  # another fold's shape
        (1199, SNAPSHOT_VERSION, pickle.dumps(_state())),  # its seq disagrees
        (1200, SNAPSHOT_VERSION, b"not a pickle"),
        (1200, SNAPSHOT_VERSION, pickle.dumps({"not": "a state"})),
    ],
)
def test_a_stale_or_unreadable_snapshot_means_folding_from_the_start(
    tmp_path: pathlib.Path, seq: int, version: int, body: bytes
) -> None:
    _write_old_file(tmp_path, seq, version, body)
    store = SnapshotStore(str(tmp_path), str(tmp_path / "spine.db"))
    try:
        assert store.load("s-1") is None
    finally:
        store.close()


def test_a_saved_state_is_stored_as_the_pickle_with_its_version(tmp_path: pathlib.Path) -> None:
    store = SnapshotStore(str(tmp_path), str(tmp_path / "spine.db"))
    try:
        assert store.save(_state(5))
        assert store.load("s-1") == _state(5)
    finally:
        store.close()
    with open_snapshots(tmp_path / "snapshots.db") as raw:
        snap = raw.load("s-1")
    assert snap is not None and (snap.seq, snap.version) == (5, SNAPSHOT_VERSION)
    assert pickle.loads(snap.body) == _state(5)


def test_a_state_that_cannot_be_stored_is_skipped_and_the_old_one_kept(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = SnapshotStore(str(tmp_path), str(tmp_path / "spine.db"))
    try:
        assert store.save(_state(5))
        unpicklable = SessionState(session_id="s-1", last_seq=9, metadata={"k": os})  # type: ignore[dict-item]
        with caplog.at_level(logging.WARNING, "vertebra.session"):
            assert not store.save(unpicklable)
        assert "snapshot of s-1 at seq 9 not saved" in caplog.text
        assert store.load("s-1") == _state(5)
    finally:
        store.close()


def test_sessions_on_a_postgres_spine_keep_their_snapshots_in_the_data_directory(
    tmp_path: pathlib.Path,
) -> None:
    """Where the spine's backend says: a local file beside a PostgreSQL log too (opening the
    cache connects to no server; nothing listens on port 9)."""
    store = SnapshotStore(str(tmp_path), "postgresql://nobody@127.0.0.1:9/none")
    try:
        assert store.path == str(tmp_path / "snapshots.db")
        assert store.save(_state(7))
    finally:
        store.close()
    with open_snapshots(tmp_path / "snapshots.db") as raw:
        assert raw.load("s-1") == Snapshot("s-1", 7, SNAPSHOT_VERSION, pickle.dumps(_state(7)))
