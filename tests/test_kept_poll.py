"""`KeptPoll`, the selector of Thespian's TCP loop in vertebra's processes, over real
sockets: what each pass registers is what it waits on, whatever the pass before kept."""

from __future__ import annotations

import os
import selectors
import socket
import threading

from actors._runtime.kept_poll import KeptPoll, watched

R, W = selectors.EVENT_READ, selectors.EVENT_WRITE


def _pass(registrations: dict[int, int], timeout: float = 0) -> dict[int, int]:
    sel = KeptPoll()
    for fd, events in registrations.items():
        sel.register(fd, events)
    ready = {key.fd: events for key, events in sel.select(timeout)}
    sel.close()
    return ready


def test_a_pass_reports_what_is_readable_and_writable_among_what_it_registered() -> None:
    a, b = socket.socketpair()
    try:
        assert _pass({a.fileno(): R}) == {}
        b.send(b"x")
        assert _pass({a.fileno(): R}) == {a.fileno(): R}
        assert _pass({a.fileno(): R | W}) == {a.fileno(): R | W}
        assert _pass({b.fileno(): W}) == {b.fileno(): W}
        # Registered for reading only: a writable socket is not reported.
        assert _pass({b.fileno(): R}) == {}
    finally:
        a.close()
        b.close()


def test_what_a_pass_leaves_out_is_no_longer_watched() -> None:
    a, b = socket.socketpair()
    c, d = socket.socketpair()
    try:
        b.send(b"x")
        d.send(b"y")
        assert _pass({a.fileno(): R, c.fileno(): R}) == {a.fileno(): R, c.fileno(): R}
        assert _pass({c.fileno(): R}) == {c.fileno(): R}
        assert watched() == {c.fileno(): R}
        assert _pass({}) == {}
        assert watched() == {}
    finally:
        for s in (a, b, c, d):
            s.close()


def test_a_descriptor_number_reused_by_a_new_socket_is_watched_as_the_new_one() -> None:
    a, b = socket.socketpair()
    fd = a.fileno()
    assert _pass({fd: R}) == {}
    a.close()
    b.close()
    c, d = socket.socketpair()
    try:
        if c.fileno() != fd:  # the kernel gives the lowest free number: almost always it
            os.dup2(c.fileno(), fd)
            c.close()
            c = socket.socket(fileno=fd)
        d.send(b"z")
        assert _pass({fd: R}) == {fd: R}
    finally:
        c.close()
        d.close()


def test_a_wait_ends_when_a_socket_becomes_readable_and_each_thread_keeps_its_own() -> None:
    a, b = socket.socketpair()
    seen: dict[str, dict[int, int]] = {}
    assert _pass({}) == {}
    try:
        other = threading.Thread(target=lambda: seen.update(other=_pass({b.fileno(): W})))
        other.start()
        other.join(10)
        assert seen["other"] == {b.fileno(): W}
        assert watched() == {}  # the other thread's registration is its own
        threading.Timer(0.05, lambda: b.send(b"late")).start()
        assert _pass({a.fileno(): R}, timeout=10) == {a.fileno(): R}
    finally:
        a.close()
        b.close()
