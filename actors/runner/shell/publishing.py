"""`ProjectionWakes`: the throttled wake of the projection actor after appends."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from projections import Wake

from ..protocol import ProjectionWakeDue

#: Seconds between two wakes of the projection actor (see `ProjectionWakes.wake`).
WAKE_INTERVAL = 0.05


class ProjectionWakes:
    """Where the projection actor is, and when it was last woken."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.projection: Any = None
        self.woken_at = -WAKE_INTERVAL
        self.due = False

    def wake(self) -> None:
        """Wake the projection actor at most once per `WAKE_INTERVAL`, the last wake of a
        burst sent when the interval ends.

        A wake per append made the Runner the bottleneck: Thespian keeps one message in
        flight per pair, so wakes queued in the Runner and every pass of its event loop
        walked them (2.7 ms of Runner CPU per turn at 50 sessions, against 0.5 ms without
        wakes). The projection reads everything new on each wake, so one per interval
        loses nothing; `Host.status` folds locally when the projection is behind.
        """
        if self.projection is None:
            return
        now = time.monotonic()
        since = now - self.woken_at
        if since >= WAKE_INTERVAL:
            self.woken_at = now
            self.runner.send(self.projection, Wake())
        elif not self.due:
            self.due = True
            self.runner.wakeupAfter(timedelta(seconds=WAKE_INTERVAL - since), ProjectionWakeDue())

    def fired(self) -> None:
        """The timer armed for the last wake of a burst went off."""
        self.due = False
        self.wake()
