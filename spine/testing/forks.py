"""`ForkContract`: a fork by reference reads as its parent's prefix, then its own events."""

from __future__ import annotations

import pytest

from .. import ConflictError, InvalidArgumentError, Kind, Log, subscribe
from ..seal import SigningKey, merkle_root, prefix_root, row_leaf_hash, seal_stream, verify_stream
from .events import WAIT, ev, snapshot, texts


def _parent(log: Log, n: int = 6, stream: str = "parent") -> None:
    log.append(stream, [ev(f"p{i}") for i in range(1, n + 1)])


class ForkContract:
    """What `Log.fork` owes: no copy, the parent's prefix through every per-stream read,
    none of the parent's later events, and the fork's own rows after it."""

    def test_fork_reads_the_parents_prefix_then_its_own(self, log: Log) -> None:
        _parent(log)
        done = log.fork("child", "parent", 4, [ev("own")])
        assert (done.first_seq, done.last_seq) == (5, 6)
        assert [r.kind for r in done.records] == [Kind.SESSION_FORKED, Kind.ASSISTANT]
        got = log.read("child", 0, None)
        assert texts(got) == ["p1", "p2", "p3", "p4", "", "own"]
        assert [r.seq for r in got] == [1, 2, 3, 4, 5, 6]
        assert {r.stream for r in got} == {"child"}
        # The prefix is the parent's rows: same bytes, same positions.
        parent = log.read("parent", 0, 4)
        assert [(r.payload, r.position) for r in got[:4]] == [
            (r.payload, r.position) for r in parent
        ]
        positions = [r.position for r in got]
        assert positions == sorted(positions)
        assert log.last_seq("child") == 6
        assert log.fork_link("child") == ("parent", 4)
        assert log.fork_link("parent") is None
        assert [e.text for e in log.read_events("child")] == texts(got)
        assert [e.seq for e in log.read_events("child", 3)] == [4, 5, 6]

    def test_the_parents_later_events_never_reach_the_fork(self, log: Log) -> None:
        _parent(log)
        log.fork("child", "parent", 3)
        log.append("parent", [ev("later")])
        log.append("child", [ev("mine")], expected_seq=4)
        assert texts(log.read("child", 0, None)) == ["p1", "p2", "p3", "", "mine"]
        assert [e.text for e in log.read_events("child")] == ["p1", "p2", "p3", "", "mine"]
        with pytest.raises(ConflictError):
            log.append("child", [ev("stale")], expected_seq=0)

    def test_pages_and_kinds_cross_the_fork_seq(self, log: Log) -> None:
        _parent(log)
        log.append("parent", [ev("q", kind=Kind.USER_MESSAGE)])
        log.fork("child", "parent", 7, [ev("u", kind=Kind.USER_MESSAGE), ev("own")])
        pages = [log.read("child", after, 3) for after in (0, 3, 6, 9)]
        assert [[r.seq for r in p] for p in pages] == [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10]]
        users = log.read("child", 0, None, kinds=[Kind.USER_MESSAGE])
        assert [(r.seq, r.event().text) for r in users] == [(7, "q"), (9, "u")]
        assert [r.seq for r in log.read("child", 0, 1, kinds=[Kind.USER_MESSAGE])] == [7]

    def test_a_fork_of_a_fork_reads_through_to_the_stored_rows(self, log: Log) -> None:
        _parent(log)
        log.fork("child", "parent", 5, [ev("c")])
        log.append("child", [ev("c2")])
        log.fork("grandchild", "child", 6, [ev("g")])
        log.append("parent", [ev("later")])
        assert texts(log.read("grandchild", 0, None)) == ["p1", "p2", "p3", "p4", "p5", "", "", "g"]
        assert texts(log.read("grandchild", 2, 3)) == ["p3", "p4", "p5"]
        assert len(log.read_events("grandchild")) == 8
        # A fork of a fork inside that fork's prefix reads the first parent's rows.
        log.fork("inside", "child", 3, [ev("i")])
        assert texts(log.read("inside", 0, None)) == ["p1", "p2", "p3", "", "i"]
        assert [e.seq for e in log.read_events("inside", 2)] == [3, 4, 5]

    def test_a_fork_stores_a_small_record_and_the_global_reads_hold_each_row_once(
        self, log: Log
    ) -> None:
        _parent(log, 50)
        before = log.last_position()
        log.fork("child", "parent", 50)
        rows = snapshot(log)
        assert log.last_position() == before + 1
        assert [r.position for r in rows] == list(range(1, len(rows) + 1))
        assert [(r.stream, r.kind) for r in rows[-1:]] == [("child", Kind.SESSION_FORKED)]
        assert len(rows[-1].payload) < 200
        assert [s.stream for s in log.streams()] == ["parent", "child"]
        assert [s.last_seq for s in log.streams()] == [50, 51]

    def test_the_link_names_the_parents_root_and_the_forks_seal_proves_its_prefix(
        self, log: Log
    ) -> None:
        key = SigningKey.generate()
        _parent(log, 30)
        seal_stream(log, "parent", key)  # seqs 1..30, stored at 31 with its frontier
        log.append("parent", [ev(f"q{i}") for i in range(6)])  # 32..37
        seal_stream(log, "parent", key, last=35)  # 31..35, stored at 38

        def root(stream: str, at: int) -> str:
            rows = log.read(stream, 0, at)
            return merkle_root([row_leaf_hash(r.payload, r.version) for r in rows]).hex()

        # Inside the first seal (no frontier below: the prefix is read), on a seal's
        # event, between seals, on the last seal's range end and after it.
        for at in (20, 30, 31, 33, 35, 37, 38):
            log.fork(f"at-{at}", "parent", at)
            link = log.read(f"at-{at}", at, 1)[0].event()
            assert link.extra["root"] == root("parent", at) == prefix_root(log, "parent", at).hex()
        log.fork("plain", "parent", 33, root=False)
        assert "root" not in log.read("plain", 33, 1)[0].event().extra
        # The fork's own seal covers its link (so it signs the root the link names) and
        # stores the frontier of the whole fork, prefix included: the prefix it reads
        # has the parent's root, and verification recomputes both.
        log.append("at-33", [ev("own")])
        seal = seal_stream(log, "at-33", key)
        assert seal.first <= 34 <= seal.last
        assert prefix_root(log, "at-33", 33).hex() == root("parent", 33)
        assert prefix_root(log, "at-33", seal.last).hex() == root("at-33", seal.last)
        report = verify_stream(log, "at-33", key.public_key)
        assert report.ok, report.summary()

    def test_refused_forks_write_nothing(self, log: Log) -> None:
        _parent(log, 3)
        log.append("taken", [ev("x")])
        with pytest.raises(ConflictError):
            log.fork("taken", "parent", 2)
        with pytest.raises(InvalidArgumentError, match="has 3 events"):
            log.fork("child", "parent", 4)
        with pytest.raises(InvalidArgumentError, match="has 0 events"):
            log.fork("child", "nobody", 1)
        for bad in (0, -1, True, "2"):
            with pytest.raises(InvalidArgumentError, match="at least 1"):
                log.fork("child", "parent", bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="itself"):
            log.fork("parent", "parent", 1)
        assert log.last_seq("child") == 0 and log.read("child") == []
        log.fork("child", "parent", 3)
        with pytest.raises(ConflictError):
            log.fork("child", "parent", 3)

    def test_a_subscription_catches_up_through_the_prefix_then_follows(self, log: Log) -> None:
        _parent(log, 4)
        log.fork("child", "parent", 2)
        with subscribe(log, "child", 0) as sub:
            seen = [sub.get(WAIT) for _ in range(3)]
            log.append("parent", [ev("later")])
            log.append("child", [ev("live")])
            seen.append(sub.get(WAIT))
        assert [(e.seq, e.text) for e in seen if e is not None] == [
            (1, "p1"),
            (2, "p2"),
            (3, ""),
            (4, "live"),
        ]
