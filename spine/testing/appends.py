"""`AppendContract`: what every backend's appends owe their callers (seqs, positions,
expected seqs, idempotency keys), and `LogUnderTest`, the base every contract builds on."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest

from .. import AppendResult, ConflictError, Log, SpineError
from .events import ev, snapshot, texts


class LogUnderTest:
    """The log a contract runs against: a backend's test class implements `new_log`."""

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


class AppendContract(LogUnderTest):
    """Append semantics shared by every backend."""

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
