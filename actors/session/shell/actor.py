"""`SessionActor`: the shell that runs one session's decider.

The actor receives messages and hands them to the one object its phase holds: a `Spare`
(a process started ahead of need, standing by), an `Incarnation` (everything a live
session holds, created whole from its `SessionConfig`) or an `Exit` (an incarnation that
has asked the Runner to stop it). None of them is present before the first message and
after the process has been told to end.

Each command of an incarnation goes through the session's `Executor`: decide, append the
decision's events (the session is its stream's only writer: ``expected_seq`` guards
against a stale incarnation), reply, carry out the effects. A turn runs on a worker thread
that hands its output back through the incarnation's slot, so only handlers touch state
and an interrupt is handled while the turn still runs.

No handler may raise: Thespian would run it again (side effects twice) and then bounce the
message as poison. `GuardedActor` catches, logs and answers instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from thespian.actors import ActorExitRequest, ThespianWatch, WakeupMessage, WatchMessage

from spine import DecodeError, UnavailableError

from ... import messages as m
from ..._runtime.logformat import set_context
from ..._runtime.shell import GuardedActor
from ..._runtime.system import configure_actor_logging
from ...messages import Ping, Pong
from ...placement import fits
from ..protocol import (
    SPINE_UNAVAILABLE,
    Behind,
    RecordPoison,
    RequestWhere,
    Routed,
    SessionConfig,
    SessionStopping,
    SessionUnreadable,
    SpareReady,
    Standby,
)
from ..rules import commands as c
from .alarm import TIMER_WAKE
from .autoseal import AUTO_SEAL, AUTO_SEAL_TIMER
from .execution import session_log
from .exit import Exit
from .incarnation import Incarnation
from .parent import ORPHAN_CHECK, ORPHAN_TIMER, Parent
from .spare import Spare, open_stores


class SessionActor(GuardedActor):
    """One session. Created only by the Runner; configured by a `SessionConfig` message."""

    log_name = "vertebra.session"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spare: Spare | None = None
        self.live: Incarnation | None = None
        self.exit: Exit | None = None

    @staticmethod
    def actorSystemCapabilityCheck(
        capabilities: Mapping[str, Any], requirements: Mapping[str, Any] | None
    ) -> bool:
        # With several hosts the Runner names the member a session goes to.
        return fits(capabilities, requirements)

    def receiveMessage(self, msg: Any, sender: Any) -> Any:
        super().receiveMessage(msg, sender)
        phase = self.live or self.exit
        if phase is not None:
            phase.after_message()
        # Asked again after every message: Thespian watches what the last handler returned.
        watched = self._phase()
        fds = watched.fds() if isinstance(watched, Incarnation | Exit) else None
        if isinstance(watched, Spare):
            fds = list(watched.parent.fds)
        return ThespianWatch(fds) if fds else None

    def dispatch(self, msg: Any) -> None:
        """Handle ``msg`` as if it had arrived (what the turn's threads hand back)."""
        GuardedActor.receiveMessage(self, msg, self.myAddress)

    def retire(self, was: Incarnation, reason: str) -> None:
        """``was`` has asked the Runner to stop it: from now on only its exit is kept."""
        if self.live is was:
            self.live, self.exit = None, Exit(was, reason)

    def _phase(self) -> Spare | Incarnation | Exit | None:
        return self.spare or self.live or self.exit

    # -- start -------------------------------------------------------------------------------

    def receiveMsg_Standby(self, msg: Standby, sender: Any) -> None:
        # A spare process, configured later: it must not outlive a Runner that dies first.
        if self.live is not None or self.exit is not None:
            return
        if self.spare is None:
            self.spare = Spare(self, msg)
            if self._orphaned():
                return
        self.send(sender, SpareReady())

    def receiveMsg_SessionConfig(self, cfg: SessionConfig, sender: Any) -> None:
        if self.live is not None or self.exit is not None:
            return
        spare, self.spare = self.spare, None
        parent = spare.parent if spare is not None else Parent(self)
        try:
            # Every record this process writes from here on names the session and
            # incarnation (and, once it appends, its last seq and kind).
            set_context(session=cfg.session_id, incarnation=cfg.incarnation)
            configure_actor_logging(os.path.dirname(cfg.db_path))
            stores = spare.stores(cfg) if spare is not None else open_stores(cfg.db_path, cfg.spine)
            self.live = Incarnation(self, cfg, sender, parent, stores)
            set_context(seq=self.live.state.stored.last_seq)
            if not self._orphaned():
                self.live.open()
        except DecodeError as exc:
            # A stored row does not decode: no restart can load this stream, so the Runner
            # marks the session failed at once, naming the row (its seals stay verifiable).
            seq = exc.seq or 0
            why = f"its stream does not decode at seq {seq}: {exc.problem}"
            session_log().error("session %s could not start: %s", cfg.session_id, why)
            unreadable = SessionUnreadable(
                session_id=cfg.session_id, incarnation=cfg.incarnation, seq=seq, reason=why
            )
            self.send(sender, unreadable)
            self._end(parent)
        except UnavailableError as exc:
            # Not this session's fault: the Runner tries again once the spine may be back,
            # without spending the restart budget.
            session_log().warning("session %s could not start: %s", cfg.session_id, exc)
            why = SPINE_UNAVAILABLE
            self.send(
                sender,
                SessionStopping(session_id=cfg.session_id, incarnation=cfg.incarnation, reason=why),
            )
            self._end(parent)
        except Exception:
            # The stream cannot be loaded or written (a damaged row, storage refusing):
            # exit as a crash, so the Runner restarts with backoff and, if it keeps
            # failing, marks the session failed and answers what waits for it. Staying
            # up unready would leave every request to this session waiting for ever.
            session_log().exception("session %s could not start", cfg.session_id)
            self._end(parent)

    def _end(self, parent: Parent) -> None:
        """End this process now, releasing what it holds."""
        live, self.live = self.live, None
        ended, self.exit = self.exit, None
        spare, self.spare = self.spare, None
        if live is not None:
            live.close()
        elif ended is not None:
            ended.close(tell=False)
        elif spare is not None:
            spare.close()
            spare.parent.close()
        else:
            parent.close()
        self.send(self.myAddress, ActorExitRequest())

    def _orphaned(self) -> bool:
        """End this process if the Runner's process has gone (this process was
        re-parented): a new Runner replaces it. True if it ends."""
        phase = self._phase()
        if phase is None or not phase.parent.gone():
            return False
        sid = self.live.session_id if self.live is not None else ""
        session_log().warning("session %s: runner gone, stopping orphaned incarnation", sid)
        self._end(phase.parent)
        return True

    # -- requests, the worker's output, the Runner's answers ----------------------------------

    def receiveMsg_Routed(self, routed: Routed, sender: Any) -> None:
        if self.live is not None:
            self.live.routed(routed)
        elif self.exit is not None:
            # On its way out; the Runner queues the request for the next incarnation.
            self.exit.bounce(routed)
        elif routed.reply_to is not None:
            failed = m.RequestFailed(
                request_id=routed.message.request_id,
                error="SessionNotFound",
                message="not serving",
            )
            self.send(routed.reply_to, failed)

    def _from_worker(
        self, msg: c.Progress | c.Govern | c.Spawn | c.SetTimer | RecordPoison, sender: Any
    ) -> None:
        # A `SetTimer` comes bare from the turn's worker (the protocol's arrives `Routed`).
        if self.live is not None and not isinstance(msg, m.SetTimer):
            self.live.worker_said(msg)

    receiveMsg_Progress = _from_worker
    receiveMsg_Govern = _from_worker
    receiveMsg_Spawn = _from_worker
    receiveMsg_SetTimer = _from_worker
    receiveMsg_RecordPoison = _from_worker

    def receiveMsg_Finished(self, msg: c.Finished, sender: Any) -> None:
        if self.live is not None:
            self.live.finished(msg)

    def receiveMsg_SessionReply(self, msg: m.SessionReply, sender: Any) -> None:
        if self.live is not None:
            self.live.spawned(msg.request_id, "")

    def receiveMsg_RequestFailed(self, msg: m.RequestFailed, sender: Any) -> None:
        if self.live is not None:
            self.live.spawn_refused(msg)

    def receiveMsg_Ack(self, msg: m.Ack, sender: Any) -> None:
        pass  # a child acknowledging its cancellation

    def receiveMsg_Ping(self, msg: Ping, sender: Any) -> None:
        self.send(sender, Pong(request_id=msg.request_id, pid=os.getpid()))

    def receiveMsg_Behind(self, msg: Behind, sender: Any) -> None:
        # Everything the Runner sent before this is handled, its replies sent ahead.
        self.send(msg.reply_to, RequestWhere(request_id=msg.request_id, where=""))

    # -- watches, timers and exit -------------------------------------------------------------

    def receiveMsg_WatchMessage(self, msg: WatchMessage, sender: Any) -> None:
        serving = self.live or self.exit
        if serving is not None:
            serving.drain()
        phase = self._phase()
        if phase is not None and phase.parent.ready(msg.ready):
            self._orphaned()

    def receiveMsg_WakeupMessage(self, msg: WakeupMessage, sender: Any) -> None:
        if msg.payload in (AUTO_SEAL, AUTO_SEAL_TIMER):
            if self.live is not None:
                self.live.auto_seal(msg.payload)
            return
        if msg.payload == TIMER_WAKE:
            if self.live is not None:
                self.live.timers_due()
            return
        if msg.payload == "notify":
            phase = self.live or self.exit
            if phase is not None:
                phase.notify_due()
            return
        # Checked until the process ends, stopping or not: an incarnation that asked a
        # Runner that has since died to stop it would otherwise wait for ever.
        if msg.payload != ORPHAN_TIMER or self._phase() is None:
            return
        if not self._orphaned():
            self.wakeupAfter(timedelta(seconds=ORPHAN_CHECK), ORPHAN_TIMER)

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: Any) -> None:
        live, self.live = self.live, None
        ended, self.exit = self.exit, None
        spare, self.spare = self.spare, None
        if live is not None:
            live.notify(now=True)
            live.close()
        if ended is not None:
            ended.close()
        if spare is not None:
            spare.close()
            spare.parent.close()
