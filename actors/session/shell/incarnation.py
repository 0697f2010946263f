"""`SessionIncarnation`: what one incarnation of a session holds (its log, state, worker,
outbox), the work done at the end of every message it handles, and its news for the Runner."""

from __future__ import annotations

import logging
import os
import time
from datetime import timedelta
from typing import Any

import attrs
from thespian.actors import ActorExitRequest, ThespianWatch, WatchMessage

from spine import Log

from ... import messages as m
from ..._runtime.mailslot import Mailslot, in_flight
from ..._runtime.shell import GuardedActor
from ..protocol import SessionConfig, SessionStopping
from ..rules import commands as c
from .autoseal import AutoSealer
from .outbox import NOTIFY_INTERVAL, Outbox
from .snapshots import SnapshotStore
from .subscriptions import Subscriptions
from .worker import TurnWorker


def session_log() -> logging.Logger:
    # Looked up at each use: Thespian re-initializes logging in actor processes after
    # import, so a logger captured at import time may no longer be wired to anything.
    return logging.getLogger("vertebra.session")


class SessionIncarnation(GuardedActor):
    """The state of one session incarnation, shared by the session actor's mixins."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cfg: SessionConfig | None = None
        self.log: Log | None = None
        self.state: c.Session | None = None
        self.runner: Any = None
        self.worker: TurnWorker | None = None
        #: The agent built for a turn whose instant answer was tried: (its `StartTurn`,
        #: the agent or its factory's exception), for `DecisionExecution._start_turn`.
        self._built: tuple[c.StartTurn, Any] | None = None
        #: How long appends take, a moving mean in seconds (see `execution.GROUP_AFTER`).
        self._commit_wait = 0.0
        self.subs: Subscriptions | None = None
        self.outbox: Outbox | None = None
        self._notified_at = 0.0
        self.snapshots: SnapshotStore | None = None
        self.snap_seq = 0
        self.exited = False
        #: The Runner has been asked to stop this incarnation; ingress now bounces to it.
        self.stopping_sent = False
        self._notify_scheduled = False
        #: The news gathered in this handler goes to the Runner at its end, not later.
        self._urgent = False
        #: Child creations asked of the Runner: request id -> (turn, tool use id, child).
        self._spawning: dict[str, tuple[int, str, str]] = {}
        #: How the turn's threads reach this actor (None: they send to its address).
        self._slot: Mailslot | None = None
        self.sealer: AutoSealer | None = None
        #: The Runner's pid, watched once this process serves or stands by.
        self.ppid: int | None = None
        #: A descriptor that becomes readable when the Runner's process ends (Linux pidfd;
        #: None: the parent is polled instead).
        self._parent_fd: int | None = None
        #: What Thespian's select loop watches for this actor (the mailslot, the parent).
        self._watching: ThespianWatch | None = None
        #: A spare's log and snapshot store opened ahead: (db_path, spine, log, snapshots).
        self._warm: tuple[str, str, Log, SnapshotStore] | None = None

    def receiveMessage(self, msg: Any, sender: Any) -> Any:
        super().receiveMessage(msg, sender)
        slot = self._slot
        if slot is not None and slot.pending() and not self.exited:
            # Handed back during this handler (an instant turn's end): taken now, which
            # spares a pass of the transport's loop to be woken for it.
            self._drain(slot)
        if self.outbox and not self.exited:
            # News for the Runner goes out here, once per message: at once if it is
            # urgent (first words, or the session has gone idle), else within the
            # interval. A turn that starts and ends inside this handler sends one notice
            # and arms no timer.
            if self._urgent:
                self._notify()
            if self.outbox and not self._notify_scheduled:
                self._notify_scheduled = True
                self.wakeupAfter(timedelta(seconds=NOTIFY_INTERVAL), "notify")
        self._urgent = False
        # Asked again after every message: Thespian watches what the last handler returned.
        return None if self.exited else self._watching

    def _rewatch(self) -> None:
        fds = [] if self._slot is None else [self._slot.fileno()]
        if self._parent_fd is not None:
            fds.append(self._parent_fd)
        self._watching = ThespianWatch(fds) if fds else None

    def _drain(self, slot: Mailslot) -> None:
        for handed in slot.take():
            if self.exited:
                return
            super().receiveMessage(handed, self.myAddress)

    def receiveMsg_WatchMessage(self, msg: WatchMessage, sender: Any) -> None:
        if self._slot is not None:
            self._drain(self._slot)
        if self._parent_fd is not None and self._parent_fd in msg.ready:
            self._orphaned()

    def _orphaned(self) -> bool:
        """Stop this incarnation if the Runner's process has gone (this process was
        re-parented): a new Runner replaces it. True if it stops."""
        if self.exited or os.getppid() == self.ppid:
            return False
        sid = self.cfg.session_id if self.cfg else ""
        session_log().warning("session %s: runner gone, stopping orphaned incarnation", sid)
        self.stopping_sent = True
        self.exited = True
        if self.worker is not None:
            self.worker.cancel()
        self.send(self.myAddress, ActorExitRequest())
        return True

    def _failure(self, request_id: str, error: str, message: str) -> m.RequestFailed:
        sid = self.cfg.session_id if self.cfg else ""
        return m.RequestFailed(request_id=request_id, error=error, message=message, session_id=sid)

    def _reply(self, to: Any, msg: Any) -> None:
        if to is not None and msg is not None:
            self.send(to, msg)

    # -- news for the Runner -------------------------------------------------------------

    def _tell_runner(
        self,
        records: list[tuple[int, str, bytes]] | None = None,
        live: list[tuple[int, str, str, str]] | None = None,
        keys: list[str] | None = None,
    ) -> None:
        assert self.outbox is not None
        self.outbox.add(records or (), live or (), keys or ())
        if self.outbox.full():
            self._notify()
        elif live and time.monotonic() - self._notified_at >= NOTIFY_INTERVAL:
            # The first words after a quiet spell go out at once (a user waits for the first
            # token), at the end of this handler; what follows them is gathered as before.
            self._urgent = True

    def _flush_if_idle(self) -> None:
        """An idle session tells the Runner at once (at the end of this handler):
        coalescing only pays while a turn runs, and a late notice would meet the next
        request on its way in."""
        st = self.state
        if st is not None and st.running is None and not st.stored.busy:
            self._urgent = True

    def _notify(self, now: bool = False) -> None:
        if self.outbox is None or not self.outbox or self.state is None:
            return
        if not now and in_flight(self, self.runner):
            # The last notice is still on its way: this news joins the next one, which
            # the timer armed at the end of the handler sends.
            return
        busy = self.state.running is not None or self.state.stored.busy
        if self.outbox.live:
            # The pace of live text is what batching protects; other news does not count.
            self._notified_at = time.monotonic()
        self.send(self.runner, self.outbox.take(busy, len(self.state.stored.pending)))

    def _stop_self(self, reason: str) -> None:
        if self.cfg is None or self.state is None:
            return
        if self.worker is not None:
            self.worker.cancel()
            self.worker = None
        if self.stopping_sent:
            return
        self.stopping_sent = True
        session_log().info("session %s: stopping (%s)", self.cfg.session_id, reason)
        self.state = attrs.evolve(self.state, stopping=True)
        self._notify(now=True)
        self.send(
            self.runner,
            SessionStopping(
                session_id=self.cfg.session_id, incarnation=self.cfg.incarnation, reason=reason
            ),
        )
