"""The mailslot: how a turn's threads reach their session without touching Thespian's
transport from a foreign thread."""

from __future__ import annotations

import concurrent.futures
import pathlib
import select
import threading
from typing import Any

import pytest

from actors._runtime.mailslot import Mailslot
from actors.host.host import Host
from spine import Kind

WAIT = 10.0


def test_every_put_wakes_the_reader_and_arrives_once_in_put_order_per_thread() -> None:
    slot = Mailslot()
    writers, each = 4, 500
    start = threading.Barrier(writers)

    def put(w: int) -> None:
        start.wait(WAIT)
        for i in range(each):
            assert slot.put((w, i))

    threads = [threading.Thread(target=put, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    got: list[tuple[int, int]] = []
    while len(got) < writers * each:
        # Woken by the pipe, as the transport's select would be; never by polling.
        ready, _, _ = select.select([slot.fileno()], [], [], WAIT)
        assert ready, f"no wake-up with {len(got)} of {writers * each} taken"
        got.extend(slot.take())
    for t in threads:
        t.join(WAIT)
    assert sorted(got) == [(w, i) for w in range(writers) for i in range(each)]
    for w in range(writers):
        assert [i for v, i in got if v == w] == list(range(each))
    # Nothing left over and no stale wake-up makes the reader think otherwise.
    assert slot.take() == []


def test_a_closed_slot_refuses_puts_and_keeps_its_descriptor() -> None:
    slot = Mailslot()
    assert slot.put("a")
    slot.close()
    assert not slot.put("b")
    assert slot.take() == ["a"]
    select.select([slot.fileno()], [], [], 0)  # still a valid descriptor


def test_many_concurrent_turns_in_session_processes_all_end(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """The integration check of the hand-back path: turns in many session processes at
    once, each one's end awaited with a bound. Before the mailslot, a turn's end was lost
    about once in a few thousand turns under load."""
    h = Host(tmp_path / "data", base="multiprocTCPBase", timeout=20)
    try:

        def converse(i: int) -> int:
            sid = h.create()
            for j in range(3):
                ack = h.send(sid, f"hello {i} {j}")
                assert h.wait_turn(sid, ack.seq, timeout=WAIT * 3).kind == Kind.TURN_COMPLETED
            return len([e for e in h.history(sid) if e.kind == Kind.TURN_COMPLETED])

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            assert list(pool.map(converse, range(24))) == [3] * 24
    finally:
        h.close()


def test_pending_says_whether_something_waits_without_taking_it() -> None:
    """`pending` lets the actor drain what its own handler handed back, with no wake."""
    slot = Mailslot()
    assert not slot.pending()
    slot.put("finished")
    assert slot.pending() and slot.pending()
    assert slot.take() == ["finished"]
    assert not slot.pending()
    # take() also read the wake-up byte: the transport's select will not wake for it.
    ready, _, _ = select.select([slot.fileno()], [], [], 0)
    assert not ready


def test_in_flight_is_false_where_the_transport_cannot_say() -> None:
    """An actor without Thespian's TCP transport (the single-process base) always sends."""
    from actors._runtime.mailslot import in_flight

    class NoTransport:
        pass

    assert in_flight(NoTransport(), object()) is False


def test_thespian_waits_on_a_kept_poll_after_lean_select_and_the_switch_is_idempotent() -> None:
    """Thespian's TCP loop builds a selector per pass: it gets one over a poll its thread
    keeps, not a fresh epoll each time."""
    import selectors

    from thespian.system.transport import TCPTransport as tt

    from actors._runtime.kept_poll import KeptPoll
    from actors._runtime.system import lean_select

    lean_select()
    first = tt.selectors
    lean_select()
    assert tt.selectors is first
    assert tt.selectors.DefaultSelector is KeptPoll
    assert tt.selectors.EVENT_READ == selectors.EVENT_READ


def test_thespian_describes_a_message_only_when_the_description_is_printed() -> None:
    """Thespian's debug lines name every message; the text is built only if written."""
    from thespian.system.transport import ReceiveEnvelope, TransmitIntent

    from actors._runtime.system import lazy_descriptions

    lazy_descriptions()
    lazy_descriptions()
    built: list[str] = []

    class Loud:
        def __str__(self) -> str:
            built.append("built")
            return "loud message"

    env = ReceiveEnvelope("sender-address", Loud())
    described = env.identify()
    assert built == []
    assert "loud message" in str(described) and "loud message" in str(env)
    intent = TransmitIntent("target-address", Loud())
    assert "loud message" in f"{intent.identify()}"
    assert built


def test_queued_transmits_are_checked_for_expiry_once_per_interval_and_still_fail(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A transport looks for expired queued transmits at most every `EXPIRY_SCAN`
    seconds, not on every send: an expired one still fails, one interval later at most."""
    import collections

    from thespian.system.transport import SendStatus
    from thespian.system.transport.asyncTransportBase import asyncTransportBase as atb

    from actors._runtime import system

    system.rare_expiry_scans()
    system.rare_expiry_scans()
    clock = [100.0]
    monkeypatch.setattr(system.time, "monotonic", lambda: clock[0])
    looked: list[str] = []

    class Intent:
        def __init__(self, name: str, dead: bool) -> None:
            self.name, self.dead, self.status = name, dead, None

        def expired(self) -> bool:
            looked.append(self.name)
            return self.dead

        def tx_done(self, status: Any) -> None:
            self.status = status

    transport = object.__new__(atb)
    transport._aTB_lock = threading.Lock()
    live, dead = Intent("live", False), Intent("dead", False)
    transport._aTB_queuedPendingTransmits = collections.deque([live, dead])
    assert transport._complete_expired_intents() == (2, False)
    assert looked == ["live", "dead"]
    dead.dead = True
    clock[0] += system.EXPIRY_SCAN / 2
    assert transport._complete_expired_intents() == (2, False)
    assert looked == ["live", "dead"]  # not scanned again within the interval
    clock[0] += system.EXPIRY_SCAN
    assert transport._complete_expired_intents() == (1, True)
    assert dead.status == SendStatus.Failed and live.status is None
    assert list(transport._aTB_queuedPendingTransmits) == [live]
