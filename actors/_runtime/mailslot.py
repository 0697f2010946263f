"""`Mailslot`: how a thread of an actor's own process hands messages to the actor.

Thespian's transports are not safe to call from a second thread. Measured here: a turn
worker that sent its output to its session with ``self.send`` from the turn's threads lost
it about once in a few thousand turns under load (the intent stayed in the transport's
queue for ever, so the turn never ended). A mailslot never touches the transport from a
foreign thread: the thread puts the message on a queue and writes one byte to a pipe; the
actor returns ``ThespianWatch([slot.fileno()])`` from every handler, so the transport's
own select wakes it with a ``WatchMessage``, and the actor drains the queue on its own
thread, in the order the messages were put.

Only the TCP transport supports watches; elsewhere (``simpleSystemBase`` runs everything
in one process) the actor keeps sending to itself.
"""

from __future__ import annotations

import os
import queue
import threading
from typing import Any

from thespian.actors import ThespianWatch

__all__ = ["Mailslot", "in_flight", "supports_watch"]


def supports_watch(actor: Any) -> bool:
    """Whether ``actor``'s transport delivers ``WatchMessage``s (multiprocTCPBase does)."""
    manager = getattr(actor, "_myRef", None)
    return hasattr(getattr(manager, "transport", None), "set_watch")


def in_flight(actor: Any, target: Any) -> bool:
    """Whether ``actor``'s TCP transport still holds a message for ``target`` (sent and
    not yet acknowledged, or queued behind one): False where the transport cannot say.

    Thespian keeps one message in flight per pair and queues the rest, and every pass of
    its event loop walks that queue; a sender that holds its news back while one is on its
    way sends fewer, larger messages instead of a backlog (measured: 13-19 notices queued
    per session at 20 sessions' full load)."""
    transport = getattr(getattr(actor, "_myRef", None), "transport", None)
    intents = getattr(transport, "_transmitIntents", None)
    waiting = getattr(transport, "_waitingTransmits", None)
    if intents is None or waiting is None:
        return False
    return any(i.targetAddr == target for i in waiting) or any(
        i.targetAddr == target for i in intents.values()
    )


class Mailslot:
    """A queue that a foreign thread fills and the actor's select loop is woken by."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self._closed = False
        # Held while writing, so a write never lands on a descriptor number that a close
        # has handed back to the process (it could be the database file by then).
        self._lock = threading.Lock()
        self.watch = ThespianWatch([self._r])

    def fileno(self) -> int:
        return self._r

    def put(self, msg: Any) -> bool:
        """Queue ``msg`` for the actor and wake it; False once the slot is closed."""
        with self._lock:
            if self._closed:
                return False
            self._queue.put(msg)
            try:
                os.write(self._w, b"\0")
            except BlockingIOError:
                pass  # the pipe is full of wake-ups already: the actor will look
            return True

    def pending(self) -> bool:
        """Whether something is queued (the actor's thread, to drain without a wake)."""
        return not self._queue.empty()

    def take(self) -> list[Any]:
        """Everything queued so far, oldest first (the actor's thread)."""
        # The wake-ups are read before the queue: a put racing with this call leaves its
        # byte behind and wakes the actor once more, never too few times.
        try:
            while os.read(self._r, 4096):
                pass
        except (BlockingIOError, OSError):
            pass
        out = []
        while True:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                return out

    def close(self) -> None:
        """No more puts. The descriptors stay open until the process ends: the transport
        may still hold the read end in its watch list until it next asks the actor."""
        with self._lock:
            self._closed = True
