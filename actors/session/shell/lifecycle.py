"""`SessionLifecycle`: the session actor's mixin for its life: standing by as a spare, the
`SessionConfig` that starts it, its timers (notices, seals, the orphan check) and its exit."""

from __future__ import annotations

import contextlib
import os
import socket
from datetime import timedelta
from typing import Any

from thespian.actors import ActorExitRequest, WakeupMessage

from spine import ConflictError, DecodeError, Log, open_log

from ..._runtime.logformat import set_context
from ..._runtime.mailslot import Mailslot, supports_watch
from ..._runtime.system import configure_actor_logging
from ..protocol import SessionConfig, SessionReady, SessionUnreadable, SpareReady, Standby
from ..rules import commands as c
from ..rules.state import SessionState, fold
from .autoseal import AUTO_SEAL, AUTO_SEAL_TIMER, AutoSealer
from .execution import DecisionExecution
from .incarnation import session_log
from .outbox import Outbox
from .snapshots import SnapshotStore
from .subscriptions import Subscriptions
from .warmup import WARM_UP, warm_up

#: Seconds between looks at the parent where no pidfd can watch it (see `_watch_parent`).
_ORPHAN_CHECK = 0.5


class SessionLifecycle(DecisionExecution):
    """Start, timers and exit of a session incarnation."""

    # -- start ---------------------------------------------------------------------------

    def receiveMsg_Standby(self, msg: Standby, sender: Any) -> None:
        # A spare process, configured later: it must not outlive a Runner that dies first.
        if self.cfg is not None or self.exited:
            return
        self._watch_parent()
        if msg.db_path:
            self._open_ahead(msg)
        try:
            # The first run of a session's paths, in memory: see `warmup`.
            warm_up()
        except Exception:
            session_log().warning("spare session process: warm-up failed", exc_info=True)
        self.send(sender, SpareReady())

    def _open_ahead(self, msg: Standby) -> None:
        """Open what every session opens first, and read through it once, while nothing
        waits for it. On failure the session opens them itself once configured, and
        reports what fails."""
        try:
            configure_actor_logging(os.path.dirname(msg.db_path))
            log = open_log(
                msg.spine or msg.db_path, single_connection=True, deferred_checkpoints=True
            )
            try:
                snapshots = SnapshotStore(os.path.dirname(msg.db_path), msg.spine or msg.db_path)
            except Exception:
                log.close()
                raise
        except Exception:
            return
        self._warm = (msg.db_path, msg.spine, log, snapshots)
        try:
            # A session's first reads (its stream, a snapshot, an idempotency key).
            log.last_seq(WARM_UP)
            log.find_key(WARM_UP, WARM_UP)
            list(log.read_events(WARM_UP, 0))
            snapshots.load(WARM_UP)
        except Exception:
            pass  # the session reads them again, and reports what fails

    def _opened(self, cfg: SessionConfig) -> tuple[Log, SnapshotStore]:
        """The log and snapshot store: those a spare opened ahead, or new ones."""
        warm, self._warm = self._warm, None
        if warm is not None and warm[:2] == (cfg.db_path, cfg.spine):
            return warm[2], warm[3]
        if warm is not None:
            warm[2].close()
            warm[3].close()
        log = open_log(cfg.spine or cfg.db_path, single_connection=True, deferred_checkpoints=True)
        try:
            return log, SnapshotStore(os.path.dirname(cfg.db_path), cfg.spine or cfg.db_path)
        except Exception:
            log.close()
            raise

    def _watch_parent(self) -> None:
        if self.ppid is not None:
            return
        self.ppid = os.getppid()
        # The kernel says when the parent ends (no pass of the loop until then: a daemon
        # with hundreds of idle sessions woke each twice a second); else it is polled.
        if supports_watch(self):
            with contextlib.suppress(AttributeError, OSError):
                self._parent_fd = os.pidfd_open(self.ppid)
        if self._parent_fd is None:
            self.wakeupAfter(timedelta(seconds=_ORPHAN_CHECK), "orphan-check")
        else:
            self._rewatch()
            self._orphaned()  # it may have ended before the descriptor was opened

    def receiveMsg_SessionConfig(self, cfg: SessionConfig, sender: Any) -> None:
        if self.cfg is not None:
            return
        self.cfg, self.runner = cfg, sender
        try:
            self._start(cfg, sender)
        except DecodeError as exc:
            # A stored row does not decode: no restart can load this stream, so the Runner
            # marks the session failed at once, naming the row (its seals stay verifiable).
            seq = exc.seq or 0
            why = f"its stream does not decode at seq {seq}: {exc.problem}"
            session_log().error("session %s could not start: %s", cfg.session_id, why)
            self.send(
                sender,
                SessionUnreadable(
                    session_id=cfg.session_id, incarnation=cfg.incarnation, seq=seq, reason=why
                ),
            )
            self.exited = True
            self.send(self.myAddress, ActorExitRequest())
        except Exception:
            # The stream cannot be loaded or written (a damaged row, storage refusing):
            # exit as a crash, so the Runner restarts with backoff and, if it keeps
            # failing, marks the session failed and answers what waits for it. Staying
            # up unready would leave every request to this session waiting for ever.
            session_log().exception("session %s could not start", cfg.session_id)
            self.exited = True
            self.send(self.myAddress, ActorExitRequest())

    def _start(self, cfg: SessionConfig, sender: Any) -> None:
        sid = cfg.session_id
        # If the Runner's process dies this process is re-parented: then this incarnation
        # is an orphan that a new Runner will replace, so it stops itself.
        self._watch_parent()
        if supports_watch(self):
            self._slot = Mailslot()
            self._rewatch()
        data_dir = os.path.dirname(cfg.db_path)
        # Every record this process writes from here on names the session and incarnation
        # (and, once it appends, its last seq and kind).
        set_context(session=sid, incarnation=cfg.incarnation)
        configure_actor_logging(data_dir)
        # The session is its log's only user in this process: one connection, not two.
        self.log, self.snapshots = self._opened(cfg)
        take_lease = getattr(self.log, "take_lease", None)
        if take_lease is not None:
            # A backend shared by hosts fences writers: from here on an older incarnation
            # elsewhere (a partitioned host) has its appends refused.
            take_lease(sid, f"{socket.gethostname()}/{os.getpid()}/{cfg.incarnation}")
        self.subs = Subscriptions(sid, self.log, self.send)
        self.outbox = Outbox(sid, cfg.incarnation)
        self.sealer = AutoSealer(cfg.auto_seal, sid, self.log, lambda: self._keys().signing_key())
        stored = self._load(sid)
        session_log().info(
            "session %s: incarnation %d serving from seq %d", sid, cfg.incarnation, stored.last_seq
        )
        self.state = c.Session(
            stored=stored, busy_policy=cfg.busy_policy, prices=cfg.prices or None
        )
        opened = c.Open(incarnation=cfg.incarnation, create=cfg.create, metadata=cfg.metadata)
        try:
            self._run(opened, sender)
        except ConflictError:
            # Another incarnation wrote meanwhile: a racing create, or this one is stale.
            self.send(
                sender,
                SessionReady(
                    session_id=sid,
                    incarnation=cfg.incarnation,
                    last_seq=self.log.last_seq(sid),
                    already_exists=cfg.create,
                    error="" if cfg.create else "stale incarnation",
                ),
            )
            return
        self._settle()

    def _load(self, sid: str) -> SessionState:
        """The stored state: the snapshot (unless it is ahead of the log) folded forward
        with the events after it."""
        assert self.log is not None and self.snapshots is not None
        base = self.snapshots.load(sid)
        if base is None or base.last_seq > self.log.last_seq(sid):
            base = SessionState(session_id=sid)
        self.snap_seq = base.last_seq
        stored = fold(base, self.log.read_events(sid, base.last_seq))
        set_context(seq=stored.last_seq)
        return stored

    # -- timers and exit ---------------------------------------------------------------

    def receiveMsg_WakeupMessage(self, msg: WakeupMessage, sender: Any) -> None:
        if msg.payload in (AUTO_SEAL, AUTO_SEAL_TIMER):
            self._auto_seal(msg.payload)
            return
        if msg.payload == "notify":
            self._notify_scheduled = False
            self._notify()
            return
        # Checked until this incarnation has exited, stopping or not: one that asked a
        # Runner that has since died to stop it would otherwise wait for ever.
        if msg.payload != "orphan-check" or self.exited:
            return
        if not self._orphaned():
            self.wakeupAfter(timedelta(seconds=_ORPHAN_CHECK), "orphan-check")

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: Any) -> None:
        self._notify(now=True)
        self.exited = True
        if self._warm is not None:
            self._warm[2].close()
            self._warm[3].close()
            self._warm = None
        if self._slot is not None:
            self._slot.close()
        if self.worker is not None:
            self.worker.cancel()
            self.worker = None
        if self.log is not None:
            self.log.close()
            self.log = None
        if self.snapshots is not None:
            self.snapshots.close()
            self.snapshots = None
