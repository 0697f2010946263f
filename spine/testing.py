"""The behaviour every `Log` backend owes its callers, as pytest classes to subclass.

A backend's test module subclasses `LogContract` (and `DurableLogContract` when another
process can open the same log, `LeaseContract` when it fences writers) and implements
`new_log` (and `reopen`, `opener`); every test here then runs against it. This is how
vertebra tests its own backends, and how a third-party backend proves itself::

    from spine.testing import DurableLogContract

    class TestMyLog(DurableLogContract):
        def new_log(self, tmp_path):
            return MyLog(...)

`postgres_cluster` starts a throwaway PostgreSQL server (when its binaries are installed)
and `fresh_schema` gives each test an empty schema in one, for backends that need a server.
Importing this module needs pytest (the ``test`` extra).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import pathlib
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import attrs
import orjson
import pytest

from . import (
    AppendResult,
    ConflictError,
    Event,
    FencedError,
    InvalidArgumentError,
    InvalidStreamIdError,
    Kind,
    Log,
    Record,
    SpineError,
    StreamInfo,
    history,
)

__all__ = [
    "PG_BIN_DIRS",
    "WAIT",
    "DurableLogContract",
    "LeaseContract",
    "LogContract",
    "check_concurrent_outcome",
    "ev",
    "fresh_schema",
    "postgres_bin_dir",
    "postgres_cluster",
    "snapshot",
    "texts",
]

WAIT = 60.0  # seconds: the bound on every wait for another thread or process


def ev(text: str = "", kind: str = Kind.ASSISTANT, **kw: Any) -> Event:
    """A small event whose text identifies it."""
    return Event(kind=kind, text=text, **kw)


def texts(records: list[Record]) -> list[str]:
    return [r.event().text for r in records]


def snapshot(log: Log) -> list[Record]:
    """Everything the log holds, in position order."""
    return log.read_all(0, None)


class LogContract:
    """Append, read and list semantics shared by every backend."""

    def new_log(self, tmp_path: pathlib.Path) -> Log:
        raise NotImplementedError

    def reopen(self, log: Log, tmp_path: pathlib.Path) -> Log:
        """The same log as a fresh opener sees it (a durable backend reopens its store)."""
        return log

    @pytest.fixture
    def log(self, tmp_path: pathlib.Path) -> Iterator[Log]:
        log = self.new_log(tmp_path)
        try:
            yield log
        finally:
            log.close()

    # -- append: seqs, positions and results ------------------------------------------

    def test_the_backend_satisfies_the_log_protocol(self, log: Log) -> None:
        """The backend is a structural `Log` (the runtime-checkable protocol accepts it)."""
        assert isinstance(log, Log)

    def test_seqs_start_at_one_and_stay_contiguous_across_batches(self, log: Log) -> None:
        """Seqs are 1-based and contiguous per stream, however the appends are batched."""
        r1 = log.append("s", [ev("a")])
        r2 = log.append("s", [ev("b"), ev("c"), ev("d")])
        r3 = log.append("s", [ev("e")])
        assert (r1.first_seq, r1.last_seq) == (1, 1)
        assert (r2.first_seq, r2.last_seq) == (2, 4)
        assert (r3.first_seq, r3.last_seq) == (5, 5)
        records = log.read("s")
        assert [r.seq for r in records] == [1, 2, 3, 4, 5]
        assert texts(records) == ["a", "b", "c", "d", "e"]
        assert [r.event().seq for r in records] == [1, 2, 3, 4, 5]

    def test_an_append_result_carries_its_stored_records(self, log: Log) -> None:
        """The result names the seqs and positions taken and holds the stored bytes."""
        log.append("other", [ev("x")])
        res = log.append("s", [ev("a"), ev("b")])
        assert isinstance(res, AppendResult)
        assert res.stream == "s" and not res.duplicate
        assert (res.first_position, res.last_position) == (2, 3)
        assert [(r.stream, r.seq, r.position) for r in res.records] == [("s", 1, 2), ("s", 2, 3)]
        assert list(res.records) == log.read("s")
        assert [e.text for e in res.events()] == ["a", "b"]

    def test_each_stream_counts_its_own_seqs(self, log: Log) -> None:
        """Streams do not share seqs: each starts at 1."""
        log.append("a", [ev("a1")])
        log.append("b", [ev("b1"), ev("b2")])
        log.append("a", [ev("a2")])
        assert [r.seq for r in log.read("a")] == [1, 2]
        assert [r.seq for r in log.read("b")] == [1, 2]

    def test_global_positions_are_gap_free_in_append_order(self, log: Log) -> None:
        """Positions number every stored event of every stream 1, 2, 3... in commit order."""
        log.append("a", [ev("1"), ev("2")])
        log.append("b", [ev("3")])
        log.append("a", [ev("4")])
        log.append("c", [ev("5"), ev("6"), ev("7")])
        records = snapshot(log)
        assert [r.position for r in records] == list(range(1, 8))
        assert texts(records) == [str(i) for i in range(1, 8)]
        assert log.last_position() == 7

    def test_the_log_stamps_a_time_only_where_the_writer_left_none(self, log: Log) -> None:
        """Events without a time get the commit time (UTC); a writer's time is kept."""
        when = datetime(2030, 5, 6, 7, 8, 9, 123456, tzinfo=timezone(timedelta(hours=2)))
        before = datetime.now(UTC) - timedelta(seconds=1)
        log.append("s", [ev("stamped"), ev("given", time=when)])
        stamped, given = [r.event() for r in log.read("s")]
        assert stamped.time is not None and stamped.time.tzinfo is not None
        assert before <= stamped.time <= datetime.now(UTC) + timedelta(seconds=1)
        assert given.time == when

    def test_an_empty_log_has_no_streams_and_position_zero(self, log: Log) -> None:
        """A fresh log lists nothing, reads nothing and is at position 0."""
        assert log.streams() == []
        assert log.last_position() == 0
        assert log.last_seq("nobody") == 0
        assert log.read("nobody") == []
        assert log.read_all() == []

    # -- expected seq ------------------------------------------------------------------

    def test_an_append_at_the_expected_seq_succeeds(self, log: Log) -> None:
        """expected_seq equal to the stream's last seq (0 for a new stream) appends."""
        log.append("s", [ev("a")], expected_seq=0)
        log.append("s", [ev("b"), ev("c")], expected_seq=1)
        log.append("s", [ev("d")], expected_seq=3)
        assert texts(log.read("s")) == ["a", "b", "c", "d"]

    def test_a_stale_expected_seq_is_a_conflict_carrying_both_seqs(self, log: Log) -> None:
        """A mismatched expected seq raises ConflictError with stream, expected and actual."""
        log.append("s", [ev("a"), ev("b")])
        with pytest.raises(ConflictError) as info:
            log.append("s", [ev("late")], expected_seq=1)
        err = info.value
        assert (err.stream, err.expected_seq, err.actual_seq) == ("s", 1, 2)
        assert "expected last seq 1" in str(err) and "actual 2" in str(err)
        assert isinstance(err, SpineError)

    def test_an_expected_seq_ahead_of_a_new_stream_conflicts_with_zero(self, log: Log) -> None:
        """A new stream's actual last seq is 0, so any other expectation conflicts."""
        with pytest.raises(ConflictError) as info:
            log.append("fresh", [ev("x")], expected_seq=3)
        assert (info.value.expected_seq, info.value.actual_seq) == (3, 0)
        assert log.streams() == []

    def test_a_conflict_leaves_the_log_untouched(self, log: Log) -> None:
        """Nothing of a conflicting batch is stored and the next append continues normally."""
        log.append("s", [ev("a")])
        before = snapshot(log)
        with pytest.raises(ConflictError):
            log.append("s", [ev("x"), ev("y")], expected_seq=0)
        assert snapshot(log) == before
        res = log.append("s", [ev("b")], expected_seq=1)
        assert (res.first_seq, res.first_position) == (2, 2)

    # -- idempotency -------------------------------------------------------------------

    def test_a_repeated_idempotency_key_returns_the_original_result(self, log: Log) -> None:
        """The second append with a key appends nothing and returns the first result."""
        first = log.append("s", [ev("a"), ev("b")], idempotency_key="msg-1")
        log.append("other", [ev("in between")])
        again = log.append("s", [ev("a"), ev("b")], idempotency_key="msg-1")
        assert again.duplicate and not first.duplicate
        assert (again.first_seq, again.last_seq) == (first.first_seq, first.last_seq)
        assert (again.first_position, again.last_position) == (
            first.first_position,
            first.last_position,
        )
        assert list(again.records) == list(first.records)
        assert texts(log.read("s")) == ["a", "b"]

    def test_a_key_can_be_looked_up_without_appending(self, log: Log) -> None:
        """find_key returns what a repeated append would, and None for an unused key."""
        first = log.append("s", [ev("a"), ev("b")], idempotency_key="msg-1")
        found = log.find_key("s", "msg-1")
        assert found is not None and found.duplicate
        assert (found.first_seq, found.last_seq) == (first.first_seq, first.last_seq)
        assert [r.seq for r in found.records] == [1, 2]
        assert log.find_key("s", "msg-2") is None
        assert log.find_key("other", "msg-1") is None

    def test_a_redelivery_with_a_stale_expected_seq_is_recognised_not_refused(
        self, log: Log
    ) -> None:
        """A retried append (same key, now-stale expected seq) returns the original result."""
        first = log.append("s", [ev("a")], expected_seq=0, idempotency_key="k")
        log.append("s", [ev("b")], expected_seq=1)
        again = log.append("s", [ev("a")], expected_seq=0, idempotency_key="k")
        assert again.duplicate and again.first_seq == first.first_seq == 1
        assert texts(log.read("s")) == ["a", "b"]

    def test_idempotency_keys_are_scoped_to_their_stream(self, log: Log) -> None:
        """The same key on two streams is two different appends."""
        a = log.append("a", [ev("a")], idempotency_key="k")
        b = log.append("b", [ev("b")], idempotency_key="k")
        assert not a.duplicate and not b.duplicate
        assert log.last_position() == 2

    def test_an_idempotency_key_survives_reopening(self, log: Log, tmp_path: pathlib.Path) -> None:
        """A redelivery after a restart is still recognised."""
        first = log.append("s", [ev("a")], idempotency_key="k")
        other = self.reopen(log, tmp_path)
        try:
            again = other.append("s", [ev("a")], idempotency_key="k")
            assert again.duplicate and list(again.records) == list(first.records)
            assert other.last_seq("s") == 1
        finally:
            if other is not log:
                other.close()

    # -- reads ---------------------------------------------------------------------------

    def test_read_pages_after_a_seq_with_a_limit(self, log: Log) -> None:
        """read(after_seq, limit) returns the next `limit` records after that seq."""
        log.append("s", [ev(str(i)) for i in range(1, 11)])
        assert texts(log.read("s", 0, 3)) == ["1", "2", "3"]
        assert texts(log.read("s", 3, 3)) == ["4", "5", "6"]
        assert texts(log.read("s", 9, 3)) == ["10"]
        assert log.read("s", 10, 3) == []
        assert len(log.read("s", 0, None)) == 10

    def test_paging_through_a_stream_sees_every_record_once(self, log: Log) -> None:
        """Following the last seq of each page visits every record exactly once."""
        for b in range(7):
            log.append("s", [ev(f"{b}-{i}") for i in range(b + 1)])
        seen: list[int] = []
        after = 0
        while page := log.read("s", after, 4):
            seen.extend(r.seq for r in page)
            after = page[-1].seq
        assert seen == list(range(1, 29))

    def test_a_kinds_filter_selects_and_the_limit_counts_matches(self, log: Log) -> None:
        """kinds keeps only those kinds; limit counts kept records; empty kinds means all."""
        kinds = [Kind.USER_MESSAGE, Kind.ASSISTANT, Kind.TOOL_CALL] * 4
        log.append("s", [ev(str(i + 1), kind=k) for i, k in enumerate(kinds)])
        got = log.read("s", 0, 3, kinds=[Kind.ASSISTANT, Kind.TOOL_CALL])
        assert [(r.seq, r.kind) for r in got] == [
            (2, Kind.ASSISTANT),
            (3, Kind.TOOL_CALL),
            (5, Kind.ASSISTANT),
        ]
        assert [r.seq for r in log.read("s", 5, None, kinds=["tool.call"])] == [6, 9, 12]
        assert len(log.read("s", 0, None, kinds=[])) == 12
        assert log.read("s", 0, None, kinds=["never.written"]) == []

    def test_read_all_pages_by_position_and_filters_kinds(self, log: Log) -> None:
        """read_all(after_position, limit, kinds) walks every stream in commit order."""
        log.append("a", [ev("1", kind=Kind.USER_MESSAGE), ev("2")])
        log.append("b", [ev("3", kind=Kind.USER_MESSAGE)])
        log.append("a", [ev("4")])
        assert texts(log.read_all(0, 2)) == ["1", "2"]
        assert texts(log.read_all(2, 2)) == ["3", "4"]
        assert log.read_all(4) == []
        users = log.read_all(0, None, kinds=[Kind.USER_MESSAGE])
        assert [(r.stream, r.seq, r.position) for r in users] == [("a", 1, 1), ("b", 1, 3)]

    def test_streams_lists_each_stream_in_order_of_first_append(self, log: Log) -> None:
        """streams() gives every stream once, first-appended first, with its last seq."""
        log.append("zeta", [ev()])
        log.append("alpha", [ev(), ev()])
        log.append("zeta", [ev()])
        log.append("mid", [ev()])
        assert log.streams() == [
            StreamInfo(stream="zeta", last_seq=2, last_position=4),
            StreamInfo(stream="alpha", last_seq=2, last_position=3),
            StreamInfo(stream="mid", last_seq=1, last_position=5),
        ]
        assert [log.last_seq(s) for s in ("zeta", "alpha", "mid", "none")] == [2, 2, 1, 0]

    def test_history_of_an_unknown_stream_is_empty(self, log: Log) -> None:
        """history() of a stream never written is [], not an error."""
        assert history(log, "never-written") == []

    def test_history_returns_every_event_in_order_past_any_page_size(self, log: Log) -> None:
        """history() decodes the whole stream, however many pages it spans."""
        n = 5003
        for start in range(0, n, 1000):
            log.append("s", [ev(str(i)) for i in range(start, min(n, start + 1000))])
        events = history(log, "s")
        assert [e.seq for e in events] == list(range(1, n + 1))
        assert events[-1].text == str(n - 1)

    def test_stored_events_come_back_equal_to_what_was_appended(self, log: Log) -> None:
        """Every field, unknown kinds and unknown extra fields survive the log."""
        when = datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC)
        sent = [
            Event(
                kind=Kind.TOOL_CALL,
                time=when,
                actor="agent",
                turn=2,
                tool="grep",
                tool_use_id="toolu_1",
                input='{"pattern": "x", "n": [1, 2]}',
            ),
            Event(kind="from.the.future", time=when, extra={"newField": {"deep": [1, None]}}),
            Event(kind=Kind.PROPERTIES, time=when, properties={"model": "m", "gone": None}),
        ]
        log.append("s", sent)
        back = history(log, "s")
        assert back == [attrs_evolve_seq(e, i + 1) for i, e in enumerate(sent)]

    # -- misuse: clear errors, nothing stored -----------------------------------------

    @pytest.mark.parametrize(
        ("call", "message"),
        [
            (lambda log: log.append("has space", [ev()]), "whitespace"),
            (lambda log: log.append("dotted.id", [ev()]), "dot"),
            (lambda log: log.append("star*", [ev()]), "wildcard"),
            (lambda log: log.append("gt>", [ev()]), "wildcard"),
            (lambda log: log.append("", [ev()]), "empty"),
            (lambda log: log.append("s", []), "no events"),
            (lambda log: log.append("s", ev()), "not one event"),
            (lambda log: log.append("s", [ev(), "nope"]), "not Event"),
            (lambda log: log.append("s", [ev(), ev(kind=Kind.NOTICE)]), "ephemeral"),
            (lambda log: log.append("s", [Event(kind="")]), "non-empty kind"),
            (lambda log: log.append("s", [ev()], expected_seq=-1), "expected_seq"),
            (lambda log: log.append("s", [ev()], idempotency_key=""), "idempotency key"),
            (
                lambda log: log.append("s", [ev(), Event(kind="x", record={"o": object()})]),
                "cannot be encoded",
            ),
            (
                lambda log: log.append("s", [Event(kind="x", time=datetime(2030, 1, 1))]),
                "timezone",
            ),
            (lambda log: log.read("s", -1), "after_seq"),
            (lambda log: log.read("s", 0, 0), "limit"),
            (lambda log: log.read("s", 0, 10, kinds="assistant.message"), "one string"),
            (lambda log: log.read_all(-5), "after_position"),
            (lambda log: log.read_all(0, -1), "limit"),
            (lambda log: log.read_all(0, 10, kinds=[""]), "invalid kind"),
        ],
    )
    def test_misuse_raises_a_clear_error_and_stores_nothing(
        self, log: Log, call: Callable[[Log], object], message: str
    ) -> None:
        """Bad arguments raise InvalidArgumentError saying what is wrong; the log is unchanged."""
        log.append("s", [ev("kept")], idempotency_key="k")
        before = snapshot(log)
        with pytest.raises(InvalidArgumentError, match=message):
            call(log)
        assert snapshot(log) == before
        assert log.append("s", [ev("next")], expected_seq=1).first_seq == 2

    @pytest.mark.parametrize(
        ("fields", "named"),
        [
            ({"kind": "session.properties", "properties": {"model": 1}}, "properties"),
            ({"kind": "session.properties", "properties": {"a": ["x"]}}, "properties"),
            ({"kind": "user.message", "text": 5}, "text"),
            ({"kind": "turn.started", "turn": "one"}, "turn"),
            ({"kind": "tool.result", "is_error": "no"}, "isError"),
            ({"kind": "tool.call", "tool": ["calc"]}, "tool"),
        ],
    )
    def test_an_event_that_would_not_read_back_is_refused_and_nothing_is_written(
        self, log: Log, fields: dict[str, object], named: str
    ) -> None:
        """A wrongly typed field is refused at append, naming the field, and the batch
        (valid events beside it included) stores nothing; the stream still reads."""
        log.append("s", [ev("kept")])
        before = snapshot(log)
        with pytest.raises(InvalidArgumentError, match="nothing was written") as info:
            log.append("s", [ev("fine"), Event(**fields)])  # type: ignore[arg-type]
        assert named in str(info.value)
        assert snapshot(log) == before
        assert [e.text for e in history(log, "s")] == ["kept"]

    def test_an_invalid_stream_id_error_names_the_id_and_problem(self, log: Log) -> None:
        """The refusal of an id carries the id and the reason."""
        with pytest.raises(InvalidStreamIdError) as info:
            log.append("a.b", [ev()])
        assert info.value.stream == "a.b" and "dot" in info.value.problem

    # -- concurrency within a process ------------------------------------------------

    def test_concurrent_writer_threads_lose_duplicate_and_reorder_nothing(self, log: Log) -> None:
        """Threads appending at once: every batch stored once, in order, positions gap-free."""
        writers, batches = 4, 40
        start = threading.Barrier(writers, timeout=WAIT)
        errors: list[BaseException] = []

        def write(w: int) -> None:
            try:
                start.wait()
                for b in range(batches):
                    log.append(f"own-{w}", [ev(f"{w}:{b}")], expected_seq=b)
                    log.append("shared", [ev(f"{w}:{b}:0"), ev(f"{w}:{b}:1")])
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT)
        assert not any(t.is_alive() for t in threads) and not errors
        check_concurrent_outcome(log, writers, batches)


def attrs_evolve_seq(e: Event, seq: int) -> Event:
    return attrs.evolve(e, seq=seq)


def check_concurrent_outcome(log: Log, writers: int, batches: int) -> None:
    """What several writers of `own-<w>` and `shared` streams must leave behind."""
    records = snapshot(log)
    assert [r.position for r in records] == list(range(1, len(records) + 1))
    assert len(records) == writers * batches * 3
    for w in range(writers):
        own = log.read(f"own-{w}", 0, None)
        assert texts(own) == [f"{w}:{b}" for b in range(batches)]
        assert [r.seq for r in own] == list(range(1, batches + 1))
    shared = log.read("shared", 0, None)
    assert [r.seq for r in shared] == list(range(1, 2 * writers * batches + 1))
    got = texts(shared)
    # Batches are atomic: each writer's two events sit side by side, in its own order.
    for i in range(0, len(got), 2):
        a, b = got[i], got[i + 1]
        assert a.endswith(":0") and b == a[:-1] + "1"
    for w in range(writers):
        mine = [t for t in got[::2] if t.startswith(f"{w}:")]
        assert mine == [f"{w}:{b}:0" for b in range(batches)]
    # Each record's position order agrees with its stream's seq order.
    for stream in {r.stream for r in records}:
        seqs = [r.seq for r in records if r.stream == stream]
        assert seqs == sorted(seqs)


# -- several processes ---------------------------------------------------------------


def _process_writer(opener: Callable[[], Log], w: int, batches: int, go: Any, out: Any) -> None:
    """Child process: append to its own stream and, optimistically, to a contested one."""
    log = opener()
    try:
        if not go.wait(WAIT):
            raise RuntimeError("never told to start")
        conflicts = 0
        for b in range(batches):
            log.append(f"own-{w}", [ev(f"{w}:{b}")], expected_seq=b)
            log.append("shared", [ev(f"{w}:{b}:0"), ev(f"{w}:{b}:1")])
            # Optimistic concurrency: read the last seq, append at it, retry on conflict.
            while True:
                last = log.last_seq("contested")
                try:
                    log.append("contested", [ev(f"{w}:{b}")], expected_seq=last)
                    break
                except ConflictError as exc:
                    assert exc.actual_seq > last
                    conflicts += 1
        out.put((w, conflicts))
    finally:
        log.close()


class DurableLogContract(LogContract):
    """The contract for a log that several OS processes open at once."""

    def opener(self, tmp_path: pathlib.Path) -> Callable[[], Log]:
        """A picklable callable that opens this test's log in another process."""
        raise NotImplementedError

    def test_writers_in_several_processes_lose_duplicate_and_reorder_nothing(
        self, log: Log, tmp_path: pathlib.Path
    ) -> None:
        """OS processes appending at once leave every batch once, in order, gap-free."""
        writers, batches = 4, 25
        ctx = mp.get_context("spawn")
        go = ctx.Event()
        out = ctx.Queue()
        procs = [
            ctx.Process(target=_process_writer, args=(self.opener(tmp_path), w, batches, go, out))
            for w in range(writers)
        ]
        for p in procs:
            p.start()
        try:
            go.set()
            results = dict(out.get(timeout=WAIT) for _ in procs)
            for p in procs:
                p.join(WAIT)
                assert p.exitcode == 0
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
        assert sorted(results) == list(range(writers))
        contested = log.read("contested", 0, None)
        assert [r.seq for r in contested] == list(range(1, writers * batches + 1))
        got = texts(contested)
        assert sorted(got) == sorted(f"{w}:{b}" for w in range(writers) for b in range(batches))
        for w in range(writers):
            assert [t for t in got if t.startswith(f"{w}:")] == [f"{w}:{b}" for b in range(batches)]
        # Fold the contested stream out so the shared checks see only own and shared.
        everything = snapshot(log)
        assert [r.position for r in everything] == list(range(1, len(everything) + 1))
        rest = [r for r in everything if r.stream != "contested"]
        assert len(rest) == writers * batches * 3
        for w in range(writers):
            own = log.read(f"own-{w}", 0, None)
            assert texts(own) == [f"{w}:{b}" for b in range(batches)]
        shared = texts(log.read("shared", 0, None))
        assert len(shared) == 2 * writers * batches
        for i in range(0, len(shared), 2):
            assert shared[i + 1] == shared[i][:-1] + "1"
        for w in range(writers):
            mine = [t for t in shared[::2] if t.startswith(f"{w}:")]
            assert mine == [f"{w}:{b}:0" for b in range(batches)]

    def test_everything_appended_is_there_after_reopening(
        self, log: Log, tmp_path: pathlib.Path
    ) -> None:
        """Reopening the store shows the same records, streams and positions."""
        log.append("a", [ev("1"), ev("2")], idempotency_key="x")
        log.append("b", [ev("3")])
        before = (snapshot(log), log.streams(), log.last_position())
        other = self.reopen(log, tmp_path)
        try:
            assert (snapshot(other), other.streams(), other.last_position()) == before
            assert other.append("a", [ev("4")], expected_seq=2).first_position == 4
        finally:
            other.close()

    def test_stored_payload_bytes_are_exactly_the_encoded_event(self, log: Log) -> None:
        """The bytes kept (and later sealed) are the event's canonical JSON, seq and time set."""
        res = log.append("s", [Event(kind="x", text="hi", time=datetime(2030, 1, 1, tzinfo=UTC))])
        stored = log.read("s")[0].payload
        assert stored == res.records[0].payload
        assert orjson.loads(stored) == {
            "seq": 1,
            "time": "2030-01-01T00:00:00Z",
            "kind": "x",
            "text": "hi",
        }

    def test_a_tailing_reader_skips_no_row_while_writers_in_other_connections_commit(
        self, log: Log, tmp_path: pathlib.Path
    ) -> None:
        """Positions become visible in order: a reader that follows the last position it
        saw, while separate writers commit at once, misses none (a plain sequence does)."""
        writers, batches = 4, 150
        total = writers * batches * 2
        opener = self.opener(tmp_path)
        start = threading.Barrier(writers + 1, timeout=WAIT)
        errors: list[BaseException] = []

        def write(w: int) -> None:
            own = opener()
            try:
                start.wait()
                for b in range(batches):
                    own.append(f"w-{w}", [ev(f"{w}:{b}:0"), ev(f"{w}:{b}:1")])
            except BaseException as exc:
                errors.append(exc)
            finally:
                own.close()

        threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
        for t in threads:
            t.start()
        reader = opener()
        seen: list[int] = []
        try:
            start.wait()
            after = 0
            deadline = threading.Event()
            timer = threading.Timer(WAIT, deadline.set)
            timer.start()
            try:
                # Tail the way a subscription does: ask only for what follows the last
                # position seen, so a row committed late below it would be lost for good.
                while after < total and not deadline.is_set() and not errors:
                    page = reader.read_all(after, 50)
                    seen.extend(r.position for r in page)
                    if page:
                        after = page[-1].position
            finally:
                timer.cancel()
        finally:
            for t in threads:
                t.join(WAIT)
            reader.close()
        assert not errors, errors
        assert not any(t.is_alive() for t in threads), "a writer did not finish"
        assert log.last_position() == total
        skipped = sorted(set(range(1, total + 1)) - set(seen))
        assert skipped == [], f"the reader skipped {len(skipped)} of {total} rows: {skipped[:10]}"
        assert seen == list(range(1, total + 1))

    def test_one_key_appended_at_once_through_several_connections_is_stored_once(
        self, log: Log, tmp_path: pathlib.Path
    ) -> None:
        """Writers racing with the same idempotency key: one appends, the others get its
        result as a duplicate, and positions stay gap-free."""
        writers = 4
        opener = self.opener(tmp_path)
        logs = [opener() for _ in range(writers)]
        start = threading.Barrier(writers, timeout=WAIT)
        results: list[AppendResult] = []
        errors: list[BaseException] = []

        def write(w: int) -> None:
            try:
                start.wait()
                results.append(logs[w].append("s", [ev("once")], idempotency_key="k"))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join(WAIT)
        finally:
            for other in logs:
                other.close()
        assert not errors and len(results) == writers
        assert sorted(r.duplicate for r in results) == [False] + [True] * (writers - 1)
        assert {(r.first_seq, r.first_position) for r in results} == {(1, 1)}
        log.append("s", [ev("next")])
        assert [r.position for r in snapshot(log)] == [1, 2]

    # -- sealed rows: every column a reader relies on is covered --------------------------

    def tamper(self, log: Log, stream: str, seq: int, column: str, value: object) -> None:
        """Set ``column`` of the stored row ``stream``/``seq`` to ``value`` behind the
        log's back (its append-only guard lifted), as someone with the file would."""
        pytest.skip("this backend's test gives no way to edit a stored row")

    @pytest.mark.parametrize("column", ["payload", "kind", "version", "position", "seq", "stream"])
    def test_editing_any_column_of_a_sealed_row_is_found_and_its_seq_named(
        self, log: Log, column: str
    ) -> None:
        """Each stored column of a sealed row (payload untouched for the others) edited in
        turn: verification fails and names that row's seq, without decoding anything."""
        from .seal import SigningKey, seal_stream, verify_stream

        key = SigningKey.generate()
        log.append("other", [ev("elsewhere")])
        log.append("s", [ev(f"m{i}", kind=Kind.USER_MESSAGE) for i in range(1, 6)])
        log.append("other", [ev("later")])
        seal_stream(log, "s", key)
        assert verify_stream(log, "s", key, append=False).ok
        row = log.read("s", 2, 1)[0]
        value: object = {
            "payload": row.payload.replace(b"m3", b"mX"),
            "kind": str(Kind.TURN_COMPLETED),
            "version": 2,
            "position": log.last_position() + 100,
            "seq": 99,
            "stream": "moved",
        }[column]
        self.tamper(log, "s", 3, column, value)
        report = verify_stream(log, "s", key, append=False)
        assert not report.ok, column
        assert report.problem is not None and report.problem.seq == 3, (column, report.summary())


class LeaseContract:
    """Fencing for a backend whose writers take leases on streams (`take_lease`)."""

    def new_log(self, tmp_path: pathlib.Path) -> Log:
        raise NotImplementedError

    def opener(self, tmp_path: pathlib.Path) -> Callable[[], Log]:
        raise NotImplementedError

    def test_a_stale_writer_is_refused_once_another_takes_the_stream_over(
        self, tmp_path: pathlib.Path
    ) -> None:
        """After a takeover the old holder's appends raise FencedError and store nothing;
        the new holder appends on; streams without a lease are not fenced."""
        opener = self.opener(tmp_path)
        old, new = opener(), opener()
        try:
            e1 = old.take_lease("s", "host-a")  # type: ignore[attr-defined]
            old.append("s", [ev("a")], expected_seq=0)
            e2 = new.take_lease("s", "host-b")  # type: ignore[attr-defined]
            assert e2 == e1 + 1
            with pytest.raises(FencedError) as info:
                old.append("s", [ev("stale")])
            assert (info.value.held_epoch, info.value.current_epoch) == (e1, e2)
            assert "s" in str(info.value)
            new.append("s", [ev("b")], expected_seq=1)
            old.append("other", [ev("unfenced")])
            assert texts(new.read("s")) == ["a", "b"]
            # The refused append rolled back whole: positions stay gap-free.
            assert [r.position for r in snapshot(new)] == [1, 2, 3]
            assert new.lease("s") == (e2, "host-b")  # type: ignore[attr-defined]
        finally:
            old.close()
            new.close()

    def test_a_takeover_waits_for_an_append_in_flight_and_then_fences(
        self, tmp_path: pathlib.Path
    ) -> None:
        """Appends racing a takeover either land before it or are refused: none after."""
        opener = self.opener(tmp_path)
        old, new = opener(), opener()
        try:
            old.take_lease("s", "a")  # type: ignore[attr-defined]
            results: list[str] = []
            go = threading.Event()

            def spam() -> None:
                go.wait(WAIT)
                for i in range(200):
                    try:
                        old.append("s", [ev(f"old-{i}")])
                        results.append("ok")
                    except FencedError:
                        results.append("fenced")

            t = threading.Thread(target=spam)
            t.start()
            go.set()
            epoch = new.take_lease("s", "b")  # type: ignore[attr-defined]
            cut = new.last_seq("s")
            t.join(WAIT)
            assert not t.is_alive()
            # Everything the old writer stored is below the takeover point, and after its
            # first refusal it never stores again.
            assert new.last_seq("s") == cut
            assert results.count("ok") == cut
            if "fenced" in results:
                first = results.index("fenced")
                assert set(results[first:]) == {"fenced"}
            new.append("s", [ev("new")], expected_seq=cut)
            assert new.lease("s") == (epoch, "b")  # type: ignore[attr-defined]
        finally:
            old.close()
            new.close()


# -- a throwaway PostgreSQL server -------------------------------------------------------

#: Where Debian's packages put the server binaries, newest first.
PG_BIN_DIRS = (
    "/usr/lib/postgresql/17/bin",
    "/usr/lib/postgresql/16/bin",
    "/usr/lib/postgresql/15/bin",
    "/usr/lib/postgresql/14/bin",
)


def postgres_bin_dir() -> str | None:
    """The directory holding ``initdb`` and ``postgres``, None when none is installed."""
    import os
    import shutil

    for d in PG_BIN_DIRS:
        if os.path.exists(os.path.join(d, "initdb")):
            return d
    found = shutil.which("initdb")
    return os.path.dirname(os.path.realpath(found)) if found else None


@contextlib.contextmanager
def postgres_cluster(
    *,
    fsync: bool = True,
    user: str = "postgres",
    listen: str = "127.0.0.1",
    wrap: Sequence[str] = (),
    allow: Sequence[str] = (),
) -> Iterator[str]:
    """Start a throwaway PostgreSQL cluster in a temporary directory on a free loopback
    port; yield its URL; stop it and delete it on exit, whatever happened.

    As root the server runs as ``user`` (PostgreSQL refuses to run as root). Skips the
    calling test when no server binaries are installed. ``listen`` is the one address it
    listens on and ``wrap`` a prefix for its commands (``ip netns exec NS``: a server
    inside a network namespace, listening on that namespace's address); ``allow`` are
    networks (CIDR) whose clients are trusted besides loopback.
    """
    import os
    import shutil
    import socket
    import subprocess
    import tempfile

    bindir = postgres_bin_dir()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries installed")
    root = os.geteuid() == 0
    prefix: list[str] = [*wrap, *(["runuser", "-u", user, "--"] if root else [])]
    base = tempfile.mkdtemp(prefix="vertebra-pg-")
    data = os.path.join(base, "data")
    if root:
        shutil.chown(base, user)
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    pg_ctl = os.path.join(bindir, "pg_ctl")
    started = False
    try:
        subprocess.run(
            [
                *prefix,
                os.path.join(bindir, "initdb"),
                "-D",
                data,
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
            check=True,
            capture_output=True,
            cwd=base,
            timeout=120,
        )
        if allow:
            with open(os.path.join(data, "pg_hba.conf"), "a") as hba:
                hba.writelines(f"host all all {net} trust\n" for net in allow)
        opts = (
            f"-c listen_addresses={listen} -c port={port} -c unix_socket_directories={base} "
            f"-c fsync={'on' if fsync else 'off'} -c max_connections=200"
        )
        subprocess.run(
            [
                *prefix,
                pg_ctl,
                "-D",
                data,
                "-l",
                os.path.join(base, "server.log"),
                "-o",
                opts,
                "-w",
                "-t",
                "60",
                "start",
            ],
            check=True,
            capture_output=True,
            cwd=base,
            timeout=120,
        )
        started = True
        yield f"postgresql://postgres@{listen}:{port}/postgres"
    finally:
        if started:
            subprocess.run(
                [*prefix, pg_ctl, "-D", data, "-m", "immediate", "-w", "-t", "60", "stop"],
                capture_output=True,
                cwd=base,
                timeout=120,
            )
        shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def fresh_schema(url: str) -> Iterator[str]:
    """An empty schema in the database at ``url``, for one test: yields a URL whose
    connections use it, and drops it (and everything in it) on exit."""
    import uuid

    import psycopg

    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(f"CREATE SCHEMA {name}")
    sep = "&" if "?" in url else "?"
    try:
        yield f"{url}{sep}options=-csearch_path%3D{name}"
    finally:
        with psycopg.connect(url, autocommit=True) as c:
            c.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
