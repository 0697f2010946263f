"""`RunnerPublishing`: the Runner's outputs to sinks and to the projection actor.

The base of `RunnerActor`'s mixins: it holds the `SinkRouter` and the throttle that wakes
the projection actor after appends.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from projections import Wake

from ... import messages as m
from ..._runtime.shell import GuardedActor
from ..protocol import ProjectionWakeDue, UseProjection
from .sinks import SinkRouter

#: Seconds between two wakes of the projection actor (see `RunnerActor._wake_projection`).
WAKE_INTERVAL = 0.05


class RunnerPublishing(GuardedActor):
    """Sinks (add, remove, acknowledge) and the throttled wake of the projection actor."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sinks = SinkRouter(self.send)
        self.projection: Any = None
        self._woken_at = -WAKE_INTERVAL
        self._wake_due = False

    def receiveMsg_UseProjection(self, msg: UseProjection, sender: Any) -> None:
        self.projection = msg.address

    def receiveMsg_AddSink(self, msg: m.AddSink, sender: Any) -> None:
        sink_id = self.sinks.add(sender, tuple(msg.kinds), msg.max_pending)
        self.send(sender, m.SinkReply(request_id=msg.request_id, sink_id=sink_id))

    def receiveMsg_RemoveSink(self, msg: m.RemoveSink, sender: Any) -> None:
        self.sinks.remove(msg.sink_id)
        self.send(sender, m.Done(request_id=msg.request_id))

    def receiveMsg_SinkAck(self, msg: m.SinkAck, sender: Any) -> None:
        self.sinks.ack(msg.sink_id, msg.count)

    def _wake_projection(self) -> None:
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
        since = now - self._woken_at
        if since >= WAKE_INTERVAL:
            self._woken_at = now
            self.send(self.projection, Wake())
        elif not self._wake_due:
            self._wake_due = True
            self.wakeupAfter(timedelta(seconds=WAKE_INTERVAL - since), ProjectionWakeDue())
