"""Holding off the cyclic garbage collector while a bulk read builds its result."""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_gc_lock = threading.Lock()
_gc_pauses = 0
_gc_was_enabled = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Hold off Python's cyclic garbage collector while a bulk read builds its result.

    Replaying a long stream allocates one tracked object per event, all kept, and none in a
    cycle: the collector would only re-traverse the growing result again and again (a
    third of replay time for 100k events). Reference counting still frees everything as
    usual; only the cycle search waits, and it resumes as soon as the last reader leaves.
    Nested and concurrent pauses are counted, and a collector the application had already
    disabled stays disabled.
    """
    global _gc_pauses, _gc_was_enabled
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_enabled:
                gc.enable()
