"""The Host on ``simpleSystemBase`` (everything in this process): sink acknowledgements,
subscriptions that end with their session, and a clean close with a turn running."""

from __future__ import annotations

import pathlib
import threading
import time
from collections.abc import Iterator

import pytest
from actor_helpers import FailingFactory, PlainFactory

from actors.host import Host, SessionSubscription
from spine import Event, Kind, Phase

#: Sessions x turns each: over 1,000 sink batches (the Runner's per-sink max_pending),
#: while each stream stays short.
SESSIONS, TURNS = 40, 28


def until_end(sub: SessionSubscription, bound: float = 10.0) -> list[Event]:
    """What ``sub`` hands out until it ends; fails if it has not ended within ``bound``."""
    out: list[Event] = []
    deadline = time.monotonic() + bound
    while (ev := sub.get(max(0.0, deadline - time.monotonic()))) is not None:
        out.append(ev)
    assert sub.closed, "the subscription did not end"
    return out


@pytest.fixture
def host(tmp_path: pathlib.Path) -> Iterator[Host]:
    h = Host(tmp_path / "data", base="simpleSystemBase", timeout=20)
    try:
        yield h
    finally:
        h.close()


def test_more_sink_batches_than_max_pending_are_all_delivered_on_the_simple_base(
    host: Host,
) -> None:
    """Every batch is acknowledged, so none is dropped after the first 1,000 and the sink
    sees every turn."""
    ended: set[tuple[str, int]] = set()
    all_seen = threading.Event()

    def sink(sid: str, ev, live) -> None:  # type: ignore[no-untyped-def]
        if ev is not None and ev.kind == Kind.TURN_COMPLETED:
            ended.add((sid, ev.seq))
            if len(ended) == SESSIONS * TURNS:
                all_seen.set()

    host.add_sink(sink, kinds=[Kind.TURN_COMPLETED])
    sids = [host.create() for _ in range(SESSIONS)]
    for _ in range(TURNS):
        for sid in sids:
            host.wait_turn(sid, host.send(sid, "hi").seq, timeout=10)
    assert all_seen.wait(20), len(ended)
    stats = host.stats()
    assert stats["sink_delivered"] > 1000
    assert stats["sink_dropped"] == 0


def test_a_sink_sees_a_commands_notice_before_the_message_that_follows_it(
    host: Host,
) -> None:
    """Live items are delivered where they happened among the stored events."""
    order: list[str] = []
    answered = threading.Event()

    def sink(sid: str, ev, live) -> None:  # type: ignore[no-untyped-def]
        order.append(live[0] if live else f"{ev.kind}:{ev.text}")
        if ev is not None and ev.kind == Kind.TURN_COMPLETED:
            answered.set()

    host.add_sink(sink, kinds=["notice", Kind.USER_MESSAGE, Kind.TURN_COMPLETED])
    sid = host.create()
    host.send(sid, "/help")
    host.send(sid, "hi")
    assert answered.wait(20)
    assert order.index("notice") < order.index(f"{Kind.USER_MESSAGE}:hi")


def test_subscribing_to_a_closed_session_ends_after_its_backlog(host: Host) -> None:
    """The seed's immediately closed channel: backlog up to the closing event, then the
    iteration stops, with or without a kinds filter."""
    sid = host.create()
    host.wait_turn(sid, host.send(sid, "hi").seq)
    host.close_session(sid)
    stored = host.history(sid)
    with host.subscribe(sid) as sub:
        got = until_end(sub)
    assert [e.seq for e in got] == [e.seq for e in stored]
    assert got[-1].kind == Kind.LIFECYCLE and got[-1].phase == Phase.CLOSED
    with host.subscribe(sid, kinds=[Kind.USER_MESSAGE]) as sub:
        assert [e.text for e in until_end(sub)] == ["hi"]


def test_a_subscription_ends_when_its_session_closes(host: Host) -> None:
    """A reader blocked on a live session sees the closing event and its loop ends."""
    sid = host.create()
    last = host.history(sid)[-1].seq
    kinds: list[str] = []
    with host.subscribe(sid, last) as sub:
        reader = threading.Thread(target=lambda: kinds.extend(e.kind for e in sub), daemon=True)
        reader.start()
        host.close_session(sid)
        reader.join(10)
        assert not reader.is_alive()
    assert kinds[-1] == Kind.LIFECYCLE


def test_closing_the_host_with_a_turn_running_raises_in_no_thread(
    tmp_path: pathlib.Path,
) -> None:
    """close() stops the pump, then the system; the running turn's worker, which goes on
    producing output after the close, must not die on the shut-down system."""
    raised: list[threading.ExceptHookArgs] = []
    before = set(threading.enumerate())
    previous = threading.excepthook
    threading.excepthook = raised.append
    try:
        h = Host(tmp_path / "data", base="simpleSystemBase", timeout=20)
        try:
            sid = h.create()
            words = " ".join(f"w{i}" for i in range(20))
            ack = h.send(sid, f"!slow 0.05 {words}")
            with h.subscribe(sid, ack.seq, kinds=[Kind.TURN_STARTED]) as sub:
                assert sub.get(10) is not None
        finally:
            h.close()
        # The turn (about a second of output) outlives the close: wait for every thread
        # this test started to finish, or for a bound.
        deadline = time.monotonic() + 10
        for t in set(threading.enumerate()) - before:
            t.join(max(0.0, deadline - time.monotonic()))
        assert not any(t.name == "vertebra-pump" for t in threading.enumerate())
    finally:
        threading.excepthook = previous
    assert [f"{a.thread.name if a.thread else '?'}: {a.exc_value!r}" for a in raised] == []


def test_the_host_checkpoints_the_wal_that_its_sessions_leave_alone(host: Host) -> None:
    """Sessions defer the WAL's checkpoints (their acks never wait for one); the Host
    that owns the system runs them in the background."""
    from conftest import wait_for

    from spine import SqliteLog

    assert isinstance(host._log, SqliteLog)
    sid = host.create()
    ack = host.send(sid, "hello")
    host.wait_turn(sid, ack.seq, timeout=20)
    wait_for(lambda: host._log.checkpoints >= 1, timeout=20)


def test_a_custom_agents_turns_leave_no_model_call_running(tmp_path: pathlib.Path) -> None:
    """A factory of the caller's own whose agent ignores governance: each turn's model
    call, admitted at the turn's start, is completed by the turn's end (fault error when
    the agent failed, also when the factory cannot build one), so the status ledger shows
    no running row and admitted == completed."""
    for factory, texts, faults in (
        (PlainFactory(), ("hi", "fail", "again"), ["", "error", ""]),
        (FailingFactory(), ("hi",), ["error"]),
    ):
        h = Host(tmp_path / type(factory).__name__, base="simpleSystemBase", factory=factory)
        try:
            sid = h.create()
            for text in texts:
                h.wait_turn(sid, h.send(sid, text).seq, timeout=10)
            evs = h.history(sid)
            done = [e for e in evs if e.kind == Kind.ACTION_COMPLETED and e.action == "model"]
            assert [e.fault for e in done] == faults
            admitted = [e.call for e in evs if e.kind == Kind.ACTION_ADMITTED]
            assert [e.call for e in done] == admitted
            for e in done:  # each settled before its turn's end
                ended = next(x for x in evs if x.kind == Kind.TURN_COMPLETED and x.seq > e.seq)
                assert ended.turn == e.turn
            p = h.status(sid)
            assert p.admitted == p.completed == len(texts)
            assert [a.state for a in p.actions] == ["done"] * len(texts)
        finally:
            h.close()
