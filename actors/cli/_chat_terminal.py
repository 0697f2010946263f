"""The terminal under `vertebra chat`: readline's history in the data directory, and the
line typed while a turn runs."""

from __future__ import annotations

import contextlib
import os
import select
import sys
from collections.abc import Iterator

HISTORY_FILE = "chat_history"
HISTORY_LENGTH = 1000


@contextlib.contextmanager
def readline_history(data: str) -> Iterator[None]:
    try:
        import readline
    except ImportError:  # not every platform has it: plain input() still works
        yield
        return
    path = os.path.join(data, HISTORY_FILE)
    with contextlib.suppress(OSError):
        # Owner-only before readline writes it: the lines typed are the conversation.
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        os.chmod(path, 0o600)
        readline.read_history_file(path)
    readline.set_history_length(HISTORY_LENGTH)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            readline.write_history_file(path)


def stdin_line() -> str | None:
    """A line typed on the terminal while a turn runs, None if none is complete yet.

    Between prompts the terminal is in canonical mode: the kernel echoes what is typed
    and makes it readable only once Enter ends the line, and one read returns at most
    that line. An end of input typed then (Ctrl-D) is taken and ignored."""
    try:
        ready, _, _ = select.select([sys.stdin], [], [], 0)
        if not ready:
            return None
        data = os.read(sys.stdin.fileno(), 65536)
    except (OSError, ValueError):
        return None
    return data.decode(errors="replace").rstrip("\r\n") or None
