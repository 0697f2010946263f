"""`FileWrites`: block until named files in a directory are written (Linux inotify).

The SQLite watcher used to wake every millisecond to ask whether another process had
committed: about 2.5% of a core for every process that follows a log, idle or not (a
daemon printing its events, each `vertebra tail`). A commit writes the log's ``-wal`` file
(or the database file itself outside WAL mode), so the kernel can say when to look. The
event is only a hint, and may come a moment before the writer has published the commit in
SQLite's shared index, which writes no event: the watcher keeps polling for a short while
after each one (see `SqliteLog`).

Stdlib only (``ctypes``); `file_writes` returns None where inotify is not available, and
the caller polls as before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import struct
import sys
import threading

__all__ = ["FileWrites", "file_writes"]

_IN_MODIFY = 0x00000002
_IN_CLOSE_WRITE = 0x00000008
_IN_MOVED_TO = 0x00000080
_IN_CREATE = 0x00000100
_IN_Q_OVERFLOW = 0x00004000
_MASK = _IN_MODIFY | _IN_CLOSE_WRITE | _IN_MOVED_TO | _IN_CREATE
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)

_libc: ctypes.CDLL | None = None
_libc_lock = threading.Lock()


def _load_libc() -> ctypes.CDLL | None:
    global _libc
    if not sys.platform.startswith("linux"):
        return None
    with _libc_lock:
        if _libc is None:
            try:
                lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
                lib.inotify_init1.argtypes = [ctypes.c_int]
                lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
            except (OSError, AttributeError):
                return None
            _libc = lib
        return _libc


class FileWrites:
    """Writes to ``names`` inside ``directory``, seen through one inotify descriptor."""

    def __init__(self, fd: int, names: frozenset[bytes]) -> None:
        self._fd = fd
        self._names = names
        # `interrupt` wakes a waiter at once (the log is closing, or nobody follows it).
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self._closed = False
        self._lock = threading.Lock()

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True if a watched file was written meanwhile
        (or the kernel's queue overflowed, so it may have been), False on timeout or
        interrupt."""
        # poll, not select: a daemon with many connections has descriptors past select's
        # limit of 1024.
        waiter = select.poll()
        try:
            waiter.register(self._fd, select.POLLIN)
            waiter.register(self._r, select.POLLIN)
            ready = [fd for fd, _ in waiter.poll(timeout * 1000)]
        except (OSError, ValueError):
            return True  # closed under us: the caller checks whether to stop
        if self._r in ready:
            try:
                os.read(self._r, 4096)
            except OSError:
                pass
        return self._fd in ready and self._drain()

    def _drain(self) -> bool:
        hit = False
        while True:
            try:
                data = os.read(self._fd, 65536)
            except (BlockingIOError, InterruptedError):
                return hit
            except OSError:
                return True
            if not data:
                return hit
            at = 0
            while at + _HEADER.size <= len(data):
                _wd, mask, _cookie, size = _HEADER.unpack_from(data, at)
                name = data[at + _HEADER.size : at + _HEADER.size + size].rstrip(b"\0")
                at += _HEADER.size + size
                if mask & _IN_Q_OVERFLOW or name in self._names:
                    hit = True

    def interrupt(self) -> None:
        with self._lock:
            if not self._closed:
                try:
                    os.write(self._w, b"\0")
                except BlockingIOError:
                    pass  # already pending

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for fd in (self._fd, self._r, self._w):
                try:
                    os.close(fd)
                except OSError:
                    pass


def file_writes(directory: str, names: set[str]) -> FileWrites | None:
    """Watch ``names`` in ``directory`` for writes; None where that cannot be done."""
    lib = _load_libc()
    if lib is None:
        return None
    fd = lib.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    if fd < 0:
        return None
    if lib.inotify_add_watch(fd, os.fsencode(directory), _MASK) < 0:
        os.close(fd)
        return None
    return FileWrites(fd, frozenset(os.fsencode(n) for n in names))
