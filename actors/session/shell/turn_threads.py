"""The process's turn threads, kept for the next turn: starting a thread costs the
session's thread a wait for the new one to run (a context switch on a busy machine), per
turn."""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable

__all__ = ["retire", "run"]


class _TurnThreads:
    """The process's turn threads, kept for the next turn: starting a thread costs the
    session's thread a wait for the new one to run (a context switch on a busy machine),
    per turn. A turn still running (one cut off, whose agent ignores the cancel) keeps its
    thread; the next turn then gets another."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._idle = 0
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def run(self, job: Callable[[], None]) -> None:
        with self._lock:
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1
        self._jobs.put(job)
        if spawn:
            t = threading.Thread(target=self._serve, name="vertebra-turn", daemon=True)
            with self._lock:
                self._threads = [x for x in self._threads if x.is_alive()] + [t]
            t.start()

    def retire(self, timeout: float) -> bool:
        """End the idle threads; True when no turn thread is left running."""
        with self._lock:
            idle, self._idle = self._idle, 0
            threads = list(self._threads)
        for _ in range(idle):
            self._jobs.put(None)
        for t in threads:
            t.join(timeout)
        return not any(t.is_alive() for t in threads)

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                job()
            except BaseException:  # a job reports its own failure; the thread lives on
                pass
            with self._lock:
                self._idle += 1


_THREADS = _TurnThreads()


def _forget_threads() -> None:
    # A forked process has none of its parent's threads.
    global _THREADS
    _THREADS = _TurnThreads()


os.register_at_fork(after_in_child=_forget_threads)


def run(job: Callable[[], None]) -> None:
    """Run ``job`` on an idle turn thread, or a new one."""
    _THREADS.run(job)


def retire(timeout: float = 2.0) -> bool:
    """End this process's idle turn threads (before it forks: `warmup.warm_for_forks`);
    True when none is left running."""
    return _THREADS.retire(timeout)
