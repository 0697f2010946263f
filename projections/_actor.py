"""`ProjectionActor`: the thin Thespian shell around `StatusReducer`.

It folds one page per message and sends itself `FoldMore` while there is more, so queries
interleave with a long catch-up or rebuild instead of waiting behind it. A `Wake` (sent by
whoever appended) folds at once; a ``wakeupAfter`` poll floor keeps it correct when wakes
are lost. Queries read only the reducer's complete state. The reducer reads the spine
through plain reads and writes only its own checkpoint file.
"""

from __future__ import annotations

import logging
import os
import time
from datetime import timedelta
from typing import Any

from thespian.actors import ActorExitRequest, ActorTypeDispatcher, WakeupMessage

from spine import Log, open_checkpoints, open_log

from ._errors import CheckpointBusyError
from ._reducer import STATUS_VERSION, StatusReducer
from .messages import (
    FoldMore,
    IndexReply,
    ProgressReply,
    ProjectionFailed,
    QueryIndex,
    QueryProgress,
    QueryStatus,
    Rebuild,
    RebuildCompleted,
    Rebuilding,
    RebuildProgress,
    RebuildStartedReply,
    StartedReply,
    StartProjection,
    StatusReply,
    Wake,
)

log = logging.getLogger("projections")

#: Least time between two `RebuildProgress` reports to one requester.
PROGRESS_EVERY = 0.1
NOT_STARTED = "the projection is not started"
#: Seconds between a standby reducer's attempts to take the shared checkpoints over.
STANDBY_RETRY = 1.0


class ProjectionActor(ActorTypeDispatcher):  # type: ignore[misc]
    """Folds the log into session statuses and the sessions index; answers queries."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._reducer: StatusReducer | None = None
        self._log: Log | None = None
        self._config: StartProjection | None = None
        # A start refused because another reducer holds the checkpoints: retried.
        self._standby: StartProjection | None = None
        self._scheduled = False
        # Who asked for a rebuild (address, request id), and when it started: they get
        # progress reports carrying their request's id.
        self._watchers: list[tuple[Any, str]] = []
        self._rebuild_started = 0.0
        self._last_report = 0.0

    # -- lifecycle -----------------------------------------------------------------------

    def receiveMsg_StartProjection(self, msg: StartProjection, sender: Any) -> None:
        if self._reducer is not None and self._config is not None:
            if (msg.log_path, msg.checkpoint_path) == (
                self._config.log_path,
                self._config.checkpoint_path,
            ):
                self._started(msg, sender)
            else:
                self._fail(msg, sender, "already started on other files")
            return
        reason = self._open(msg)
        if reason is not None:
            self._fail(msg, sender, reason)
            return
        self._started(msg, sender)

    def _open(self, msg: StartProjection) -> str | None:
        """Open the log and the checkpoints and start folding; the reason if it cannot."""
        try:
            self._log = open_log(msg.log_path, read_only=True)
            self._reducer = StatusReducer(
                self._log,
                open_checkpoints(msg.checkpoint_path),
                policy=msg.policy,
                batch=msg.batch,
                rebuild_commit_every=msg.rebuild_commit_every,
                version=msg.version or STATUS_VERSION,
            )
        except CheckpointBusyError as exc:
            # Another host's reducer writes the shared checkpoints: stand by and try again,
            # so that this one takes over when that one is gone. Queries meanwhile get the
            # not-started answer (the Host then folds the stream itself).
            self._close()
            if self._standby is None:
                self.wakeupAfter(timedelta(seconds=STANDBY_RETRY), "standby")
            self._standby = msg
            return f"standing by: {exc}"
        except Exception as exc:
            self._close()
            return f"{type(exc).__name__}: {exc}"
        self._standby = None
        self._config = msg
        if self._reducer.rebuilding:
            self._rebuild_started = time.monotonic()
        self._schedule()
        self.wakeupAfter(timedelta(seconds=msg.poll_floor))
        return None

    def _started(self, msg: StartProjection, sender: Any) -> None:
        assert self._reducer is not None
        progress = self._reducer.progress()
        self.send(
            sender, StartedReply(request_id=msg.request_id, progress=progress, pid=os.getpid())
        )

    def receiveMessage(self, msg: Any, sender: Any) -> None:
        # Thespian runs a handler that raises a second time (its effects twice) and then
        # bounces the message as poison: answer the failure here instead, once.
        try:
            super().receiveMessage(msg, sender)
        except Exception as exc:
            log.exception("projection handler for %s failed", type(msg).__name__)
            if (
                isinstance(getattr(msg, "request_id", None), str)
                and "Reply" not in type(msg).__name__
            ):
                self._fail(msg, sender, f"{type(exc).__name__}: {exc}")

    def _fail(self, msg: Any, sender: Any, reason: str) -> None:
        """Answer ``msg`` with the failure reply, echoing its request id."""
        self.send(sender, ProjectionFailed(request_id=msg.request_id, reason=reason))

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: Any) -> None:
        self._close()

    def _close(self) -> None:
        if self._reducer is not None:
            self._reducer.close()
        if self._log is not None:
            self._log.close()
        self._reducer = None
        self._log = None

    # -- folding -------------------------------------------------------------------------

    def _schedule(self) -> None:
        # At most one FoldMore in flight: a burst of wakes collapses into one read.
        if not self._scheduled and self._reducer is not None:
            self._scheduled = True
            self.send(self.myAddress, FoldMore())

    def receiveMsg_Wake(self, msg: Wake, sender: Any) -> None:
        self._schedule()

    def receiveMsg_WakeupMessage(self, msg: WakeupMessage, sender: Any) -> None:
        if msg.payload == "standby":
            # Still busy: `_open` schedules the next attempt; another failure ends them.
            standby, self._standby = self._standby, None
            if standby is not None and self._reducer is None:
                self._open(standby)
            return
        if self._reducer is None or self._config is None:
            return
        self._schedule()
        self.wakeupAfter(timedelta(seconds=self._config.poll_floor))

    def receiveMsg_FoldMore(self, msg: FoldMore, sender: Any) -> None:
        self._scheduled = False
        r = self._reducer
        if r is None:
            return
        try:
            res = r.step()
        except Exception:
            # A storage hiccup: the checkpoint is intact; the poll floor tries again.
            log.exception("projection fold step failed; retrying at the next poll")
            return
        if res.rebuilt:
            self._report_done()
        elif r.rebuilding:
            self._report_progress()
        if res.more:
            self._schedule()

    def _report_progress(self) -> None:
        now = time.monotonic()
        if self._watchers and now - self._last_report >= PROGRESS_EVERY and self._reducer:
            self._last_report = now
            p = self._reducer.progress()
            for w, rid in self._watchers:
                self.send(w, RebuildProgress(request_id=rid, progress=p))

    def _report_done(self) -> None:
        assert self._reducer is not None
        p = self._reducer.progress()
        seconds = time.monotonic() - self._rebuild_started
        for w, rid in self._watchers:
            self.send(w, RebuildCompleted(request_id=rid, progress=p, seconds=seconds))
        self._watchers = []

    def receiveMsg_Rebuild(self, msg: Rebuild, sender: Any) -> None:
        r = self._reducer
        if r is None:
            self._fail(msg, sender, NOT_STARTED)
            return
        r.request_rebuild()
        self._rebuild_started = time.monotonic()
        self._last_report = 0.0
        # One entry per sender: a second Rebuild from it only renews the request id.
        self._watchers = [(w, rid) for w, rid in self._watchers if w != sender]
        self._watchers.append((sender, msg.request_id))
        self.send(sender, RebuildStartedReply(request_id=msg.request_id, progress=r.progress()))
        self._schedule()

    # -- queries -------------------------------------------------------------------------

    def receiveMsg_QueryStatus(self, msg: QueryStatus, sender: Any) -> None:
        r = self._reducer
        if r is None:
            self._fail(msg, sender, NOT_STARTED)
        elif not r.ready:
            self.send(sender, Rebuilding(request_id=msg.request_id, progress=r.progress()))
        else:
            self.send(
                sender,
                StatusReply(
                    request_id=msg.request_id,
                    session=msg.session,
                    status=r.status(msg.session),
                    info=r.info(msg.session),
                    progress=r.progress(),
                ),
            )

    def receiveMsg_QueryIndex(self, msg: QueryIndex, sender: Any) -> None:
        r = self._reducer
        if r is None:
            self._fail(msg, sender, NOT_STARTED)
        elif not r.ready:
            self.send(sender, Rebuilding(request_id=msg.request_id, progress=r.progress()))
        else:
            reply = IndexReply(request_id=msg.request_id, index=r.index(), progress=r.progress())
            self.send(sender, reply)

    def receiveMsg_QueryProgress(self, msg: QueryProgress, sender: Any) -> None:
        r = self._reducer
        if r is None:
            self._fail(msg, sender, NOT_STARTED)
        else:
            progress = r.progress()
            self.send(
                sender, ProgressReply(request_id=msg.request_id, progress=progress, pid=os.getpid())
            )
