"""Catch-up subscriptions: backlog then live, exactly once, in order, whatever the wakes do."""

from __future__ import annotations

import multiprocessing as mp
import pathlib
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import wait_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spine import (
    AllSubscription,
    Event,
    InvalidArgumentError,
    InvalidStreamIdError,
    Kind,
    Log,
    MemoryLog,
    Record,
    SqliteLog,
    StreamSubscription,
    SubscriptionClosedError,
    Wakeup,
    open_log,
    subscribe,
    subscribe_all,
)

WAIT = 10.0  # the bound on every wait; a broken wake fails the test instead of hanging
NEVER = 3600.0  # a poll floor that never fires within a test: delivery must come by wake


def ev(text: str, kind: str = Kind.ASSISTANT) -> Event:
    return Event(kind=kind, text=text)


class _DeafWakeup(Wakeup):
    """A wake signal that is never raised: every wake is lost."""

    def bump(self, marks: Any = None) -> None:
        pass


def _deaf(log: Any) -> Any:
    log.wakeup = _DeafWakeup()
    return log


BACKENDS: dict[str, Callable[[pathlib.Path], Log]] = {
    "memory": lambda _p: MemoryLog(),
    "sqlite": lambda p: SqliteLog(p / "spine.db"),
}


@pytest.fixture(params=[*sorted(BACKENDS), "postgres"])
def log(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Log]:
    if request.param == "postgres":
        log = open_log(request.getfixturevalue("pg_url"))
    else:
        log = BACKENDS[request.param](tmp_path)
    try:
        yield log
    finally:
        log.close()


def take(sub: StreamSubscription | AllSubscription, n: int) -> list[Any]:
    """The next ``n`` items, each awaited at most WAIT seconds."""
    out = []
    for _ in range(n):
        item = sub.get(timeout=WAIT)
        assert item is not None, f"item {len(out) + 1} of {n} did not arrive within {WAIT}s"
        out.append(item)
    return out


def _text(item: Event | Record) -> str:
    return item.text if isinstance(item, Event) else item.event().text


def in_thread(fn: Callable[[], object]) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


# -- stream subscriptions ------------------------------------------------------------


def test_a_subscription_delivers_the_backlog_then_live_events(log: Log) -> None:
    """Events already stored come first, then events appended later, each once, in order."""
    log.append("s", [ev("1"), ev("2"), ev("3")])
    with subscribe(log, "s", after_seq=0, poll_floor=NEVER) as sub:
        assert [e.text for e in take(sub, 3)] == ["1", "2", "3"]
        t = in_thread(lambda: log.append("s", [ev("4"), ev("5")]))
        assert [(e.seq, e.text) for e in take(sub, 2)] == [(4, "4"), (5, "5")]
        t.join(WAIT)
        assert sub.drain() == []
        assert sub.last_seq == 5


def test_a_subscription_starts_after_the_seq_it_joined_at(log: Log) -> None:
    """subscribe(after_seq=k) delivers seq k+1 onward and nothing before it."""
    log.append("s", [ev(str(i)) for i in range(1, 8)])
    with subscribe(log, "s", after_seq=4) as sub:
        assert [e.seq for e in sub.drain()] == [5, 6, 7]


def test_a_subscription_sees_only_its_own_stream(log: Log) -> None:
    """Appends to other streams are neither delivered nor counted."""
    log.append("other", [ev("x")])
    log.append("s", [ev("a")])
    log.append("other", [ev("y")])
    with subscribe(log, "s") as sub:
        assert [e.text for e in sub.drain()] == ["a"]


def test_a_kinds_filter_delivers_only_those_kinds(log: Log) -> None:
    """subscribe(kinds=...) skips other kinds, live and backlog; no kinds means all."""
    log.append("s", [ev("u1", Kind.USER_MESSAGE), ev("a1"), ev("t1", Kind.TOOL_CALL)])
    with (
        subscribe(log, "s", kinds=[Kind.USER_MESSAGE, Kind.TOOL_CALL], poll_floor=NEVER) as sub,
        subscribe(log, "s", kinds=[]) as everything,
    ):
        assert [e.text for e in take(sub, 2)] == ["u1", "t1"]
        log.append("s", [ev("a2"), ev("u2", Kind.USER_MESSAGE)])
        assert [(e.seq, e.text) for e in take(sub, 1)] == [(5, "u2")]
        assert sub.drain() == []
        assert len(everything.drain()) == 5


def test_iteration_blocks_for_live_events_and_ends_when_closed(log: Log) -> None:
    """`for e in sub` yields events as they come and stops once the subscription closes."""
    sub = subscribe(log, "s", poll_floor=NEVER)
    got: list[str] = []
    first = threading.Event()

    def consume() -> None:
        for e in sub:
            got.append(e.text)
            first.set()

    t = in_thread(consume)
    log.append("s", [ev("a")])
    assert first.wait(WAIT)
    sub.close()
    t.join(WAIT)
    assert not t.is_alive() and got == ["a"]


def test_closing_wakes_a_reader_blocked_without_a_deadline(log: Log) -> None:
    """A reader waiting with no timeout and no poll floor in sight returns when closed."""
    sub = subscribe(log, "s", poll_floor=NEVER)
    outcome: list[BaseException] = []
    waiting = threading.Event()

    def block() -> None:
        waiting.set()
        try:
            sub.get()
        except BaseException as exc:
            outcome.append(exc)

    t = in_thread(block)
    assert waiting.wait(WAIT)
    sub.close()
    t.join(WAIT)
    assert not t.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], SubscriptionClosedError)
    assert sub.closed


def test_a_closed_subscription_refuses_reads(log: Log) -> None:
    """get() after close raises SubscriptionClosedError; closing again is harmless."""
    log.append("s", [ev("a")])
    sub = subscribe(log, "s")
    sub.close()
    sub.close()
    with pytest.raises(SubscriptionClosedError):
        sub.get(timeout=0)
    assert list(sub) == []


def test_get_record_hands_out_stored_bytes_without_decoding(log: Log) -> None:
    """get_record() gives the stored Record, for passing on as bytes."""
    res = log.append("s", [ev("a")])
    with subscribe(log, "s") as sub:
        assert sub.get_record(timeout=WAIT) == res.records[0]


@pytest.mark.parametrize(
    "call",
    [
        lambda log: subscribe(log, "bad id"),
        lambda log: subscribe(log, "s", after_seq=-1),
        lambda log: subscribe(log, "s", poll_floor=float("nan")),
        lambda log: subscribe(log, "s", poll_floor="1"),  # type: ignore[arg-type]
        lambda log: subscribe(log, "s", kinds="user.message"),
        lambda log: subscribe_all(log, after_position=-2),
    ],
)
def test_a_subscription_with_bad_arguments_is_refused(
    log: Log, call: Callable[[Log], object]
) -> None:
    """Invalid ids, negative starts, a poll floor that is not a number or a bare kind are misuse."""
    with pytest.raises(InvalidArgumentError):
        call(log)


@pytest.mark.parametrize("floor", [0, 0.0, -1.0])
def test_a_non_positive_poll_floor_disables_the_floor_and_wakes_still_deliver(
    log: Log, floor: float
) -> None:
    """poll_floor <= 0 turns the floor off: backlog and woken live events still arrive."""
    log.append("s", [ev("1"), ev("2")])
    with (
        subscribe(log, "s", poll_floor=floor) as sub,
        subscribe_all(log, poll_floor=floor) as every,
    ):
        assert [e.text for e in take(sub, 2)] == ["1", "2"]
        assert [_text(r) for r in take(every, 2)] == ["1", "2"]
        t = in_thread(lambda: log.append("s", [ev("3")]))
        assert [(e.seq, e.text) for e in take(sub, 1)] == [(3, "3")]
        assert [_text(r) for r in take(every, 1)] == ["3"]
        t.join(WAIT)
        assert sub.drain() == [] and every.drain() == []
        assert sub.get(timeout=0.01) is None


class _WatchedDeafWakeup(_DeafWakeup):
    """A lost-wakes signal that says when a reader has begun waiting on it."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = threading.Event()

    def wait(self, seen: int, timeout: float | None, stream: str | None = None) -> int:
        self.waiting.set()
        return super().wait(seen, timeout, stream)


def test_without_a_floor_a_lost_wake_is_not_recovered_by_polling() -> None:
    """With the floor off wakes are the only liveness signal; the next wake brings it all."""
    log = MemoryLog()
    wake = log.wakeup = _WatchedDeafWakeup()
    sub = subscribe(log, "s", poll_floor=0)
    got: list[Event] = []
    t = in_thread(lambda: got.extend([next(sub), next(sub)]))
    assert wake.waiting.wait(WAIT)
    log.append("s", [ev("a"), ev("b")])
    t.join(0.3)
    assert t.is_alive() and got == []
    Wakeup.bump(wake)
    t.join(WAIT)
    assert not t.is_alive() and [e.text for e in got] == ["a", "b"]
    sub.close()


def test_a_subscription_to_an_invalid_id_names_the_problem(log: Log) -> None:
    """The refusal says why the id is unusable."""
    with pytest.raises(InvalidStreamIdError, match="wildcard"):
        subscribe(log, "chat-*")


# -- wakes are hints -----------------------------------------------------------------


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_delivery_stays_exactly_once_and_in_order_when_every_wake_is_lost(
    backend: str, tmp_path: pathlib.Path
) -> None:
    """With no wake ever raised, the poll floor alone still delivers everything, in order."""
    log = _deaf(BACKENDS[backend](tmp_path))
    try:
        with subscribe(log, "s", poll_floor=0.005) as sub:
            t = in_thread(
                lambda: [log.append("s", [ev(f"{b}-{i}") for i in range(3)]) for b in range(10)]
            )
            got = take(sub, 30)
            t.join(WAIT)
            assert [e.seq for e in got] == list(range(1, 31))
            assert [e.text for e in got] == [f"{b}-{i}" for b in range(10) for i in range(3)]
            assert sub.drain() == []
    finally:
        log.close()


def test_a_closed_subscription_with_lost_wakes_ends_by_its_poll_floor(
    tmp_path: pathlib.Path,
) -> None:
    """Even the close wake may be lost: the blocked reader notices at its next poll."""
    log = _deaf(MemoryLog())
    sub = subscribe(log, "s", poll_floor=0.005)
    result: list[BaseException] = []
    t = in_thread(lambda: result.extend(_raises(sub.get)))
    sub.close()
    t.join(WAIT)
    assert not t.is_alive() and isinstance(result[0], SubscriptionClosedError)


def _raises(fn: Callable[[], object]) -> list[BaseException]:
    try:
        fn()
    except BaseException as exc:
        return [exc]
    return []


def _remote_appender(path: str, n: int, go: Any) -> None:
    """Child process: once told, append ``n`` events to stream ``s``, one commit each."""
    with SqliteLog(path) as log:
        if not go.wait(WAIT * 3):
            raise RuntimeError("never told to append")
        for i in range(n):
            log.append("s", [ev(f"remote-{i}")])


def test_appends_from_another_process_wake_a_subscriber_here(tmp_path: pathlib.Path) -> None:
    """A writer in another OS process wakes this process's subscriber (no poll floor used)."""
    path = str(tmp_path / "spine.db")
    ctx = mp.get_context("spawn")
    go = ctx.Event()
    p = ctx.Process(target=_remote_appender, args=(path, 20, go))
    p.start()
    try:
        with SqliteLog(path) as log, subscribe(log, "s", poll_floor=NEVER) as sub:
            assert sub.drain() == []
            go.set()
            got = take(sub, 20)
            assert [(e.seq, e.text) for e in got] == [(i + 1, f"remote-{i}") for i in range(20)]
        p.join(WAIT * 3)
        assert p.exitcode == 0
    finally:
        if p.is_alive():
            p.kill()


def test_a_slow_subscriber_holds_back_only_itself(log: Log) -> None:
    """One subscriber not reading blocks neither appends nor a fast subscriber."""
    n = 2500  # more than a page, so the slow one's bounded buffer is exceeded
    with (
        subscribe(log, "s", poll_floor=NEVER) as slow,
        subscribe(log, "s", poll_floor=NEVER) as fast,
    ):
        assert slow.get(timeout=0) is None
        done = threading.Event()

        def write() -> None:
            for b in range(0, n, 100):
                log.append("s", [ev(str(i)) for i in range(b, b + 100)])
            done.set()

        t = in_thread(write)
        got = take(fast, n)
        assert done.wait(WAIT)
        t.join(WAIT)
        assert [e.seq for e in got] == list(range(1, n + 1))
        late = slow.drain()
        assert [e.seq for e in late] == list(range(1, n + 1))


# -- subscriptions over all streams --------------------------------------------------


def test_subscribe_all_delivers_every_stream_in_commit_order(log: Log) -> None:
    """subscribe_all yields records of all streams by global position, backlog then live."""
    log.append("a", [ev("1")])
    log.append("b", [ev("2"), ev("3")])
    with subscribe_all(log, poll_floor=NEVER) as sub:
        assert [(r.stream, r.position) for r in take(sub, 3)] == [("a", 1), ("b", 2), ("b", 3)]
        in_thread(lambda: (log.append("c", [ev("4")]), log.append("a", [ev("5")])))
        live = take(sub, 2)
        assert [(r.stream, r.seq, r.position) for r in live] == [("c", 1, 4), ("a", 2, 5)]
        assert sub.position == 5


def test_subscribe_all_starts_after_a_position_and_filters_kinds(log: Log) -> None:
    """after_position skips what a reader already folded; kinds filters across streams."""
    log.append("a", [ev("1", Kind.USER_MESSAGE), ev("2")])
    log.append("b", [ev("3", Kind.USER_MESSAGE), ev("4", Kind.USER_MESSAGE)])
    with subscribe_all(log, after_position=3, kinds=[Kind.USER_MESSAGE]) as sub:
        assert [r.position for r in sub.drain()] == [4]
    with subscribe_all(log, kinds=[Kind.USER_MESSAGE]) as sub:
        assert [_text(r) for r in sub.drain()] == ["1", "3", "4"]


# -- exactly once, in order, under any interleaving ----------------------------------


def test_concurrent_writers_reach_every_subscriber_exactly_once_in_order(log: Log) -> None:
    """Writer threads on two streams; subscribers joined at different seqs all see their tail."""
    writers, batches, size = 3, 30, 2
    log.append("a", [ev("pre-1"), ev("pre-2"), ev("pre-3")])
    total_a = 3 + writers * batches * size
    subs = {k: subscribe(log, "a", after_seq=k, poll_floor=NEVER) for k in (0, 2, 3)}
    every = subscribe_all(log, poll_floor=NEVER)
    start = threading.Barrier(writers + 1, timeout=WAIT)

    def write(w: int) -> None:
        start.wait()
        for b in range(batches):
            log.append("a", [ev(f"{w}:{b}:{i}") for i in range(size)])
            log.append("b", [ev(f"{w}:{b}")])

    threads = [in_thread(lambda w=w: write(w)) for w in range(writers)]
    start.wait()
    # One more subscriber joins while the writers run, at whatever seq the stream is at.
    joined_at = log.last_seq("a")
    subs[joined_at] = subs.get(joined_at) or subscribe(log, "a", joined_at, poll_floor=NEVER)
    try:
        results = {k: take(s, total_a - k) for k, s in subs.items()}
        all_records = take(every, total_a + writers * batches)
        for t in threads:
            t.join(WAIT)
        stored = log.read("a", 0, None)
        for k, got in results.items():
            assert [e.seq for e in got] == list(range(k + 1, total_a + 1))
            assert [e.text for e in got] == [r.event().text for r in stored[k:]]
            assert subs[k].drain() == []
        assert [r.position for r in all_records] == list(range(1, len(all_records) + 1))
        assert every.drain() == []
    finally:
        for s in subs.values():
            s.close()
        every.close()


_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("append"),
            st.sampled_from(["a", "b"]),
            st.integers(1, 3),
            st.sampled_from([Kind.ASSISTANT, Kind.USER_MESSAGE]),
            st.integers(0, 2),
        ),
        st.tuples(st.just("join"), st.integers(0, 30), st.booleans(), st.booleans()),
        st.tuples(st.just("take"), st.integers(0, 7), st.integers(1, 4)),
    ),
    max_size=30,
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(backend=st.sampled_from(sorted(BACKENDS)), ops=_ops)
def test_any_interleaving_reaches_each_subscriber_exactly_once_in_order(
    backend: str, ops: list[tuple[Any, ...]]
) -> None:
    """Appends by several writers, joins at any seq and partial reads, interleaved any way:
    each subscriber ends with exactly the stored events after its start, in order, filtered."""
    with tempfile.TemporaryDirectory() as tmp:
        log = BACKENDS[backend](pathlib.Path(tmp))
        # Writers: the subscribers' own log and, for a file, other connections to it.
        writers = [log] + [
            SqliteLog(pathlib.Path(tmp) / "spine.db") if backend == "sqlite" else log
            for _ in range(2)
        ]
        subs: list[tuple[StreamSubscription | AllSubscription, int, list[str] | None]] = []
        got: list[list[Any]] = []
        counter = 0
        try:
            for op in ops:
                if op[0] == "append":
                    _, stream, size, kind, w = op
                    writers[w].append(stream, [ev(f"e{counter + i}", kind) for i in range(size)])
                    counter += size
                elif op[0] == "join":
                    _, at, over_all, filtered = op
                    kinds = [Kind.USER_MESSAGE] if filtered else None
                    if over_all:
                        start = min(at, log.last_position())
                        subs.append(
                            (subscribe_all(log, start, kinds, poll_floor=NEVER), start, kinds)
                        )
                    else:
                        start = min(at, log.last_seq("a"))
                        subs.append(
                            (subscribe(log, "a", start, kinds, poll_floor=NEVER), start, kinds)
                        )
                    got.append([])
                elif subs:
                    _, which, n = op
                    i = which % len(subs)
                    for _ in range(n):
                        item = subs[i][0].get(timeout=0)
                        if item is None:
                            break
                        got[i].append(item)
            for i, (sub, start, kinds) in enumerate(subs):
                got[i].extend(sub.drain())
                if isinstance(sub, AllSubscription):
                    want = log.read_all(start, None, kinds)
                    assert [(r.stream, r.position) for r in got[i]] == [
                        (r.stream, r.position) for r in want
                    ]
                else:
                    want = log.read("a", start, None, kinds)
                    assert [(e.seq, e.text) for e in got[i]] == [
                        (r.seq, r.event().text) for r in want
                    ]
        finally:
            for sub, _, _ in subs:
                sub.close()
            for w in writers:
                w.close()


def test_a_commit_right_after_watch_returns_is_noticed(tmp_path: pathlib.Path) -> None:
    """watch() has its baseline before returning: a commit by another writer right after
    it (here another connection, whose own wakes go elsewhere) still raises a wake."""
    _commits_by_another_connection_wake(tmp_path / "spine.db", 20)


def _commits_by_another_connection_wake(path: pathlib.Path, rounds: int) -> None:
    """Each round: watch, commit through another connection, expect a wake."""
    with SqliteLog(path) as log, SqliteLog(path) as other:
        for round_ in range(rounds):
            seen = log.wakeup.generation
            log.watch()
            try:
                other.append("s", [ev(str(round_))])
                assert log.wakeup.wait(seen, WAIT) != seen, f"round {round_}: no wake"
            finally:
                log.unwatch()


class _CountingReads:
    """Counts reads of each stream on the wrapped log."""

    def __init__(self, log: Log) -> None:
        self._log = log
        self.reads: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    def read(self, stream: str, *args: Any, **kwargs: Any) -> Any:
        self.reads[stream] = self.reads.get(stream, 0) + 1
        return self._log.read(stream, *args, **kwargs)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_a_subscriber_does_not_reread_the_log_when_only_other_streams_move(
    backend: str, tmp_path: pathlib.Path
) -> None:
    """Wakes say which streams moved: commits to "b" cost a subscriber of "a" no query,
    and its own stream's next event still arrives at once."""
    log = BACKENDS[backend](tmp_path)
    counting = _CountingReads(log)
    try:
        with subscribe(counting, "a", poll_floor=60) as sub:  # type: ignore[arg-type]
            got: list[Any] = []
            t = in_thread(lambda: got.append(sub.get(WAIT)))
            for i in range(50):
                log.append("b", [ev(f"b{i}")])
            log.append("a", [ev("for a")])
            t.join(WAIT)
            assert got and got[0] is not None and got[0].text == "for a"
            # The first read, perhaps one racing the wakes, and the one that found "a".
            assert counting.reads["a"] <= 4, counting.reads
    finally:
        log.close()


def test_marks_from_another_process_wake_only_the_stream_that_moved(
    tmp_path: pathlib.Path,
) -> None:
    """Across connections the watcher reads which streams the new rows belong to; a
    filtered subscriber whose stream only got other kinds reads once, not per commit."""
    writer = SqliteLog(tmp_path / "spine.db")
    reader = SqliteLog(tmp_path / "spine.db")
    counting = _CountingReads(reader)
    try:
        writer.append("a", [Event(kind=Kind.USER_MESSAGE, text="a0")])
        with subscribe(counting, "a", kinds=["assistant.message"], poll_floor=60) as sub:  # type: ignore[arg-type]
            assert sub.get(0) is None
            base = counting.reads["a"]
            got: list[Any] = []
            t = in_thread(lambda: got.append(sub.get(WAIT)))
            writer.append("a", [Event(kind=Kind.USER_MESSAGE, text="not wanted")])
            for i in range(30):
                writer.append("b", [ev(f"b{i}")])
            writer.append("a", [Event(kind=Kind.ASSISTANT, text="wanted")])
            t.join(WAIT)
            assert got and got[0] is not None and got[0].text == "wanted"
            assert counting.reads["a"] - base <= 6, counting.reads
    finally:
        reader.close()
        writer.close()


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_a_filtered_subscriber_does_not_reread_for_kinds_it_does_not_want(
    backend: str, tmp_path: pathlib.Path
) -> None:
    """Marks are per kind: thirty user messages on its own stream cost a subscriber to
    assistant messages no query; the assistant message after them arrives at once."""
    log = BACKENDS[backend](tmp_path)
    counting = _CountingReads(log)
    try:
        with subscribe(counting, "a", kinds=["assistant.message"], poll_floor=60) as sub:  # type: ignore[arg-type]
            got: list[Any] = []
            t = in_thread(lambda: got.append(sub.get(WAIT)))
            for i in range(30):
                log.append("a", [Event(kind=Kind.USER_MESSAGE, text=f"u{i}")])
            log.append("a", [Event(kind=Kind.ASSISTANT, text="wanted")])
            t.join(WAIT)
            assert got and got[0] is not None and got[0].text == "wanted"
            assert counting.reads["a"] <= 4, counting.reads
    finally:
        log.close()


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_a_waiting_get_reads_only_when_the_marks_show_news_for_it(
    backend: str, tmp_path: pathlib.Path
) -> None:
    """A tail asks again after each event it gets. A get that waits trusts the marks from
    its first pass: one read per event it gets, not one more at each call that finds
    nothing yet (every other read of a tailing Host)."""
    log = BACKENDS[backend](tmp_path)
    counting = _CountingReads(log)
    try:
        with subscribe(counting, "a", kinds=["assistant.message"], poll_floor=NEVER) as sub:  # type: ignore[arg-type]
            assert sub.get(0) is None
            base = counting.reads["a"]
            for i in range(5):
                assert sub.get(0.01) is None
                log.append("a", [Event(kind=Kind.USER_MESSAGE, text=f"u{i}")])
                assert sub.get(0.01) is None
                log.append("a", [Event(kind=Kind.ASSISTANT, text=f"a{i}")])
                got = sub.get(WAIT)
                assert got is not None and got.text == f"a{i}"
            assert counting.reads["a"] - base == 5, counting.reads
    finally:
        log.close()


def test_a_get_that_does_not_wait_reads_what_is_committed_though_no_mark_says_so() -> None:
    """``get(0)`` and ``drain`` answer with what is committed now, whether or not a wake
    has reported it yet (the marks here never report stream "a")."""
    log = MemoryLog()
    log.wakeup = _BlindToA()
    try:
        with subscribe(log, "a", poll_floor=NEVER) as sub:
            assert sub.get(0) is None
            log.append("a", [ev("one")])
            got = sub.get(0)
            assert got is not None and got.text == "one"
            log.append("a", [ev("two"), ev("three")])
            assert [e.text for e in sub.drain()] == ["two", "three"]
    finally:
        log.close()


class _BlindToA(Wakeup):
    """Bumps, but never marks stream "a": an append the marks miss. ``waiting`` is set
    once a reader waits on it."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = threading.Event()

    def bump(self, marks: Any = None) -> None:
        super().bump(None if marks is None else [m for m in marks if m[0] != "a"])

    def wait(self, seen: int, timeout: float | None, stream: str | None = None) -> int:
        self.waiting.set()
        return super().wait(seen, timeout, stream)


def test_the_poll_floor_still_reads_while_wakes_for_other_streams_keep_coming() -> None:
    """Even if the marks missed an append and other streams wake the subscriber all the
    time, it reads on its floor: a lost mark costs latency, never the event."""
    log = MemoryLog()
    wake = log.wakeup = _BlindToA()
    stop = threading.Event()

    def chatter() -> None:
        while not stop.is_set():
            log.append("b", [ev("noise")])
            stop.wait(0.002)

    try:
        with subscribe(log, "a", poll_floor=0.05) as sub:
            t = in_thread(chatter)
            got: list[Any] = []
            reader = in_thread(lambda: got.append(sub.get(WAIT)))
            assert wake.waiting.wait(WAIT)  # the reader is blocked before the append
            t0 = time.monotonic()
            log.append("a", [ev("missed by the marks")])
            reader.join(WAIT)
            took = time.monotonic() - t0
            assert got and got[0] is not None and got[0].text == "missed by the marks"
            assert took < 2.0, f"the floor is 0.05 s; the event took {took:.2f} s"
            stop.set()
            t.join(WAIT)
    finally:
        stop.set()
        log.close()


# -- PostgreSQL: wakes by LISTEN/NOTIFY ---------------------------------------------


def test_a_commit_through_another_connection_wakes_a_postgres_subscriber_by_notify(
    pg_url: str,
) -> None:
    """With the poll floor out of the way, only the notification can deliver the event
    committed through another connection, and it does; so does a batch after it."""
    writer, reader = open_log(pg_url), open_log(pg_url)
    try:
        with subscribe(reader, "a", poll_floor=0) as sub:
            assert sub.get(0) is None
            got: list[Any] = []
            t = in_thread(lambda: got.extend([sub.get(WAIT), sub.get(WAIT), sub.get(WAIT)]))
            writer.append("a", [ev("one")])
            writer.append("a", [ev("two"), ev("three")])
            t.join(WAIT)
            assert [e.text for e in got if e is not None] == ["one", "two", "three"]
    finally:
        reader.close()
        writer.close()


def test_notifications_wake_only_the_postgres_subscriber_whose_stream_moved(
    pg_url: str,
) -> None:
    """A notification names its stream and kinds: commits elsewhere cost a subscriber of
    "a" (filtered by kind) no query, and what it wants still arrives at once."""
    writer, reader = open_log(pg_url), open_log(pg_url)
    counting = _CountingReads(reader)
    try:
        with subscribe(counting, "a", kinds=["assistant.message"], poll_floor=60) as sub:  # type: ignore[arg-type]
            assert sub.get(0) is None
            base = counting.reads["a"]
            got: list[Any] = []
            t = in_thread(lambda: got.append(sub.get(WAIT)))
            writer.append("a", [Event(kind=Kind.USER_MESSAGE, text="not wanted")])
            for i in range(30):
                writer.append("b", [ev(f"b{i}")])
            writer.append("a", [Event(kind=Kind.ASSISTANT, text="wanted")])
            t.join(WAIT)
            assert got and got[0] is not None and got[0].text == "wanted"
            assert counting.reads["a"] - base <= 6, counting.reads
    finally:
        reader.close()
        writer.close()


def test_the_watchers_look_at_what_moved_reads_only_the_new_rows(tmp_path: pathlib.Path) -> None:
    """Each change costs the watcher the rows it brought, not a walk of the whole log: the
    query goes by position (the rowid), which SQLite's planner left for the (stream, seq)
    index when it grouped."""
    import sqlite3

    from spine._sqlite import _MOVED

    path = tmp_path / "spine.db"
    with SqliteLog(path) as log:
        for i in range(40):
            log.append(f"s{i % 4}", [ev(str(i)), ev(str(i), kind=Kind.USER_MESSAGE)])
        c = sqlite3.connect(path)
        try:
            plan = " ".join(r[3] for r in c.execute("EXPLAIN QUERY PLAN " + _MOVED, (70,)))
            moved = sorted(c.execute(_MOVED, (76,)).fetchall())
        finally:
            c.close()
    assert "INTEGER PRIMARY KEY" in plan and "SCAN" not in plan, plan
    assert moved == [
        ("s2", Kind.ASSISTANT, 19, 77),
        ("s2", Kind.USER_MESSAGE, 20, 78),
        ("s3", Kind.ASSISTANT, 19, 79),
        ("s3", Kind.USER_MESSAGE, 20, 80),
    ]


def test_an_idle_watcher_sleeps_until_the_log_is_written_then_wakes_at_once(
    tmp_path: pathlib.Path,
) -> None:
    """Following an idle log costs no polling: the kernel says when its files are written."""
    path = tmp_path / "spine.db"
    with SqliteLog(path) as log, SqliteLog(path) as other:
        log.watch()
        try:
            seen = log.wakeup.generation
            other.append("s", [ev("first")])
            seen = log.wakeup.wait(seen, WAIT)
            before = log.watch_checks
            # A quarter of a second idle: polling every millisecond would ask ~250 times.
            threading.Event().wait(0.25)
            assert log.watch_checks - before < 25, log.watch_checks - before
            other.append("s", [ev("second")])
            assert log.wakeup.wait(seen, WAIT) != seen
        finally:
            log.unwatch()


def test_without_inotify_the_watcher_polls_and_still_wakes(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the kernel cannot tell of writes, the watcher polls every interval as before."""
    from spine import _filewatch

    monkeypatch.setattr(_filewatch, "_load_libc", lambda: None)
    _commits_by_another_connection_wake(tmp_path / "spine.db", 5)


class _CountingWakeup(Wakeup):
    """Counts how often a waiter came back from a wait."""

    def __init__(self) -> None:
        super().__init__()
        self.returns = 0
        self.waiting = threading.Event()

    def wait(self, seen: int, timeout: float | None, stream: str | None = None) -> int:
        self.waiting.set()
        out = super().wait(seen, timeout, stream)
        self.returns += 1
        return out


def test_a_subscriber_sleeps_through_other_streams_commits_and_wakes_for_its_own() -> None:
    """Many sessions' subscribers in one process: one commit wakes only its stream's."""
    log = MemoryLog()
    wake = log.wakeup = _CountingWakeup()
    try:
        with subscribe(log, "a", poll_floor=NEVER) as sub:
            got: list[Any] = []
            reader = in_thread(lambda: got.append(sub.get(WAIT)))
            assert wake.waiting.wait(WAIT)
            before = wake.returns
            for i in range(200):
                log.append("b", [ev(f"b{i}")])
            assert wake.returns == before  # not one of the 200 woke it
            log.append("a", [ev("for a")])
            reader.join(WAIT)
            assert got and got[0] is not None and got[0].text == "for a"
    finally:
        log.close()


def test_closing_a_stream_subscription_wakes_its_reader_without_waking_others() -> None:
    """close() pokes only the closed subscription's stream."""
    log = MemoryLog()
    wake = log.wakeup = _CountingWakeup()
    try:
        other = subscribe(log, "b", poll_floor=NEVER)
        other_got: list[Any] = []
        other_reader = in_thread(lambda: other_got.append(other.get(WAIT)))
        sub = subscribe(log, "a", poll_floor=NEVER)
        ended: list[BaseException] = []

        def read_a() -> None:
            try:
                sub.get(WAIT)
            except BaseException as exc:  # the closed subscription raises
                ended.append(exc)

        reader = in_thread(read_a)
        wait_for(lambda: wake.waiting.is_set() and len(wake._waiting) == 2)
        sub.close()
        reader.join(WAIT)
        assert not reader.is_alive() and ended
        log.append("b", [ev("for b")])
        other_reader.join(WAIT)
        assert other_got and other_got[0].text == "for b"
        other.close()
    finally:
        log.close()
