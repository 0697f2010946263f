"""`Incarnation`: everything one live incarnation of a session holds, created whole from
its `SessionConfig`: the log and snapshot store, the folded state, the turn running on a
worker, the outbox of news for the Runner, the subscriptions, the seal policy and the slot
the turn's threads hand their output back through. It answers what the actor hands it
(routed requests, the worker's output, the Runner's answers) by running commands through
the session's `Executor` with the ports of `execution`."""

from __future__ import annotations

import os
import socket
import time
from datetime import timedelta
from typing import Any

import attrs

from spine import ConflictError, Log, StorageError

from ... import messages as m
from ..._runtime.mailslot import Mailslot, in_flight, supports_watch
from ...messages import Ping, Pong
from ..protocol import RecordPoison, Routed, SessionConfig, SessionReady, SessionStopping
from ..rules import commands as c
from ..rules.state import SessionState, fold
from ..rules.translation import command_of, session_info
from .alarm import Alarm
from .autoseal import AutoSealer
from .execution import executor, keys, session_log
from .outbox import NOTIFY_INTERVAL, Outbox
from .parent import Parent
from .snapshots import SnapshotStore
from .subscriptions import Subscriptions
from .tenantledger import LedgerPort
from .worker import TurnWorker


class Loopback:
    """Where the transport has no watches (everything in one process): the turn's output
    is sent to the actor's own address. Quiet once closed (the output has nowhere to go)."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor
        self.closed = False

    def put(self, msg: Any) -> bool:
        if self.closed:
            return False
        try:
            self.actor.send(self.actor.myAddress, msg)
        except Exception as exc:
            # No traceback: this runs on the turn's threads, and formatting one there races
            # with the main thread's parser on CPython 3.11 (see tests/test_layering.py).
            if not self.closed:
                session_log().error("turn worker could not reach its session: %r", exc)
        return True

    def pending(self) -> bool:
        return False

    def take(self) -> list[Any]:
        return []

    def close(self) -> None:
        self.closed = True


class Incarnation:
    """One live incarnation of a session, serving from its log."""

    def __init__(
        self, actor: Any, cfg: SessionConfig, runner: Any, parent: Parent, stores: Any
    ) -> None:
        sid = cfg.session_id
        self.actor, self.cfg, self.runner, self.parent = actor, cfg, runner, parent
        self.log: Log = stores[0]
        self.snapshots: SnapshotStore = stores[1]
        try:
            take_lease = getattr(self.log, "take_lease", None)
            if take_lease is not None:
                # A backend shared by hosts fences writers: from here on an older
                # incarnation elsewhere (a partitioned host) has its appends refused.
                take_lease(sid, f"{socket.gethostname()}/{os.getpid()}/{cfg.incarnation}")
            base = self.snapshots.load(sid)
            if base is None or base.last_seq > self.log.last_seq(sid):
                base = SessionState(session_id=sid)
            #: The seq of the last snapshot saved (or loaded), the payload bytes since.
            self.snap_seq, self.snap_size = base.last_seq, 0
            stored = fold(base, self.log.read_events(sid, base.last_seq))
            if cfg.snapshots.due(stored.last_seq - base.last_seq):
                # Folded a long way (a stream others wrote, a fold of another version):
                # once is enough.
                self.snapshot(stored)
        except BaseException:
            self.log.close()
            self.snapshots.close()
            raise
        self.state = c.Session(
            stored=stored,
            busy_policy=cfg.busy_policy,
            prices=cfg.prices or None,
            model_servers=cfg.model_servers,
        )
        self.subs = Subscriptions(sid, self.log, actor.send)
        self.ledger = LedgerPort(self.log, cfg.db_path)
        self.outbox = Outbox(sid, cfg.incarnation)
        self.sealer = AutoSealer(cfg.auto_seal, sid, self.log, self.signing_key)
        self.alarm = Alarm(actor)
        #: How the turn's threads reach this actor.
        self.slot: Mailslot | Loopback = Mailslot() if supports_watch(actor) else Loopback(actor)
        #: The turn running on a worker, by its number (at most one).
        self.workers: dict[int, TurnWorker] = {}
        #: Child creations asked of the Runner: request id -> (turn, tool use id, child).
        self.spawning: dict[str, tuple[int, str, str]] = {}
        #: How long appends take, a moving mean in seconds (see `execution.GROUP_AFTER`).
        self.commit_wait = 0.0
        self.notified_at = 0.0
        self.notify_armed = False
        #: The news gathered in this handler goes to the Runner at its end, not later.
        self.urgent = False

    @property
    def session_id(self) -> str:
        return self.cfg.session_id

    def snapshot(self, state: SessionState) -> None:
        """Save ``state`` as the session's snapshot (a failed save only means a longer
        fold next time: the next one is tried after as many events again)."""
        self.snapshots.save(state)
        self.snap_seq, self.snap_size = state.last_seq, 0

    def signing_key(self) -> Any:
        return keys(self.cfg).signing_key()

    def hand_back(self, msg: Any) -> None:
        """The turn's threads' only way back in; quiet once this incarnation has ended."""
        self.slot.put(msg)

    def fds(self) -> list[int]:
        """What Thespian's select loop watches for this incarnation."""
        own = [self.slot.fileno()] if isinstance(self.slot, Mailslot) else []
        return [*own, *self.parent.fds]

    # -- running commands ------------------------------------------------------------------

    def run(self, command: c.Command, reply_to: Any) -> None:
        """Decide ``command`` and carry the decision out."""
        executor(self, reply_to).run(command)

    def settle(self) -> None:
        """Start the next turn (or fail it at once) while one is due."""
        executor(self, None).settle()

    def open(self) -> None:
        """Record the incarnation's start (or the session's creation) and start what is due."""
        cfg = self.cfg
        session_log().info(
            "session %s: incarnation %d serving from seq %d",
            cfg.session_id,
            cfg.incarnation,
            self.state.stored.last_seq,
        )
        opened = c.Open(incarnation=cfg.incarnation, create=cfg.create, metadata=cfg.metadata)
        try:
            self.run(opened, self.runner)
        except ConflictError:
            # Another incarnation wrote meanwhile: a racing create, or this one is stale.
            ready = SessionReady(
                session_id=cfg.session_id,
                incarnation=cfg.incarnation,
                last_seq=self.log.last_seq(cfg.session_id),
                already_exists=cfg.create,
                error="" if cfg.create else "stale incarnation",
            )
            self.actor.send(self.runner, ready)
            return
        self.settle()

    def failure(self, request_id: str, error: str, message: str) -> m.RequestFailed:
        return m.RequestFailed(
            request_id=request_id, error=error, message=message, session_id=self.session_id
        )

    def reply(self, to: Any, msg: Any) -> None:
        if to is not None and msg is not None:
            self.actor.send(to, msg)

    # -- requests ----------------------------------------------------------------------------

    def routed(self, routed: Routed) -> None:
        msg, reply_to = routed.message, routed.reply_to
        self._request(msg, reply_to, routed.restarts)
        key = getattr(msg, "key", "")
        if key:
            # Answered (committed, duplicate, consumed or refused): the Runner stops
            # tracking the key for redelivery.
            self.tell_runner(keys=[key])
        self.flush_if_idle()

    def _request(self, msg: Any, reply_to: Any, restarts: int) -> None:
        st = self.state.stored
        if isinstance(msg, Ping):
            self.reply(reply_to, Pong(request_id=msg.request_id, pid=os.getpid()))
        elif isinstance(msg, m.GetSession):
            info = session_info(st, restarts)
            self.reply(reply_to, m.SessionReply(request_id=msg.request_id, info=info))
        elif isinstance(msg, m.Subscribe):
            self.subs.add(msg, reply_to, st.last_seq, st.closed)
        elif isinstance(msg, m.Unsubscribe):
            self.subs.remove(msg.subscription_id)
            self.reply(reply_to, m.Done(request_id=msg.request_id))
        else:
            command = command_of(msg)
            if isinstance(command, c.Receive):
                command = self._with_stored(command)
            elif isinstance(command, c.Submit | c.SetTimer):
                command = attrs.evolve(command, now=time.time(), stored=self._stored(command.key))
            elif isinstance(command, c.FireDue):
                command = attrs.evolve(command, now=time.time())
            if command is None:
                text = f"a session does not take {type(msg).__name__}"
                self.reply(reply_to, self.failure(msg.request_id, "InvalidRequest", text))
                return
            try:
                self.run(command, reply_to)
            except ConflictError:
                # Another incarnation writes this stream: this one has asked to be stopped,
                # and the Runner serves the request with the one that is current.
                again = Routed(message=msg, reply_to=reply_to, session_id=self.session_id)
                self.actor.send(self.runner, again)
                return
            self.settle()

    def _with_stored(self, cmd: c.Receive) -> c.Receive:
        """The command with what an earlier delivery of its key stored, if any."""
        prior = self.log.find_key(self.session_id, cmd.ingress.key)
        if prior is None or not prior.records:
            return cmd
        stored = tuple((r.seq, r.kind) for r in prior.records)
        return attrs.evolve(cmd, stored=stored, prior=tuple(r.event() for r in prior.records))

    def _stored(self, key: str) -> tuple[tuple[int, str], ...]:
        """What an earlier append with ``key`` stored, as ``(seq, kind)`` rows."""
        prior = self.log.find_key(self.session_id, key)
        return () if prior is None else tuple((r.seq, r.kind) for r in prior.records)

    # -- from the worker and the Runner ------------------------------------------------------

    def worker_said(self, msg: c.Progress | c.Govern | c.Spawn | c.SetTimer | RecordPoison) -> None:
        if isinstance(msg, c.Govern):
            # The decider has no clock: a goal's wall-time budget is checked against this,
            # and a tenant's caps against the others' share in its periods.
            now = time.time()
            msg = attrs.evolve(
                msg, now=now, others=self.ledger.share(self.state.stored, now, msg.action)
            )
        if isinstance(msg, RecordPoison):
            self.run(c.Poisoned(key=msg.key, detail=msg.detail), None)
        elif isinstance(msg, c.SetTimer):
            # The turn's ``schedule`` tool: keyed by its call, so a resumed turn sets it once.
            self.run(attrs.evolve(msg, now=time.time(), stored=self._stored(msg.key)), None)
            self.settle()
        else:
            self.run(msg, None)

    def finished(self, msg: c.Finished) -> None:
        self.workers.pop(msg.turn, None)
        self.run(msg, None)
        self.settle()
        self.flush_if_idle()

    def spawned(self, request_id: str, error: str) -> None:
        """The Runner's answer to a child creation: hand it to the waiting spawn call."""
        asked = self.spawning.pop(request_id, None)
        if asked is None:
            return
        turn, tool_use_id, child = asked
        worker = self.workers.get(turn)
        if worker is not None:
            worker.answer_spawn(tool_use_id, child, error)

    def spawn_refused(self, msg: m.RequestFailed) -> None:
        # A child that exists already is the one an earlier attempt of this call created
        # (the turn resumed after a crash): follow it, do not make a second.
        error = "" if msg.error == "SessionAlreadyExists" else f"{msg.error}: {msg.message}"
        asked = self.spawning.get(msg.request_id)
        if asked is not None and not error:
            # After a daemon restart that child is not loaded either: bring it up, so its
            # run goes on while this turn follows it.
            child = asked[2]
            again = m.ResumeGoal(
                request_id=f"resume-{child}", session_id=child, key=f"resume-{child}"
            )
            self.actor.send(self.runner, again)
        self.spawned(msg.request_id, error)

    def auto_seal(self, payload: str) -> None:
        """A seal is due by the policy: seal what is new, as an asked-for seal would."""
        s = self.state
        if s.stopping or s.stored.closed or s.stored.failed:
            return
        cmd = self.sealer.due(payload, s.stored.last_seq)
        if cmd is None:
            return
        try:
            self.run(cmd, None)
        except (ConflictError, StorageError):
            pass  # this incarnation has asked to be stopped; the next one seals

    def timers_due(self) -> None:
        """The alarm rang: fire what is due, as the Runner's ask would (once, by key)."""
        try:
            self.run(c.FireDue(request_id="", now=self.alarm.rang(self.state)), None)
        except (ConflictError, StorageError):
            return  # this incarnation has asked to be stopped; the next one fires
        self.settle()
        self.flush_if_idle()

    # -- news for the Runner -----------------------------------------------------------------

    def drain(self) -> None:
        """Hand the actor what the turn's threads put in the slot, in order; dropped once
        this incarnation no longer serves."""
        for handed in self.slot.take():
            if self.actor.live is self:
                self.actor.dispatch(handed)

    def after_message(self) -> None:
        """The end of every message: take what was handed back during it (an instant
        turn's end, which spares a pass of the transport's loop to be woken for it), and
        send the news for the Runner, once per message; and keep the alarm armed for the
        next timer."""
        if self.slot.pending():
            self.drain()
        self.alarm.arm(self.state)
        if not self.outbox:
            self.urgent = False
            return
        # At once if it is urgent (first words, or the session has gone idle), else within
        # the interval. A turn that starts and ends inside this handler sends one notice
        # and arms no timer.
        if self.urgent:
            self.notify()
        if self.outbox and not self.notify_armed:
            self.notify_armed = True
            self.actor.wakeupAfter(timedelta(seconds=NOTIFY_INTERVAL), "notify")
        self.urgent = False

    def tell_runner(
        self,
        records: list[tuple[int, str, bytes]] | None = None,
        live: list[tuple[int, str, str, str]] | None = None,
        keys: list[str] | None = None,
    ) -> None:
        self.outbox.add(records or (), live or (), keys or ())
        if self.outbox.full():
            self.notify()
        elif live and time.monotonic() - self.notified_at >= NOTIFY_INTERVAL:
            # The first words after a quiet spell go out at once (a user waits for the first
            # token), at the end of this handler; what follows them is gathered as before.
            self.urgent = True

    def flush_if_idle(self) -> None:
        """An idle session tells the Runner at once (at the end of this handler):
        coalescing only pays while a turn runs, and a late notice would meet the next
        request on its way in."""
        st = self.state
        if st.running is None and not st.stored.busy:
            self.urgent = True

    def notify(self, now: bool = False) -> None:
        if not self.outbox:
            return
        if not now and in_flight(self.actor, self.runner):
            # The last notice is still on its way: this news joins the next one, which
            # the timer armed at the end of the handler sends.
            return
        busy = self.state.running is not None or self.state.stored.busy
        if self.outbox.live:
            # The pace of live text is what batching protects; other news does not count.
            self.notified_at = time.monotonic()
        self.actor.send(self.runner, self.outbox.take(busy, len(self.state.stored.pending)))

    def notify_due(self) -> None:
        self.notify_armed = False
        self.notify()

    # -- the end -----------------------------------------------------------------------------

    def stop(self, reason: str) -> None:
        """Ask the Runner to stop this incarnation: the actor keeps only its `Exit`."""
        for worker in self.workers.values():
            worker.cancel()
        self.workers.clear()
        if self.actor.live is not self:
            return
        session_log().info("session %s: stopping (%s)", self.session_id, reason)
        self.state = attrs.evolve(self.state, stopping=True)
        self.notify(now=True)
        stopping = SessionStopping(
            session_id=self.session_id, incarnation=self.cfg.incarnation, reason=reason
        )
        self.actor.send(self.runner, stopping)
        self.actor.retire(self, reason)

    def close(self) -> None:
        """Release what this incarnation holds (the process is ending)."""
        self.slot.close()
        for worker in self.workers.values():
            worker.cancel()
        self.workers.clear()
        self.log.close()
        self.snapshots.close()
        self.ledger.close()
        self.parent.close()
