"""This process's provider loop: the one asyncio loop, on a thread of its own, that every
model call and every MCP session of the process runs on."""

from __future__ import annotations

import asyncio
import os
import threading

__all__ = ["provider_loop"]

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def _forgotten_in_child() -> None:
    # A forked process (Thespian forks every actor) inherits the loop object but not the
    # thread that runs it: start afresh there, or a turn would wait on a loop nobody runs.
    global _loop, _loop_lock
    _loop = None
    _loop_lock = threading.Lock()


os.register_at_fork(after_in_child=_forgotten_in_child)


def provider_loop() -> asyncio.AbstractEventLoop:
    """This process's provider loop (started on first use, lives as long as the process)."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            t = threading.Thread(target=loop.run_forever, name="vertebra-providers", daemon=True)
            t.start()
            _loop = loop
        return _loop
