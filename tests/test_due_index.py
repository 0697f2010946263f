"""The index of due times over a real SQLite log: it folds only timer events, keeps the
earliest first, checkpoints where it got to, and a reopened index goes on from there."""

from __future__ import annotations

import pathlib

from actors._runtime.heap import give_back
from projections import DueIndex
from spine import Event, Kind, SqliteLog


def _set(tid: str, due: float) -> Event:
    return Event(kind=Kind.TIMER_SET, text="x", extra={"timer": tid, "due": due})


def _fired(tid: str, due: float, nxt: float | None) -> Event:
    return Event(kind=Kind.TIMER_FIRED, extra={"timer": tid, "due": due, "next": nxt})


def test_the_index_folds_timer_events_and_survives_a_reopen(tmp_path: pathlib.Path) -> None:
    log = SqliteLog(tmp_path / "spine.db")
    try:
        idx = DueIndex(log, tmp_path / "timers.db")
        log.append("a", [_set("t1", 50.0), Event(kind=Kind.USER_MESSAGE, text="hi")])
        log.append("b", [_set("t1", 20.0), _set("t2", 70.0)])
        assert idx.catch_up() == {"a", "b"}
        assert idx.next_due() == 20.0 and idx.due(49.0) == ["b"] and idx.due(60.0) == ["b", "a"]
        assert idx.catch_up() == set()  # nothing new: no read of the log's timer kinds
        log.append("b", [_fired("t1", 20.0, 80.0)])
        log.append("a", [Event(kind=Kind.TIMER_CANCELLED, extra={"timer": "t1"})])
        idx.catch_up()
        assert idx.timers("b") == {"t1": 80.0, "t2": 70.0} and idx.timers("a") == {}
        assert idx.next_due() == 70.0
        position = idx.position
        idx.close()
        again = DueIndex(log, tmp_path / "timers.db")
        assert again.position == position == log.last_position()
        assert again.timers("b") == {"t1": 80.0, "t2": 70.0} and len(again) == 2
        log.append("b", [_fired("t2", 70.0, None)])
        assert again.catch_up() == {"b"} and again.timers("b") == {"t1": 80.0}
        again.close()
    finally:
        log.close()


def test_a_long_backlog_is_folded_page_by_page(tmp_path: pathlib.Path) -> None:
    log = SqliteLog(tmp_path / "spine.db")
    try:
        for i in range(25):
            log.append(f"s{i}", [_set(f"t{j}", float(i * 100 + j)) for j in range(100)])
        idx = DueIndex(log, tmp_path / "timers.db")
        idx.catch_up()
        assert len(idx) == 2500 and idx.next_due() == 0.0
        assert idx.due(150.0) == ["s0", "s1"]
        idx.close()
    finally:
        log.close()


def test_the_runner_asks_per_session_not_per_timer(tmp_path: pathlib.Path) -> None:
    """Thousands of timers overdue after an outage: `entries` and `due` name each session
    once, by its earliest timer, and follow that earliest one as it fires or is cancelled
    (the Runner re-arms on every firing; walking every timer there stalled it)."""
    log = SqliteLog(tmp_path / "spine.db")
    try:
        for i in range(20):
            log.append(f"s{i}", [_set(f"t{j}", float(i + j * 100)) for j in range(50)])
        idx = DueIndex(log, tmp_path / "timers.db")
        idx.catch_up()
        assert len(idx) == 1000
        assert list(idx.entries()) == [(float(i), f"s{i}") for i in range(20)]
        assert idx.due(1e9) == [f"s{i}" for i in range(20)] and idx.due(4.5) == [
            f"s{i}" for i in range(5)
        ]
        log.append("s0", [_fired("t0", 0.0, None)])
        log.append("s1", [Event(kind=Kind.TIMER_CANCELLED, extra={"timer": "t0"})])
        log.append("s2", [_fired("t0", 2.0, 0.5)])  # moved earlier: still its head
        idx.catch_up()
        heads = dict((sid, due) for due, sid in idx.entries())
        assert heads["s0"] == 100.0 and heads["s1"] == 101.0 and heads["s2"] == 0.5
        assert idx.next_due() == 0.5 and idx.due(3.0) == ["s2", "s3"]
        for j in range(50):
            log.append("s5", [Event(kind=Kind.TIMER_CANCELLED, extra={"timer": f"t{j}"})])
        idx.catch_up()
        assert "s5" not in {sid for _, sid in idx.entries()} and idx.timers("s5") == {}
        assert len(list(idx.entries())) == 19 and len(idx) == 948
        idx.close()
    finally:
        log.close()


def test_memory_holds_each_sessions_earliest_only(tmp_path: pathlib.Path) -> None:
    """Thousands of timers: the file holds them all, memory one head per session; what
    the Runner asks beyond the heads is read from the file, the caches given back."""
    log = SqliteLog(tmp_path / "spine.db")
    try:
        for i in range(10):
            log.append(f"s{i}", [_set(f"t{j}", float(i + j * 10)) for j in range(300)])
        idx = DueIndex(log, tmp_path / "timers.db")
        idx.catch_up()
        assert len(idx) == 3000 and len(idx._head) == 10 and len(idx._heads) == 10
        assert idx.next_after("s3", 3.0) == 13.0 and idx.next_after("s3", 1e9) is None
        assert idx.next_after("nobody", 0.0) is None
        assert len(idx.timers("s3")) == 300
        idx.release_memory()  # and the log's; the index answers as before
        assert idx.next_due() == 0.0 and len(idx) == 3000
        idx.close()
        again = DueIndex(log, tmp_path / "timers.db")
        assert len(again) == 3000 and again.next_due() == 0.0 and len(again._head) == 10
        again.close()
    finally:
        log.close()


def test_memory_is_given_back_and_the_log_reads_on(tmp_path: pathlib.Path) -> None:
    """The heap (gc, and malloc_trim where glibc has it) and the log's page caches are
    given back; nothing they held was needed: the log and the index answer as before."""
    log = SqliteLog(tmp_path / "spine.db")
    try:
        log.append("s", [_set("t", 5.0)])
        idx = DueIndex(log, tmp_path / "timers.db")
        idx.catch_up()
        log.release_memory()
        give_back()
        assert log.last_seq("s") == 1 and idx.timers("s") == {"t": 5.0}
        idx.close()
    finally:
        log.close()
    log.release_memory()  # closed: nothing to give back, and no error
