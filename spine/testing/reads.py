"""`ReadContract` and `MisuseContract`: what every backend's reads return, and how it
refuses bad arguments and events that would not read back (clearly, storing nothing)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from .. import Event, InvalidArgumentError, InvalidStreamIdError, Kind, Log, StreamInfo, history
from .appends import LogUnderTest
from .events import attrs_evolve_seq, ev, snapshot, texts


class ReadContract(LogUnderTest):
    """Read, page and list semantics shared by every backend."""

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


class MisuseContract(LogUnderTest):
    """Clear errors for misuse, shared by every backend: nothing is stored."""

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
