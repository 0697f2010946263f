"""`DecisionExecution`: the session actor's mixin that carries out the decider's decisions:
append their events, fold and publish what was stored, reply, and run their effects."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

import attrs

from spine import AppendResult, ConflictError, Event, StorageError, open_log
from spine.seal import KeyStore

from .. import messages as m
from ..agents import ModelFactory
from ..logformat import set_context
from . import commands as c
from . import effects
from .decide import decide, ingress_seq
from .incarnation import SessionIncarnation, session_log
from .protocol import SessionReady
from .replace import replace
from .snapshots import SNAPSHOT_EVERY
from .state import fold
from .worker import TurnWorker

#: Seconds an append takes on average (a moving mean) past which an instant turn is stored
#: in the append of the message that starts it (`DecisionExecution._with_instant_turn`):
#: alone on the log an append takes 0.2 ms; 50 busy sessions wait for the write lock.
GROUP_AFTER = 0.001
#: The weight of the latest append in that mean.
_WAIT_WEIGHT = 0.2


class DecisionExecution(SessionIncarnation):
    """Runs commands through `decide` and carries each decision out."""

    # -- running decisions ---------------------------------------------------------------

    def _run(self, command: c.Command, reply_to: Any) -> None:
        """Decide ``command`` and carry the decision out."""
        assert self.state is not None
        self._apply(decide(self.state, command), reply_to)

    def _apply(self, d: c.Decision, reply_to: Any) -> None:
        reply = d.reply
        if d.events:
            d = self._with_instant_turn(d)
            res = self._append(d.events, d.key)
            if res.duplicate:
                # Stored by an earlier delivery: answer as then, change nothing.
                self._reply(reply_to, self._as_then(reply, res))
                return
            if isinstance(reply, m.SealReply | m.VerifyReply):
                reply = attrs.evolve(reply, seq=res.first_seq)
            if isinstance(reply, SessionReady):
                reply = attrs.evolve(reply, last_seq=res.last_seq)
            # The sender waits for this answer, and only for what is durable: it goes out
            # before the fold, the publishing and the snapshot.
            self._reply(reply_to, reply)
            reply = None
            self._absorb(res, d.events)
        assert self.state is not None
        self.state = replace(d.state, stored=self.state.stored)
        if d.live:
            self._tell_runner(live=[x.as_tuple() for x in d.live])
        self._reply(reply_to, reply)
        for effect in d.effects:
            self._effect(effect, reply_to)

    def _with_instant_turn(self, d: c.Decision) -> c.Decision:
        """``d`` with the turn it starts already run and ended, in the same append, if the
        agent answers without waiting (its ``instant``, the scripted model's) while the
        log is contended: one commit per such turn instead of two.

        A commit is worth saving when commits wait for the write lock that the sessions
        share (under load, one in ten waited 11 ms for it); then the acknowledgement waits
        for the answer too, and finds it stored. On a log that commits at once it is not:
        the message is acknowledged after its own commit, and the answer follows.

        The end is decided on the state as it will be once ``d``'s events are stored. If
        the append fails or finds the key stored before, neither part is kept: an instant
        answer touches nothing outside the turn. An agent that must wait touched nothing
        either; it is kept for `_start_turn`, which runs it on a thread."""
        start = next((e for e in d.effects if isinstance(e, c.StartTurn)), None)
        if start is None or self.state is None or self._commit_wait < GROUP_AFTER:
            return d
        agent = self._build(start)
        self._built = (start, agent)
        if isinstance(agent, Exception):
            return d
        ended: list[Any] = []
        if not TurnWorker(ended.append, start.turn, 0.0).run_instant(agent, start.input):
            return d
        self._built = None
        st = self.state.stored
        began = replace(d.state, stored=fold(st, d.events, st.last_seq + 1))
        e = decide(began, ended[-1])
        return replace(
            d,
            state=replace(e.state, stored=st),
            events=(*d.events, *e.events),
            live=(*d.live, *e.live),
            effects=(*(x for x in d.effects if x is not start), *e.effects),
        )

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
            session_log().error("session %s: stale incarnation, stopping", st.session_id)
            self._stop_self("stale incarnation")
            raise
        except StorageError:
            # What this incarnation holds may no longer match the log (a turn it thinks
            # running, say): a new one rebuilds from the log and closes what is open.
            session_log().exception("session %s: append failed, stopping", st.session_id)
            self._stop_self("storage error")
            raise
        took = time.perf_counter() - started
        self._commit_wait += (took - self._commit_wait) * _WAIT_WEIGHT
        if self.outbox is not None:
            self.outbox.appends.observe(took)
        return res

    def _absorb(self, res: AppendResult, events: tuple[Event, ...]) -> None:
        """Fold newly stored events into the state, snapshot if due, and publish them.

        The events folded are the objects just appended, numbered from the append's first
        seq: decoding the stored rows back would give the same state at several times the
        cost."""
        assert self.state is not None and self.subs is not None
        st = fold(self.state.stored, events, res.first_seq)
        self.state = replace(self.state, stored=st)
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
            session_log().warning("session %s: interceptor raised: %r", self.cfg.session_id, exc)
            text = f"interceptor failed: {type(exc).__name__}: {exc}"
            self._reply(reply_to, self._failure(effect.request_id, "InterceptorError", text))
            return
        self._run(cmd, reply_to)

    def _start_turn(self, effect: c.StartTurn) -> None:
        assert self.cfg is not None
        built, self._built = self._built, None
        # Built already when an instant answer was tried (it said it must wait, or the
        # factory failed): not built, nor tried, twice.
        ahead = built is not None and built[0] is effect
        agent = built[1] if built is not None and ahead else self._build(effect)
        if isinstance(agent, Exception):  # a factory failure fails the turn, not the session
            error = f"{type(agent).__name__}: {agent}"
            self._run(c.StartFailed(turn=effect.turn, error=error), None)
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
        self.worker.start(agent, effect.input, instant=not ahead)

    def _build(self, start: c.StartTurn) -> Any:
        """The turn's agent, or the exception its factory raised."""
        assert self.cfg is not None
        factory = self.cfg.factory or ModelFactory()
        try:
            return factory.build(start.spec, start.input.session_id)
        except Exception as exc:
            return exc

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
                session_log().error("turn worker could not reach its session: %r", exc)

    def _keys(self) -> KeyStore:
        assert self.cfg is not None
        return KeyStore(os.path.join(os.path.dirname(self.cfg.db_path), "keys"))
