"""Giving memory back after bulk work: a long-lived process (the Runner) that handled
thousands of messages keeps the heap they grew, and the C allocator keeps freed pages
mapped unless asked to return them."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys
from typing import Any

_libc: Any = None


def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, None where there is none (another libc or system)."""
    global _libc
    if not sys.platform.startswith("linux"):
        return None
    if _libc is None:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        except OSError:
            _libc = False
    return getattr(_libc, "malloc_trim", None) if _libc else None


def give_back() -> None:
    """Collect garbage, then return the allocator's free pages to the system."""
    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
