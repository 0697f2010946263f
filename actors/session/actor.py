"""`SessionActor`: the thin shell that runs one session's decider.

Each handler turns a message into a command, calls `decide`, appends the decision's events
(the session is its stream's only writer: ``expected_seq`` guards against a stale
incarnation), replies, and carries out the effects. A turn runs on a worker thread that
hands its output back to the session's own address, so only handlers touch state and an
interrupt is handled while the turn still runs.

No handler may raise: Thespian would run it again (side effects twice) and then bounce the
message as poison. `GuardedActor` catches, logs and answers instead.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import attrs
from thespian.actors import ActorExitRequest, WakeupMessage, WatchMessage

from spine import AppendResult, ConflictError, DecodeError, Event, Log, StorageError, open_log
from spine.seal import KeyStore

from .. import messages as m
from ..agents import ModelFactory
from ..logformat import set_context
from ..mailslot import Mailslot, in_flight, supports_watch
from ..messages import Ping, Pong
from ..shell import GuardedActor
from ..system import configure_actor_logging
from . import commands as c
from . import effects
from .autoseal import AUTO_SEAL, AUTO_SEAL_TIMER, AutoSealer
from .decide import decide, ingress_seq
from .outbox import NOTIFY_INTERVAL, Outbox
from .protocol import (
    RecordPoison,
    Routed,
    SessionConfig,
    SessionReady,
    SessionStopping,
    SessionUnreadable,
    SpareReady,
    Standby,
)
from .snapshots import SNAPSHOT_EVERY, SnapshotStore
from .state import SessionState, fold
from .subscriptions import Subscriptions
from .warmup import WARM_UP, warm_up
from .worker import TurnWorker


def _log() -> logging.Logger:
    # Looked up at each use: Thespian re-initializes logging in actor processes after
    # import, so a logger captured at import time may no longer be wired to anything.
    return logging.getLogger("vertebra.session")


_ORPHAN_CHECK = 0.5


class SessionActor(GuardedActor):
    """One session. Created only by the Runner; configured by a `SessionConfig` message."""

    log_name = "vertebra.session"

    @staticmethod
    def actorSystemCapabilityCheck(
        capabilities: Mapping[str, Any], requirements: Mapping[str, Any] | None
    ) -> bool:
        # With several hosts the Runner names the member a session goes to.
        from ..runner.cluster import fits

        return fits(capabilities, requirements)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cfg: SessionConfig | None = None
        self.log: Log | None = None
        self.state: c.Session | None = None
        self.runner: Any = None
        self.worker: TurnWorker | None = None
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
        return slot.watch if slot is not None and not self.exited else None

    def _drain(self, slot: Mailslot) -> None:
        for handed in slot.take():
            if self.exited:
                return
            super().receiveMessage(handed, self.myAddress)

    def receiveMsg_WatchMessage(self, msg: WatchMessage, sender: Any) -> None:
        if self._slot is not None:
            self._drain(self._slot)

    def _failure(self, request_id: str, error: str, message: str) -> m.RequestFailed:
        sid = self.cfg.session_id if self.cfg else ""
        return m.RequestFailed(request_id=request_id, error=error, message=message, session_id=sid)

    def _reply(self, to: Any, msg: Any) -> None:
        if to is not None and msg is not None:
            self.send(to, msg)

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
            _log().warning("spare session process: warm-up failed", exc_info=True)
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
                snapshots = SnapshotStore(os.path.dirname(msg.db_path))
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
            return log, SnapshotStore(os.path.dirname(cfg.db_path))
        except Exception:
            log.close()
            raise

    def _watch_parent(self) -> None:
        if self.ppid is None:
            self.ppid = os.getppid()
            self.wakeupAfter(timedelta(seconds=_ORPHAN_CHECK), "orphan-check")

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
            _log().error("session %s could not start: %s", cfg.session_id, why)
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
            _log().exception("session %s could not start", cfg.session_id)
            self.exited = True
            self.send(self.myAddress, ActorExitRequest())

    def _start(self, cfg: SessionConfig, sender: Any) -> None:
        sid = cfg.session_id
        # If the Runner's process dies this process is re-parented: then this incarnation
        # is an orphan that a new Runner will replace, so it stops itself.
        self._watch_parent()
        if supports_watch(self):
            self._slot = Mailslot()
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
        base = self.snapshots.load(sid)
        if base is None or base.last_seq > self.log.last_seq(sid):
            base = SessionState(session_id=sid)
        self.snap_seq = base.last_seq
        stored = fold(base, self.log.read_events(sid, base.last_seq))
        set_context(seq=stored.last_seq)
        _log().info(
            "session %s: incarnation %d serving from seq %d", sid, cfg.incarnation, stored.last_seq
        )
        self.state = c.Session(stored=stored, busy_policy=cfg.busy_policy)
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

    # -- running decisions ---------------------------------------------------------------

    def _run(self, command: c.Command, reply_to: Any) -> None:
        """Decide ``command`` and carry the decision out."""
        assert self.state is not None
        self._apply(decide(self.state, command), reply_to)

    def _apply(self, d: c.Decision, reply_to: Any) -> None:
        reply = d.reply
        if d.events:
            res = self._append(d.events, d.key)
            if res.duplicate:
                # Stored by an earlier delivery: answer as then, change nothing.
                self._reply(reply_to, self._as_then(reply, res))
                return
            if isinstance(reply, m.SealReply | m.VerifyReply):
                reply = attrs.evolve(reply, seq=res.first_seq)
            if isinstance(reply, SessionReady):
                reply = attrs.evolve(reply, last_seq=res.last_seq)
        assert self.state is not None
        self.state = attrs.evolve(d.state, stored=self.state.stored)
        if d.live:
            self._tell_runner(live=[x.as_tuple() for x in d.live])
        self._reply(reply_to, reply)
        for effect in d.effects:
            self._effect(effect, reply_to)

    def _as_then(self, reply: Any, res: AppendResult) -> Any:
        """The ack of a redelivered key names what the first delivery stored."""
        if not isinstance(reply, m.Ack):
            return reply
        seq = ingress_seq([(r.seq, r.kind) for r in res.records]) or res.last_seq
        return attrs.evolve(reply, seq=seq, duplicate=True)

    def _append(self, events: tuple[Event, ...], key: str | None) -> AppendResult:
        assert self.log is not None and self.state is not None and self.cfg is not None
        st = self.state.stored
        started = time.perf_counter()
        try:
            res = self.log.append(
                st.session_id, events, expected_seq=st.last_seq, idempotency_key=key
            )
        except ConflictError:
            _log().error("session %s: stale incarnation, stopping", st.session_id)
            self._stop_self("stale incarnation")
            raise
        except StorageError:
            # What this incarnation holds may no longer match the log (a turn it thinks
            # running, say): a new one rebuilds from the log and closes what is open.
            _log().exception("session %s: append failed, stopping", st.session_id)
            self._stop_self("storage error")
            raise
        if self.outbox is not None:
            self.outbox.appends.observe(time.perf_counter() - started)
        if not res.duplicate:
            self._absorb(res, events)
        return res

    def _absorb(self, res: AppendResult, events: tuple[Event, ...]) -> None:
        """Fold newly stored events into the state, snapshot if due, and publish them.

        The events folded are the objects just appended, numbered from the append's first
        seq: decoding the stored rows back would give the same state at several times the
        cost."""
        assert self.state is not None and self.subs is not None
        st = fold(self.state.stored, events, res.first_seq)
        self.state = attrs.evolve(self.state, stored=st)
        if res.records:
            set_context(seq=res.records[-1].seq, kind=res.records[-1].kind)
        if self.snapshots is not None and st.last_seq - self.snap_seq >= SNAPSHOT_EVERY:
            self.snapshots.save(st)
            self.snap_seq = st.last_seq
        self.subs.publish(res.records)
        self._tell_runner(records=[(r.seq, r.kind, r.payload) for r in res.records])
        if self.sealer is not None:
            due = self.sealer.appended(events, res.first_seq, st.last_seq, st.metadata)
            if due is not None:
                self.wakeupAfter(timedelta(seconds=due[0]), due[1])

    def _auto_seal(self, payload: str) -> None:
        """A seal is due by the policy: seal what is new, as an asked-for seal would."""
        s = self.state
        if self.sealer is None or s is None or self.stopping_sent or s.stopping:
            return
        if s.stored.closed or s.stored.failed:
            return
        cmd = self.sealer.due(payload, s.stored.last_seq)
        if cmd is None:
            return
        try:
            self._run(cmd, None)
        except (ConflictError, StorageError):
            pass  # this incarnation has asked to be stopped; the next one seals

    def _settle(self) -> None:
        """Start the next turn (or fail it at once) while one is due."""
        while self.state is not None and not self.state.stopping:
            d = decide(self.state, c.Settle())
            if not d.events and not d.effects:
                return
            self._apply(d, None)

    # -- effects -------------------------------------------------------------------------

    def _effect(self, effect: c.Effect, reply_to: Any) -> None:
        if isinstance(effect, c.RunInterceptors):
            self._intercept(effect, reply_to)
        elif isinstance(effect, c.StartTurn):
            self._start_turn(effect)
        elif isinstance(effect, c.AnswerWorker):
            if self.worker is not None and self.worker.turn == effect.turn:
                self.worker.answer(
                    effect.action, effect.tool_use_id, effect.verdict, effect.call, effect.fault
                )
        elif isinstance(effect, c.CreateChild):
            rid = f"spawn-{effect.child}-{time.monotonic_ns()}"
            self._spawning[rid] = (effect.turn, effect.tool_use_id, effect.child)
            create = m.CreateSession(
                request_id=rid, session_id=effect.child, metadata=dict(effect.metadata)
            )
            self.send(self.runner, create)
        elif isinstance(effect, c.CancelChildren):
            for child in effect.children:
                stop = m.Interrupt(
                    request_id=f"cancel-{child}",
                    session_id=child,
                    key=f"cancel-{child}",
                    reason="cancelled",
                )
                self.send(self.runner, stop)
        elif isinstance(effect, c.CancelTurn):
            if self.worker is not None and self.worker.turn == effect.turn:
                self.worker.cancel()
                self.worker = None
        elif isinstance(effect, c.EndSubscriptions):
            assert self.subs is not None
            self.subs.end_all()
        elif isinstance(effect, c.StopSelf):
            self._stop_self(effect.reason)
        elif isinstance(effect, c.ComputeSeal):
            assert self.log is not None and self.cfg is not None
            key = self._keys().signing_key()
            self._run(effects.seal(self.log, self.cfg.session_id, key, effect.request_id), reply_to)
        elif isinstance(effect, c.ComputeVerification):
            assert self.log is not None and self.cfg is not None
            ring = self._keys().keyring()
            cmd = effects.verification(self.log, self.cfg.session_id, ring, effect.request_id)
            self._run(cmd, reply_to)

    def _intercept(self, effect: c.RunInterceptors, reply_to: Any) -> None:
        assert self.cfg is not None and self.state is not None
        try:
            cmd = effects.intercept(self.cfg.interceptors, effect, self.state)
        except Exception as exc:
            # Called once, answered once: the caller gets the interceptor's own error.
            _log().warning("session %s: interceptor raised: %r", self.cfg.session_id, exc)
            text = f"interceptor failed: {type(exc).__name__}: {exc}"
            self._reply(reply_to, self._failure(effect.request_id, "InterceptorError", text))
            return
        self._run(cmd, reply_to)

    def _start_turn(self, effect: c.StartTurn) -> None:
        assert self.cfg is not None
        factory = self.cfg.factory or ModelFactory()
        try:
            agent = factory.build(effect.spec, effect.input.session_id)
        except Exception as exc:  # a factory failure fails the turn, not the session
            self._run(c.StartFailed(turn=effect.turn, error=f"{type(exc).__name__}: {exc}"), None)
            return
        cfg = self.cfg
        self.worker = TurnWorker(
            self._send_to_self,
            effect.turn,
            cfg.flush_interval,
            # Children are followed on a log of their own: reads only, so it never takes
            # the write lock that opening a log for writing takes to check the schema.
            open_log=lambda: open_log(cfg.spine or cfg.db_path, read_only=True),
        )
        self.worker.start(agent, effect.input)

    def _send_to_self(self, msg: Any) -> None:
        """The worker's only way back in (from the turn's threads); quiet once this
        incarnation has exited (the turn's output then has nowhere to go)."""
        if self.exited:
            return
        if self._slot is not None:
            self._slot.put(msg)
            return
        try:
            self.send(self.myAddress, msg)
        except Exception as exc:
            # No traceback: this runs on the turn's threads, and formatting one there races
            # with the main thread's parser on CPython 3.11 (see tests/test_layering.py).
            if not self.exited:
                _log().error("turn worker could not reach its session: %r", exc)

    def _keys(self) -> KeyStore:
        assert self.cfg is not None
        return KeyStore(os.path.join(os.path.dirname(self.cfg.db_path), "keys"))

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
        _log().info("session %s: stopping (%s)", self.cfg.session_id, reason)
        self.state = attrs.evolve(self.state, stopping=True)
        self._notify(now=True)
        self.send(
            self.runner,
            SessionStopping(
                session_id=self.cfg.session_id, incarnation=self.cfg.incarnation, reason=reason
            ),
        )

    # -- requests ------------------------------------------------------------------------

    def receiveMsg_Routed(self, routed: Routed, sender: Any) -> None:
        msg, reply_to = routed.message, routed.reply_to
        if self.stopping_sent and self.runner is not None:
            # This incarnation is on its way out; the Runner learned that before this
            # bounce arrives (same sender, ordered), so it queues it for the next one.
            self.send(self.runner, routed)
            return
        if self.cfg is None or self.state is None:
            self._reply(reply_to, self._failure(msg.request_id, "SessionNotFound", "not serving"))
            return
        self._request(msg, reply_to, routed.restarts)
        key = getattr(msg, "key", "")
        if key:
            # Answered (committed, duplicate, consumed or refused): the Runner stops
            # tracking the key for redelivery.
            self._tell_runner(keys=[key])
        self._flush_if_idle()

    def _request(self, msg: Any, reply_to: Any, restarts: int) -> None:
        assert self.state is not None and self.subs is not None
        st = self.state.stored
        if isinstance(msg, Ping):
            self._reply(reply_to, Pong(request_id=msg.request_id, pid=os.getpid()))
        elif isinstance(msg, m.GetSession):
            self._reply(
                reply_to,
                m.SessionReply(
                    request_id=msg.request_id, info=c.session_info(self.state.stored, restarts)
                ),
            )
        elif isinstance(msg, m.Subscribe):
            self.subs.add(msg, reply_to, st.last_seq, st.closed)
        elif isinstance(msg, m.Unsubscribe):
            self.subs.remove(msg.subscription_id)
            self._reply(reply_to, m.Done(request_id=msg.request_id))
        else:
            command = c.command_of(msg)
            if isinstance(command, c.Receive):
                command = self._with_stored(command)
            elif isinstance(command, c.Submit):
                command = attrs.evolve(command, now=time.time(), stored=self._stored(command.key))
            if command is None:
                text = f"a session does not take {type(msg).__name__}"
                self._reply(reply_to, self._failure(msg.request_id, "InvalidRequest", text))
                return
            try:
                self._run(command, reply_to)
            except ConflictError:
                # Another incarnation writes this stream: this one has asked to be stopped,
                # and the Runner serves the request with the one that is current.
                sid = self.cfg.session_id if self.cfg else ""
                self.send(self.runner, Routed(message=msg, reply_to=reply_to, session_id=sid))
                return
            self._settle()

    def _with_stored(self, cmd: c.Receive) -> c.Receive:
        """The command with what an earlier delivery of its key stored, if any."""
        stored = self._stored(cmd.ingress.key)
        return attrs.evolve(cmd, stored=stored) if stored else cmd

    def _stored(self, key: str) -> tuple[tuple[int, str], ...]:
        """What an earlier append with ``key`` stored, as ``(seq, kind)`` rows."""
        assert self.log is not None and self.cfg is not None
        prior = self.log.find_key(self.cfg.session_id, key)
        return () if prior is None else tuple((r.seq, r.kind) for r in prior.records)

    # -- from the worker, the Runner and the timer ---------------------------------------

    def receiveMsg_Progress(self, msg: c.Progress, sender: Any) -> None:
        if self.state is not None and not self.stopping_sent:
            self._run(msg, None)

    def receiveMsg_Govern(self, msg: c.Govern, sender: Any) -> None:
        if self.state is not None and not self.stopping_sent:
            # The decider has no clock: a goal's wall-time budget is checked against this.
            self._run(attrs.evolve(msg, now=time.time()), None)

    def receiveMsg_Finished(self, msg: c.Finished, sender: Any) -> None:
        if self.state is None or self.stopping_sent:
            return
        if self.worker is not None and self.worker.turn == msg.turn:
            self.worker = None
        self._run(msg, None)
        self._settle()
        self._flush_if_idle()

    def receiveMsg_Spawn(self, msg: c.Spawn, sender: Any) -> None:
        if self.state is not None and not self.stopping_sent:
            self._run(msg, None)

    def _spawned(self, request_id: str, error: str) -> None:
        """The Runner's answer to a child creation: hand it to the waiting spawn call."""
        asked = self._spawning.pop(request_id, None)
        if asked is None:
            return
        turn, tool_use_id, child = asked
        if self.worker is not None and self.worker.turn == turn:
            self.worker.answer_spawn(tool_use_id, child, error)

    def receiveMsg_SessionReply(self, msg: m.SessionReply, sender: Any) -> None:
        self._spawned(msg.request_id, "")

    def receiveMsg_RequestFailed(self, msg: m.RequestFailed, sender: Any) -> None:
        # A child that exists already is the one an earlier attempt of this call created
        # (the turn resumed after a crash): follow it, do not make a second.
        error = "" if msg.error == "SessionAlreadyExists" else f"{msg.error}: {msg.message}"
        asked = self._spawning.get(msg.request_id)
        if asked is not None and not error:
            # After a daemon restart that child is not loaded either: bring it up, so its
            # run goes on while this turn follows it.
            child = asked[2]
            again = m.ResumeGoal(
                request_id=f"resume-{child}", session_id=child, key=f"resume-{child}"
            )
            self.send(self.runner, again)
        self._spawned(msg.request_id, error)

    def receiveMsg_Ack(self, msg: m.Ack, sender: Any) -> None:
        pass  # a child acknowledging its cancellation

    def receiveMsg_RecordPoison(self, msg: RecordPoison, sender: Any) -> None:
        if self.state is not None and not self.stopping_sent:
            self._run(c.Poisoned(key=msg.key, detail=msg.detail), None)

    def receiveMsg_Ping(self, msg: Ping, sender: Any) -> None:
        self.send(sender, Pong(request_id=msg.request_id, pid=os.getpid()))

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
        if os.getppid() != self.ppid:
            sid = self.cfg.session_id if self.cfg else ""
            _log().warning("session %s: runner gone, stopping orphaned incarnation", sid)
            self.stopping_sent = True
            self.exited = True
            if self.worker is not None:
                self.worker.cancel()
            self.send(self.myAddress, ActorExitRequest())
            return
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
