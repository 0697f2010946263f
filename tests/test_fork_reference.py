"""Forks by reference seen by everything above the log's reads: the status and index
projection, the timers' due index, seals and their verification, recovery of a damaged
file, a parent closed after the fork, and forks made by copying before there were
references (the log contract in spine.testing covers the reads themselves)."""

from __future__ import annotations

import pathlib

import attrs
import pytest

from projections import StatusReducer
from projections._due import DueIndex
from spine import Event, Kind, Log, MemoryLog, SqliteLog, recover_sqlite
from spine.seal import (
    SigningKey,
    merkle_root,
    prefix_root,
    row_leaf_hash,
    seal_stream,
    verify_stream,
)


def _conversation(log: Log, sid: str, turns: int) -> None:
    events: list[Event] = [Event(kind=Kind.LIFECYCLE, phase="opened")]
    for t in range(1, turns + 1):
        events += [
            Event(kind=Kind.USER_MESSAGE, text=f"q{t}"),
            Event(kind=Kind.TURN_STARTED, turn=t),
            Event(kind=Kind.ASSISTANT, turn=t, text=f"a{t}"),
            Event(kind=Kind.TURN_COMPLETED, turn=t, stop_reason="end_turn"),
        ]
    log.append(sid, events)


@pytest.fixture
def log(tmp_path: pathlib.Path) -> SqliteLog:
    out = SqliteLog(tmp_path / "spine.db")
    yield out
    out.close()


def _status_at(log: Log, tmp_path: pathlib.Path, name: str) -> StatusReducer:
    r = StatusReducer(log, tmp_path / f"{name}.db", batch=7)
    r.catch_up()
    return r


def test_the_status_projection_folds_a_fork_from_its_parents_prefix(
    log: SqliteLog, tmp_path: pathlib.Path
) -> None:
    _conversation(log, "parent", 3)
    at = log.last_seq("parent")
    log.fork("child", "parent", at)
    _conversation(log, "parent", 2)  # the parent goes on: none of it is the child's
    log.append("child", [Event(kind=Kind.USER_MESSAGE, text="mine")])
    r = _status_at(log, tmp_path, "p")
    try:
        parent, child = r.status("parent"), r.status("child")
        assert parent is not None and child is not None
        assert (parent.turns, parent.messages) == (5, 5)
        assert (child.turns, child.messages) == (3, 4)
        info = r.info("child")
        assert info is not None and info.last_seq == at + 2
    finally:
        r.close()
    # A rebuild from a fresh checkpoint, in pages that split the prefix, says the same.
    again = _status_at(log, tmp_path, "q")
    try:
        assert again.status("child") == child
    finally:
        again.close()


def test_a_fork_keeps_the_timers_its_prefix_set(log: SqliteLog, tmp_path: pathlib.Path) -> None:
    log.append("parent", [Event(kind=Kind.TIMER_SET, extra={"timer": "t1", "due": 100.0})])
    log.fork("child", "parent", 1)
    log.append("parent", [Event(kind=Kind.TIMER_CANCELLED, extra={"timer": "t1"})])
    due = DueIndex(log, tmp_path / "due.db")
    assert due.catch_up() == {"parent", "child"}
    assert due.next_due() == 100.0  # the child's; the parent cancelled its own


def test_a_forks_seal_covers_its_prefix_and_verifies(log: SqliteLog) -> None:
    key = SigningKey.generate()
    _conversation(log, "parent", 2)
    seal_stream(log, "parent", key)
    at = log.last_seq("parent")
    # The link names the parent: the parent's seal in the prefix verifies as the parent's.
    log.fork("child", "parent", at, [Event(kind=Kind.USER_MESSAGE, text="mine")])
    log.fork("grandchild", "child", at + 2)
    seal = seal_stream(log, "child", key)
    assert (seal.first, seal.last) == (at, at + 2)  # after the parent's seal, which covers 1..at-1
    report = verify_stream(log, "child", key.public_key)
    assert report.ok, report.summary()
    seal_stream(log, "grandchild", key)
    report = verify_stream(log, "grandchild", key.public_key)
    assert report.ok, report.summary()


def test_recovering_a_damaged_file_keeps_a_fork_a_fork(
    log: SqliteLog, tmp_path: pathlib.Path
) -> None:
    _conversation(log, "parent", 2)
    log.fork("child", "parent", 5, [Event(kind=Kind.USER_MESSAGE, text="mine")])
    before = log.read("child", 0, None)
    report = recover_sqlite(tmp_path / "spine.db", tmp_path / "copy.db")
    assert report.lost == ()
    copy = SqliteLog(tmp_path / "copy.db")
    try:
        assert [(r.seq, r.payload) for r in copy.read("child", 0, None)] == [
            (r.seq, r.payload) for r in before
        ]
    finally:
        copy.close()


def test_closing_the_parent_after_the_fork_leaves_the_fork_as_it_was() -> None:
    """The log removes no row, so a parent cannot vanish from under a fork; what a closed
    (or failed, or passivated) parent appends lies after the fork seq."""
    log = MemoryLog()
    _conversation(log, "parent", 1)
    log.fork("child", "parent", 5)
    log.append("parent", [Event(kind=Kind.LIFECYCLE, phase="closed")])
    assert [e.kind for e in log.read_events("child")][-2:] == [
        Kind.TURN_COMPLETED,
        Kind.SESSION_FORKED,
    ]


def test_a_fork_made_by_copying_reads_as_it_always_did(log: SqliteLog) -> None:
    _conversation(log, "parent", 1)
    copied = [attrs.evolve(r.event(), seq=0) for r in log.read("parent", 0, None)]
    prov = Event(kind=Kind.PROPERTIES, properties={"fork.parent": "parent", "fork.seq": "5"})
    log.append("old-fork", [*copied, prov], expected_seq=0)
    assert log.fork_link("old-fork") is None
    assert [e.text for e in log.read_events("old-fork")][:5] == [
        e.text for e in log.read_events("parent")
    ]
    log.fork("new-fork", "old-fork", 6)  # and a copy can be forked by reference
    assert len(log.read_events("new-fork")) == 7


class _Counting:
    """A log whose per-stream reads count the rows they return."""

    def __init__(self, log: Log) -> None:
        self.log, self.rows = log, 0

    def read(self, *args: object, **kw: object) -> list[object]:
        out = self.log.read(*args, **kw)  # type: ignore[arg-type]
        self.rows += len(out)
        return out  # type: ignore[return-value]


def test_a_forks_root_reads_from_the_newest_seal_not_the_whole_prefix(log: SqliteLog) -> None:
    """With a seal every 1000 events, the root at any seq reads the seals near it and at
    most the 1000 rows after the newest one (a stream never sealed is read whole)."""
    key = SigningKey.generate()
    events = [Event(kind=Kind.PROPERTIES, properties={"n": str(i)}) for i in range(1000)]
    for _ in range(10):
        log.append("parent", events)
        seal_stream(log, "parent", key)
    at = log.last_seq("parent") - 3
    rows = log.read("parent", 0, at)
    want = merkle_root([row_leaf_hash(r.payload, r.version) for r in rows])
    counting = _Counting(log)
    assert prefix_root(counting, "parent", at) == want  # type: ignore[arg-type]
    assert counting.rows < 1100
    log.append("never-sealed", events)
    counting.rows = 0
    prefix_root(counting, "never-sealed", 900)  # type: ignore[arg-type]
    assert counting.rows == 900
    log.fork("child", "parent", at)
    assert log.read("child", at, 1)[0].event().extra["root"] == want.hex()
