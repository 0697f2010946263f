"""The Host sends a request again only when it is lost, never because a session is slow
to load or busy: it asks the Runner where a request without a reply stands, and the
Runner asks the session behind it (real actor processes, a real spine file)."""

from __future__ import annotations

import os
import pathlib
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from actors import messages as m
from actors.host import Host, runtime
from spine import Event, Kind, SqliteLog

#: Events in the stream the long load folds: no snapshot, so it takes about a second,
#: several times the shortened `RESEND_AFTER` below.
LONG = 60_000
RESEND = 0.1


@pytest.fixture
def host(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, no_leftover_processes: Any
) -> Iterator[Host]:
    # The Host's side runs in this process: its re-send deadline shortened, so that a
    # load of about a second outlasts it many times over.
    monkeypatch.setattr(runtime, "RESEND_AFTER", RESEND)
    monkeypatch.setattr(runtime, "RUNNER_CHECK", RESEND / 2)
    h = Host(tmp_path / "data", base="multiprocTCPBase", timeout=30)
    try:
        yield h
    finally:
        h.close()


def _fill(h: Host, sid: str, n: int) -> None:
    """A stream of ``n`` events written straight into the spine, as an import would."""
    log = SqliteLog(os.path.join(h.data_dir, "spine.db"))
    try:
        events = [Event(kind=Kind.SESSION_STARTED)]
        events += [Event(kind=Kind.PROPERTIES, properties={"n": str(i)}) for i in range(n - 1)]
        seq = 0
        for i in range(0, len(events), 5000):
            seq = log.append(sid, events[i : i + 5000], expected_seq=seq).last_seq
    finally:
        log.close()


def test_a_request_to_a_session_that_is_loading_a_long_stream_is_not_sent_again(
    host: Host,
) -> None:
    """The first send to a long stream waits for the session's load (many re-send
    deadlines): the Runner says it holds it, so the Host sends no copy."""
    sid = "long-load"
    _fill(host, sid, LONG)
    host.register(sid)
    t0 = time.monotonic()
    ack = host.send(sid, "hello", key="k1")
    took = time.monotonic() - t0
    assert took > 3 * RESEND, f"the load took {took:.2f}s: too short to test anything"
    assert host._runtime.resent == 0
    assert ack.seq > LONG and not ack.duplicate
    host.wait_turn(sid, ack.seq, timeout=20)


def test_a_request_lost_on_its_way_to_the_runner_is_sent_again(host: Host) -> None:
    """The first copy never leaves the Host (lost in transit): the Runner holds nothing
    for it, so the Host sends it again, and it is stored once."""
    sid = host.create()
    transport = host._runtime._transport
    real_ask = transport.ask
    lost: list[str] = []

    def lossy_ask(to: Any, msg: Any, timeout: float, request_id: str | None = None) -> Any:
        if isinstance(msg, m.SendMessage) and not lost:
            lost.append(msg.request_id)
            return transport.wait(msg.request_id, timeout)  # never sent: wait in vain
        return real_ask(to, msg, timeout, request_id)

    transport.ask = lossy_ask  # type: ignore[method-assign]
    try:
        ack = host.send(sid, "lost once", key="k-lost")
    finally:
        transport.ask = real_ask  # type: ignore[method-assign]
    assert lost and host._runtime.resent == 1 and not ack.duplicate
    host.wait_turn(sid, ack.seq, timeout=20)
    texts = [e.text for e in host.history(sid) if e.kind == Kind.USER_MESSAGE]
    assert texts == ["lost once"]


def test_a_request_to_a_session_too_busy_to_answer_is_not_sent_again(host: Host) -> None:
    """The session's process is stopped (SIGSTOP) for many re-send deadlines while the
    request waits in its mailbox: the Runner's question waits behind it, so the Host
    sends no copy and gets its one answer once the process runs again."""
    sid = host.create()
    host.wait_turn(sid, host.send(sid, "warm").seq)
    pid = host.session_pid(sid)
    stopped = 1.0
    os.kill(pid, signal.SIGSTOP)
    resume = threading.Timer(stopped, os.kill, (pid, signal.SIGCONT))
    resume.start()
    try:
        t0 = time.monotonic()
        ack = host.send(sid, "while stopped", key="k-busy")
        took = time.monotonic() - t0
    finally:
        resume.cancel()
        os.kill(pid, signal.SIGCONT)
    assert took >= stopped * 0.9 and host._runtime.resent == 0 and not ack.duplicate
    host.wait_turn(sid, ack.seq, timeout=20)
