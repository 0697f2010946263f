"""`KeptPoll`: the selector Thespian's TCP loop gets in vertebra's processes.

Thespian's transport builds a new selector on every pass of its loop, registers every
socket of the process in it, waits once and closes it ("creates selector on each loop,
perhaps this could be optimized", its own comment says). Per pass that is a selector
object, a `SelectorKey` and two dictionary entries per socket, and a `poll` whose
descriptor array is rebuilt from scratch, for a set of sockets that is almost always the
one of the pass before. Here each thread keeps one `select.poll` for its whole life: a
pass's ``register`` calls only fill a dictionary (``register`` is that dictionary's own
``__setitem__``, so no Python frame runs per socket), and the kept poll is told only
what changed since the last wait; when nothing changed, the wait is one ``poll`` call on
the array it already has.

Descriptor numbers, not open files, are what ``poll`` watches, so a socket closed and
another opened under the same number between two passes is watched correctly (an
``epoll`` kept this way would silently drop it). Thespian registers a descriptor once
per pass (its own selectors raise on a second registration), so a later ``register`` of
the same descriptor replacing the first changes nothing it relies on.
"""

from __future__ import annotations

import math
import select
import selectors
import threading
import types
from typing import Any

__all__ = ["KeptPoll", "kept_poll_module"]

_READ, _WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE
_MASKS = {
    _READ: select.POLLIN,
    _WRITE: select.POLLOUT,
    _READ | _WRITE: select.POLLIN | select.POLLOUT,
}


class _Key:
    """What Thespian reads of a ready selector key: its descriptor."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd


class _Kept(threading.local):
    """One thread's poll and what it watches now (descriptor -> selector events)."""

    def __init__(self) -> None:
        self.poll = select.poll()
        self.now: dict[int, int] = {}


_kept = _Kept()


class KeptPoll:
    """A selector for one pass of a loop, over its thread's kept poll (see the module)."""

    __slots__ = ("_want", "register")

    def __init__(self) -> None:
        self._want: dict[int, int] = {}
        # Thespian calls ``register(fd, events)`` with descriptor numbers.
        self.register = self._want.__setitem__

    def select(self, timeout: float | None = None) -> list[tuple[_Key, int]]:
        kept, want = _kept, self._want
        if want != kept.now:
            _update(kept, want)
        if timeout is None:
            ms = None
        elif timeout <= 0:
            ms = 0
        else:
            ms = math.ceil(timeout * 1e3)
        ready = []
        for fd, mask in kept.poll.poll(ms):
            events = 0
            if mask & ~select.POLLIN:
                events |= _WRITE
            if mask & ~select.POLLOUT:
                events |= _READ
            events &= want.get(fd, 0)
            if events:
                ready.append((_Key(fd), events))
        return ready

    def close(self) -> None:
        """Nothing to release: the poll is kept for the thread's next pass."""

    def __enter__(self) -> KeptPoll:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _update(kept: _Kept, want: dict[int, int]) -> None:
    poll, now = kept.poll, kept.now
    for fd in now.keys() - want.keys():
        poll.unregister(fd)
    for fd, events in want.items() - now.items():
        # ``register`` of a descriptor already there changes its mask.
        poll.register(fd, _MASKS[events])
    kept.now = dict(want)


def kept_poll_module() -> types.ModuleType:
    """A copy of the ``selectors`` module whose ``DefaultSelector`` is `KeptPoll`, for
    Thespian's transport module to use in place of its own import."""
    module = types.ModuleType("selectors")
    module.__dict__.update(selectors.__dict__)
    module.DefaultSelector = KeptPoll  # type: ignore[attr-defined]
    return module


def watched() -> dict[int, Any]:
    """What this thread's kept poll watches now (descriptor -> selector events)."""
    return dict(_kept.now)
