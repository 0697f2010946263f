"""`Parent`: the Runner's process as a session process watches it.

If the Runner's process dies, this process is re-parented: its incarnation is then an
orphan that a new Runner replaces, so it stops itself. The kernel says when the parent
ends where it can (a pidfd, watched by Thespian's select loop: a daemon with hundreds of
idle sessions woke each twice a second when they polled); elsewhere the parent is polled.
"""

from __future__ import annotations

import contextlib
import os
from datetime import timedelta
from typing import Any

from ..._runtime.mailslot import supports_watch

#: Seconds between looks at the parent where no pidfd can watch it.
ORPHAN_CHECK = 0.5
#: The payload of the wake-up that polls the parent.
ORPHAN_TIMER = "orphan-check"


class Parent:
    """The pid this process was started by, and the descriptor that says it ended."""

    def __init__(self, actor: Any) -> None:
        self.ppid = os.getppid()
        #: Readable once the parent ends (empty: no pidfd here, the parent is polled).
        self.fds: tuple[int, ...] = ()
        if supports_watch(actor):
            with contextlib.suppress(AttributeError, OSError):
                self.fds = (os.pidfd_open(self.ppid),)
        if not self.fds:
            actor.wakeupAfter(timedelta(seconds=ORPHAN_CHECK), ORPHAN_TIMER)

    @property
    def polled(self) -> bool:
        return not self.fds

    def gone(self) -> bool:
        """Whether the parent has ended (this process was re-parented)."""
        return os.getppid() != self.ppid

    def ready(self, fds: Any) -> bool:
        """Whether a watch that woke for ``fds`` woke for the parent."""
        return any(fd in fds for fd in self.fds)

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = ()
