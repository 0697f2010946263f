"""StatusReducer: folding the whole log with checkpoints, resuming, rebuilding, failing."""

from __future__ import annotations

import logging
import pathlib
import random
import sqlite3
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections import (
    Fail,
    RetryThenFail,
    Skip,
    SqliteLogReader,
    StatusReducer,
    index_from,
    project,
)
from spine import (
    Event,
    Kind,
    Log,
    MemoryLog,
    Phase,
    SqliteLog,
    StorageError,
    Usage,
    history,
    open_checkpoints,
)

_KINDS = [
    (Kind.USER_MESSAGE, {"text": "hi"}),
    (Kind.ACTION_ADMITTED, {"action": "a", "trust": "t"}),
    (Kind.ACTION_COMPLETED, {"action": "a"}),
    (Kind.TURN_COMPLETED, {"usage": Usage(input_tokens=3, output_tokens=1)}),
    (Kind.EGRESS, {"host": "h", "allowed": False}),
    (Kind.CHILD_SPAWNED, {"child": "c"}),
    (Kind.CHILD_COMPLETED, {"child": "c", "result": "r"}),
    (Kind.RECORD_SEALED, {}),
    (Kind.PROPERTIES, {"properties": {"model.name": "m"}}),
    (Kind.LIFECYCLE, {"phase": Phase.DONE}),
    (Kind.ASSISTANT, {"text": "x"}),
    (Kind.CONVERGED, {"text": "done"}),
]


def fill(log: Log, events: int, sessions: int, seed: int = 1) -> None:
    """Append ``events`` mixed events over ``sessions`` streams, a few per append."""
    rng = random.Random(seed)
    left = events
    n = 0
    while left:
        k = min(left, rng.randint(1, 5))
        s = f"s{rng.randrange(sessions)}"
        batch = []
        for _ in range(k):
            n += 1
            kind, fields = _KINDS[n % len(_KINDS)]
            batch.append(Event(kind=kind, call=n % 7, **fields))  # type: ignore[arg-type]
        log.append(s, batch)
        left -= k


def expected(log: Log) -> tuple[dict[str, object], object]:
    statuses = {i.stream: project(history(log, i.stream)) for i in log.streams()}
    return statuses, index_from(log.read_all(0, None))


def assert_equals_fold_from_zero(r: StatusReducer, log: Log) -> None:
    statuses, index = expected(log)
    assert r.ready and not r.rebuilding and r.failure is None
    assert r.progress().position == log.last_position()
    assert dict(r.statuses()) == statuses
    assert r.index() == index
    for s, p in statuses.items():
        assert r.status(s) == p


@pytest.fixture
def log(db_path: pathlib.Path):  # type: ignore[no-untyped-def]
    with SqliteLog(db_path) as lg:
        yield lg


def test_a_first_start_builds_from_zero_and_equals_the_pure_fold(
    log: SqliteLog, tmp_path: pathlib.Path
) -> None:
    """Folding the whole log gives every session's project(history) and the index."""
    fill(log, 600, 7)
    r = StatusReducer(log, tmp_path / "ck.db", batch=64)
    assert r.rebuilding and not r.ready
    assert r.status("s0") is None and len(r.index()) == 0
    r.catch_up()
    assert_equals_fold_from_zero(r, log)


def test_live_events_are_folded_and_committed_per_batch(
    log: SqliteLog, tmp_path: pathlib.Path
) -> None:
    """After catching up, new appends are folded by the next step and survive a reopen."""
    fill(log, 100, 3)
    r = StatusReducer(log, tmp_path / "ck.db", batch=50)
    r.catch_up()
    log.append("s1", [Event(kind=Kind.USER_MESSAGE, text="late")])
    res = r.step()
    assert res.folded == 1 and not res.more
    info = r.info("s1")
    assert info is not None and info.last_seq == log.last_seq("s1")
    r.close()
    again = StatusReducer(log, tmp_path / "ck.db", batch=50)
    assert not again.rebuilding
    assert_equals_fold_from_zero(again, log)


def test_a_reducer_abandoned_mid_rebuild_resumes_from_its_checkpoint(
    log: SqliteLog, tmp_path: pathlib.Path
) -> None:
    """A crash mid-fold (no close) leaves a checkpoint a new reducer resumes to the same state."""
    fill(log, 900, 9)
    first = StatusReducer(log, tmp_path / "ck.db", batch=40, rebuild_commit_every=100)
    for _ in range(8):
        first.step()
    # Crash: drop it without closing, mid-rebuild.
    assert first.rebuilding
    del first
    second = StatusReducer(log, tmp_path / "ck.db", batch=40, rebuild_commit_every=100)
    p = second.progress()
    assert p.rebuilding and 0 < p.rebuild_position < log.last_position()
    second.catch_up()
    assert_equals_fold_from_zero(second, log)


def test_a_code_version_change_rebuilds_while_queries_read_the_old_complete_state(
    log: SqliteLog, tmp_path: pathlib.Path
) -> None:
    """A new version rebuilds automatically; until done, queries see the old state, marked stale."""
    fill(log, 300, 4)
    old = StatusReducer(log, tmp_path / "ck.db", version="v1")
    old.catch_up()
    before = dict(old.statuses())
    old.close()
    log.append("s0", [Event(kind=Kind.USER_MESSAGE, text="while down")])
    new = StatusReducer(log, tmp_path / "ck.db", batch=50, version="v2")
    assert new.rebuilding and new.ready and new.progress().stale
    while new.rebuilding:
        # Never half-folded: the complete v1 state answers until v2 is complete.
        assert dict(new.statuses()) == before
        new.step()
    assert not new.progress().stale
    assert_equals_fold_from_zero(new, log)
    with open_checkpoints(tmp_path / "ck.db") as store:
        assert [g.version for g in store.generations()] == ["v2"]


def test_a_requested_rebuild_reports_progress_and_swaps_in_at_the_end(
    log: SqliteLog, tmp_path: pathlib.Path
) -> None:
    """request_rebuild folds a fresh generation from 0; progress climbs to the target."""
    fill(log, 400, 5)
    r = StatusReducer(log, tmp_path / "ck.db", batch=30)
    r.catch_up()
    gen = r.progress().generation
    r.request_rebuild()
    seen = []
    while r.rebuilding:
        seen.append(r.progress().rebuild_position)
        r.step()
    assert seen == sorted(seen) and seen[0] == 0
    assert r.progress().generation == gen + 1
    assert_equals_fold_from_zero(r, log)


def test_the_reducer_works_over_any_log(tmp_path: pathlib.Path) -> None:
    """A MemoryLog goes through Log.read_all and gives the same state."""
    mem = MemoryLog()
    fill(mem, 300, 6)
    r = StatusReducer(mem, tmp_path / "ck.db", batch=25)
    r.catch_up()
    assert_equals_fold_from_zero(r, mem)


def test_a_tool_input_that_orjson_refuses_folds_like_any_other_event(
    log: SqliteLog, tmp_path: pathlib.Path
) -> None:
    """A tool call's raw input is stored as written; JSON orjson will not parse still folds."""
    log.append("s", [Event(kind=Kind.USER_MESSAGE, text="hi")])
    log.append("s", [Event(kind=Kind.TOOL_CALL, tool="calc", input='{"x":1e400}')])
    log.append("t", [Event(kind=Kind.TOOL_CALL, input="[123456789012345678901234567890]")])
    r = StatusReducer(log, tmp_path / "ck.db", batch=2)
    r.catch_up()
    assert_equals_fold_from_zero(r, log)


def _insert_bad_row(path: pathlib.Path, stream: str, payload: bytes) -> int:
    c = sqlite3.connect(path)
    pos = c.execute("SELECT MAX(position) FROM events").fetchone()[0] + 1
    seq = 1 + (
        c.execute("SELECT MAX(seq) FROM events WHERE stream=?", (stream,)).fetchone()[0] or 0
    )
    c.execute(
        "INSERT INTO events (position, stream, seq, kind, version, payload) VALUES (?,?,?,?,1,?)",
        (pos, stream, seq, "user.message", payload),
    )
    c.execute(
        "INSERT OR REPLACE INTO streams (stream, last_seq, last_position, first_position) "
        "VALUES (?,?,?,?)",
        (stream, seq, pos, pos),
    )
    c.commit()
    c.close()
    return pos


def test_fail_policy_stops_before_the_bad_event_and_names_it(
    log: SqliteLog, db_path: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """Under Fail the state stays at the event before the bad one, and the failure says where."""
    fill(log, 50, 2)
    good_end = log.last_position()
    bad = _insert_bad_row(db_path, "bad", b"{not json")
    log.append("s0", [Event(kind=Kind.USER_MESSAGE, text="after")])
    r = StatusReducer(log, tmp_path / "ck.db", policy=Fail(), batch=1000)
    r.catch_up()
    f = r.failure
    assert f is not None and (f.position, f.stream, f.seq) == (bad, "bad", 1)
    assert "invalid JSON" in f.problem and f.as_error().position == bad
    p = r.progress()
    assert p.rebuilding and p.rebuild_position == good_end
    assert r.step().folded == 0


def test_skip_policy_logs_and_folds_past_the_bad_event(
    log: SqliteLog, db_path: pathlib.Path, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Under Skip the bad event is logged and counted, and everything else is folded."""
    fill(log, 50, 2)
    _insert_bad_row(db_path, "s0", b'{"seq": "one"}')
    log.append("s1", [Event(kind=Kind.USER_MESSAGE, text="after")])
    r = StatusReducer(log, tmp_path / "ck.db", policy=Skip(), batch=1000)
    # Another test's logging.config may have disabled loggers that existed before it.
    logging.getLogger("projections").disabled = False
    with caplog.at_level(logging.ERROR, logger="projections"):
        r.catch_up()
    assert r.failure is None and r.progress().skipped == 1
    assert any("skipping 's0'" in m for m in caplog.messages)
    good = [rec for rec in log.read("s0", 0, None)][:-1]
    assert r.status("s0") == project(x.event() for x in good)
    assert r.status("s1") == project(history(log, "s1"))
    assert r.progress().position == log.last_position()


def test_retry_then_fail_rereads_the_event_before_failing(
    log: SqliteLog, db_path: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """RetryThenFail re-reads the event ``attempts`` times, then stops like Fail."""
    fill(log, 20, 1)
    bad = _insert_bad_row(db_path, "s0", b"[]")
    reads = []

    class Counting(SqliteLog):
        def read(self, *a, **k):  # type: ignore[no-untyped-def]
            reads.append(a)
            return super().read(*a, **k)

    with Counting(db_path) as lg:
        r = StatusReducer(lg, tmp_path / "ck.db", policy=RetryThenFail(attempts=2))
        r.catch_up()
    assert r.failure is not None and r.failure.position == bad
    assert len(reads) == 2


_runs = st.lists(
    st.tuples(st.integers(1, 40), st.integers(0, 3), st.booleans()), min_size=1, max_size=8
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 300), st.integers(1, 6), _runs)
def test_any_sequence_of_crashes_and_batch_sizes_ends_in_the_fold_from_zero(
    events: int, sessions: int, runs: list[tuple[int, int, bool]]
) -> None:
    """Reducers restarted after crashes at arbitrary steps (with arbitrary batches, and
    rebuilds requested at arbitrary points) converge on the fold from zero."""
    with tempfile.TemporaryDirectory() as d:
        mem = MemoryLog()
        fill(mem, events, sessions, seed=events)
        ck = pathlib.Path(d) / "ck.db"
        for batch, steps, rebuild in runs:
            r = StatusReducer(mem, ck, batch=batch, rebuild_commit_every=batch * 2)
            for i in range(steps):
                if rebuild and i == steps // 2:
                    r.request_rebuild()
                r.step()
            r.close()
        r = StatusReducer(mem, ck)
        r.catch_up()
        assert_equals_fold_from_zero(r, mem)
        r.close()


def test_the_reducer_folds_while_another_process_holds_the_logs_write_lock(
    log: SqliteLog, db_path: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """It only reads the spine (read-only connection), so a held write lock never blocks it."""
    fill(log, 200, 3)
    writer = sqlite3.connect(db_path, isolation_level=None, timeout=0.1)
    writer.execute("BEGIN IMMEDIATE")
    try:
        with SqliteLogReader(db_path) as reader:
            r = StatusReducer(reader, tmp_path / "ck.db", batch=64)
            r.catch_up()
            assert_equals_fold_from_zero(r, log)
            r.close()
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_a_read_only_reader_refuses_a_missing_spine_file(tmp_path: pathlib.Path) -> None:
    """The projection never creates the log: a missing file is a clear StorageError."""
    with pytest.raises(StorageError, match="does not exist"):
        SqliteLogReader(tmp_path / "nope.db")


def test_a_postgres_log_folds_into_checkpoints_in_the_same_database(pg_url: str) -> None:
    """Reading the log read-only and checkpointing into tables beside it, a reducer
    folds what a fold from zero gives; another reducer (another host) resumes from the
    checkpoint, and a rebuild there gives the same again."""
    from spine import open_log

    with open_log(pg_url) as log:  # type: ignore[attr-defined]
        fill(log, 300, 4)
        reader = open_log(pg_url, read_only=True)
        try:
            r = StatusReducer(reader, pg_url, batch=64)
            r.catch_up()
            assert_equals_fold_from_zero(r, log)
            position = r.progress().position
            r.close()
            fill(log, 50, 2, seed=7)
            again = StatusReducer(reader, pg_url, batch=64)
            assert again.progress().position == position
            again.catch_up()
            assert_equals_fold_from_zero(again, log)
            again.request_rebuild()
            again.catch_up()
            assert again.progress().position == log.last_position()
            assert_equals_fold_from_zero(again, log)
            again.close()
        finally:
            reader.close()
