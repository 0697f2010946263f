"""Owner-only data: the data directory is 0700 and every file in it 0600.

A data directory holds every conversation in clear text, sealing keys and bearer tokens,
so nothing in it may be readable by another local user. Files are created 0600 before
anything else opens them (SQLite gives its ``-wal`` and ``-shm`` files the mode of the
database file, so a private database keeps its journal private too), and files an
earlier version left world-readable are tightened when they are opened again.
"""

from __future__ import annotations

import os
import stat

from ._errors import StorageError

DIR_MODE = 0o700
FILE_MODE = 0o600


class UnsafeDataDirError(StorageError):
    """The data directory can be written by another user, or belongs to one."""


def private_dir(path: str | os.PathLike[str]) -> str:
    """Create ``path`` 0700 (with its parents) or check and tighten an existing one.

    Refuses a directory another user owns or may write: such a user could have planted a
    database, a key or a ``daemon.json`` there, so starting on it is not safe. A directory
    that is only readable by others (an earlier version made it 0755) is made 0700.
    """
    p = os.path.abspath(os.fspath(path))
    try:
        os.makedirs(p, mode=DIR_MODE, exist_ok=True)
        st = os.stat(p)
    except OSError as exc:
        raise StorageError(f"cannot create data directory {p!r}: {exc.strerror}") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise StorageError(f"data directory {p!r} is not a directory")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise UnsafeDataDirError(
            f"data directory {p!r} belongs to uid {st.st_uid}, not to this user "
            f"(uid {os.getuid()}); refusing to use it"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeDataDirError(
            f"data directory {p!r} is writable by other users (mode "
            f"{stat.S_IMODE(st.st_mode):04o}); refusing to use it: check its files, "
            f"then chmod 700 it"
        )
    if stat.S_IMODE(st.st_mode) & 0o077:
        try:
            os.chmod(p, DIR_MODE)
        except OSError as exc:
            raise StorageError(f"cannot make {p!r} owner-only: {exc.strerror}") from exc
    return p


def private_file(path: str | os.PathLike[str]) -> str:
    """Make sure ``path`` exists as an owner-only (0600) file before anything opens it."""
    p = os.fspath(path)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
    except OSError as exc:
        raise StorageError(f"cannot create {p!r}: {exc.strerror}") from exc
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) & 0o077:
            os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    return p


def private_sqlite(path: str | os.PathLike[str]) -> str:
    """``private_file`` for a SQLite database and the journal files beside it."""
    p = private_file(path)
    for suffix in ("-wal", "-shm", "-journal"):
        side = p + suffix
        try:
            if stat.S_IMODE(os.stat(side).st_mode) & 0o077:
                os.chmod(side, FILE_MODE)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StorageError(f"cannot make {side!r} owner-only: {exc.strerror}") from exc
    return p


__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "UnsafeDataDirError",
    "private_dir",
    "private_file",
    "private_sqlite",
]
