"""This process's provider loop: the one asyncio loop, on a thread of its own, that every
model call and every MCP session of the process runs on."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading

__all__ = ["provider_loop", "stop_provider_loop"]

_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None
_loop_lock = threading.Lock()


def _forgotten_in_child() -> None:
    # A forked process (Thespian forks every actor) inherits the loop object but not the
    # thread that runs it: start afresh there, or a turn would wait on a loop nobody runs.
    global _loop, _thread, _loop_lock
    _loop, _thread = None, None
    _loop_lock = threading.Lock()


os.register_at_fork(after_in_child=_forgotten_in_child)


def provider_loop() -> asyncio.AbstractEventLoop:
    """This process's provider loop (started on first use, lives as long as the process)."""
    global _loop, _thread
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            t = threading.Thread(target=loop.run_forever, name="vertebra-providers", daemon=True)
            t.start()
            _loop, _thread = loop, t
        return _loop


def stop_provider_loop(timeout: float = 2.0) -> bool:
    """Stop this process's provider loop, its thread and its executor's threads, if they
    run; True when none is left running. A later `provider_loop` starts a new one.

    A process that forks others (the Runner after its warm-up) stops it first: a fork
    keeps only the forking thread, and a lock another thread held at that moment would
    stay held in the child for ever.
    """
    global _loop, _thread
    with _loop_lock:
        loop, thread, _loop, _thread = _loop, _thread, None, None
    if loop is None or thread is None or loop.is_closed():
        return True
    with contextlib.suppress(Exception):
        asyncio.run_coroutine_threadsafe(loop.shutdown_default_executor(), loop).result(timeout)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout)
    if thread.is_alive():
        return False
    loop.close()
    return True
