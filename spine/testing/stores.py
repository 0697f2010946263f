"""`CheckpointContract` and `SnapshotContract`: what every backend's checkpoint and snapshot
stores owe their callers (a projection's reducer, a session), as pytest classes to
subclass. A backend's test module implements `new_store` (a store at a location of the
test's own) and `reopen` (a fresh store at the same location, after the first is closed)."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from .. import CheckpointStore, InvalidArgumentError, Snapshot, SnapshotStore

#: Bytes that a text column, an encoding or a NUL-terminated copy would change.
AWKWARD = bytes(range(256)) + b"\x00tail\x00"


class _StoreUnderTest:
    def new_store(self, tmp_path: pathlib.Path) -> Any:
        raise NotImplementedError

    def reopen(self, tmp_path: pathlib.Path) -> Any:
        """The same store as a fresh opener sees it (called once the first is closed)."""
        return self.new_store(tmp_path)

    @pytest.fixture
    def store(self, tmp_path: pathlib.Path) -> Iterator[Any]:
        s = self.new_store(tmp_path)
        try:
            yield s
        finally:
            s.close()


class CheckpointContract(_StoreUnderTest):
    """Generations, their rows and their positions, committed atomically."""

    def test_a_new_store_has_no_generation(self, store: CheckpointStore) -> None:
        assert isinstance(store, CheckpointStore)
        assert store.generations() == []
        assert store.current() is None and store.pending() is None

    def test_a_begun_generation_is_pending_and_empty(self, store: CheckpointStore) -> None:
        g = store.begin_generation("v1")
        assert (g.version, g.position, g.complete, g.skipped) == ("v1", 0, False, 0)
        assert store.generations() == [g] and store.pending() == g and store.generation(g.gen) == g
        assert store.current() is None and store.generation(g.gen + 1) is None
        assert list(store.load(g.gen)) == []

    def test_committed_rows_and_position_read_back_byte_for_byte(
        self, store: CheckpointStore
    ) -> None:
        g = store.begin_generation("v1")
        store.commit(g.gen, 7, [("a", AWKWARD), ("b", b"")], skipped=2)
        assert sorted(store.load(g.gen)) == [("a", AWKWARD), ("b", b"")]
        assert store.load_one(g.gen, "a") == AWKWARD and store.load_one(g.gen, "zz") is None
        got = store.generation(g.gen)
        assert got is not None and (got.position, got.skipped, got.complete) == (7, 2, False)

    def test_a_commit_replaces_the_rows_it_names_and_keeps_the_others(
        self, store: CheckpointStore
    ) -> None:
        g = store.begin_generation("v1")
        store.commit(g.gen, 1, [("a", b"a1"), ("b", b"b1")])
        store.commit(g.gen, 2, [("a", b"a2")])
        assert dict(store.load(g.gen)) == {"a": b"a2", "b": b"b1"}

    def test_completing_a_rebuild_drops_every_older_generation_at_once(
        self, store: CheckpointStore
    ) -> None:
        old = store.begin_generation("v1")
        store.commit(old.gen, 5, [("a", b"old")], complete=True)
        new = store.begin_generation("v2")
        assert new.gen > old.gen
        # Beside the complete one, a rebuild is pending and does not replace it yet.
        store.commit(new.gen, 3, [("b", b"new")])
        assert store.current() == store.generation(old.gen) and store.pending() is not None
        assert store.load_one(old.gen, "a") == b"old"
        store.commit(new.gen, 6, [], complete=True)
        current = store.current()
        assert current is not None and (current.gen, current.position) == (new.gen, 6)
        assert [g.gen for g in store.generations()] == [new.gen] and store.pending() is None
        assert list(store.load(old.gen)) == [] and dict(store.load(new.gen)) == {"b": b"new"}

    def test_a_new_generation_drops_a_stale_pending_one_and_its_rows(
        self, store: CheckpointStore
    ) -> None:
        done = store.begin_generation("v1")
        store.commit(done.gen, 1, [("a", b"1")], complete=True)
        stale = store.begin_generation("v2")
        store.commit(stale.gen, 1, [("a", b"stale")])
        fresh = store.begin_generation("v3")
        assert [g.gen for g in store.generations()] == [done.gen, fresh.gen]
        # Its number may be the stale one's again: none of the stale rows come with it.
        assert fresh.gen > done.gen and list(store.load(fresh.gen)) == []
        assert store.pending() == fresh

    def test_a_commit_that_fails_midway_leaves_rows_and_position_as_they_were(
        self, store: CheckpointStore
    ) -> None:
        g = store.begin_generation("v1")
        store.commit(g.gen, 1, [("a", b"kept")])

        def rows() -> Iterator[tuple[str, bytes]]:
            yield "a", b"lost"
            yield "b", b"lost"
            raise ValueError("the fold failed")

        with pytest.raises(ValueError, match="the fold failed"):
            store.commit(g.gen, 9, rows(), complete=True)
        got = store.generation(g.gen)
        assert got is not None and (got.position, got.complete) == (1, False)
        assert dict(store.load(g.gen)) == {"a": b"kept"}

    def test_what_was_committed_is_there_when_reopened(self, tmp_path: pathlib.Path) -> None:
        first = self.new_store(tmp_path)
        try:
            done = first.begin_generation("v1")
            first.commit(done.gen, 4, [("a", AWKWARD)], complete=True)
            rebuild = first.begin_generation("v2")
            first.commit(rebuild.gen, 2, [("a", b"half")])
            before = first.generations()
        finally:
            first.close()
        again = self.reopen(tmp_path)
        try:
            assert again.generations() == before
            assert again.load_one(done.gen, "a") == AWKWARD
            assert again.pending() == again.generation(rebuild.gen)
        finally:
            again.close()


class SnapshotContract(_StoreUnderTest):
    """The last snapshot saved per stream, its seq, version and bytes intact."""

    def test_a_stream_never_saved_has_no_snapshot(self, store: SnapshotStore) -> None:
        assert isinstance(store, SnapshotStore)
        assert store.load("never") is None

    def test_a_saved_snapshot_reads_back_byte_for_byte(self, store: SnapshotStore) -> None:
        snap = Snapshot("s-1", 1000, 6, AWKWARD)
        store.save(snap)
        assert store.load("s-1") == snap

    def test_a_save_replaces_the_streams_previous_snapshot_only(self, store: SnapshotStore) -> None:
        store.save(Snapshot("a", 10, 1, b"a10"))
        store.save(Snapshot("b", 20, 1, b"b20"))
        store.save(Snapshot("a", 30, 2, b"a30"))
        assert store.load("a") == Snapshot("a", 30, 2, b"a30")
        assert store.load("b") == Snapshot("b", 20, 1, b"b20")

    def test_a_large_and_an_empty_body_keep_their_bytes(self, store: SnapshotStore) -> None:
        big = AWKWARD * 4096  # about a megabyte
        store.save(Snapshot("big", 1, 1, big))
        store.save(Snapshot("empty", 1, 1, b""))
        assert store.load("big") == Snapshot("big", 1, 1, big)
        assert store.load("empty") == Snapshot("empty", 1, 1, b"")

    def test_a_snapshot_refuses_a_body_that_is_not_bytes(self) -> None:
        with pytest.raises(InvalidArgumentError, match="body is bytes"):
            Snapshot("s", 1, 1, "text")  # type: ignore[arg-type]

    def test_what_was_saved_is_there_when_reopened(self, tmp_path: pathlib.Path) -> None:
        first = self.new_store(tmp_path)
        try:
            first.save(Snapshot("s", 5, 3, AWKWARD))
        finally:
            first.close()
        again = self.reopen(tmp_path)
        try:
            assert again.load("s") == Snapshot("s", 5, 3, AWKWARD)
        finally:
            again.close()
