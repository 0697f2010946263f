"""`DecisionExecution`: the session actor's mixin that carries out the decider's decisions
through the session's `Executor`, lending it Thespian ports (`_ActorPorts`): replies and
Runner messages as sends, turns on a worker, publishing to subscriptions, snapshots and
the seal policy."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

from spine import AppendResult, ConflictError, Event, StorageError, open_log
from spine.seal import KeyStore

from ... import messages as m
from ..._runtime.logformat import set_context
from ...agents import ModelFactory
from ..rules import commands as c
from ..rules.decide import decide
from ..rules.replace import replace
from ..rules.state import fold
from . import effects
from .executor import Executor
from .incarnation import SessionIncarnation, session_log
from .snapshots import SNAPSHOT_EVERY
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

    def _executor(self, reply_to: Any) -> Executor:
        """The executor over this incarnation's log and state, answering ``reply_to``."""
        assert self.log is not None and self.state is not None
        return Executor(self.log, _ActorPorts(self, reply_to), self.state, holder=self)

    def _run(self, command: c.Command, reply_to: Any) -> None:
        """Decide ``command`` and carry the decision out."""
        self._executor(reply_to).run(command)

    def _apply(self, d: c.Decision, reply_to: Any) -> None:
        self._executor(reply_to).apply(d)

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

    def _absorb(self, res: AppendResult, events: tuple[Event, ...]) -> None:
        """Snapshot if due and publish newly stored events (the executor has folded them:
        the objects just appended, numbered from the append's first seq, as decoding the
        stored rows back would give the same state at several times the cost)."""
        assert self.state is not None and self.subs is not None
        st = self.state.stored
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
        if self.state is not None:
            self._executor(None).settle()

    # -- effects -------------------------------------------------------------------------

    def _intercept(self, effect: c.RunInterceptors, reply_to: Any) -> c.Command | None:
        assert self.cfg is not None and self.state is not None
        try:
            return effects.intercept(self.cfg.interceptors, effect, self.state)
        except Exception as exc:
            # Called once, answered once: the caller gets the interceptor's own error.
            session_log().warning("session %s: interceptor raised: %r", self.cfg.session_id, exc)
            text = f"interceptor failed: {type(exc).__name__}: {exc}"
            self._reply(reply_to, self._failure(effect.request_id, "InterceptorError", text))
            return None

    def _start_turn(self, effect: c.StartTurn) -> c.Command | None:
        assert self.cfg is not None
        built, self._built = self._built, None
        # Built already when an instant answer was tried (it said it must wait, or the
        # factory failed): not built, nor tried, twice.
        ahead = built is not None and built[0] is effect
        agent = built[1] if built is not None and ahead else self._build(effect)
        if isinstance(agent, Exception):  # a factory failure fails the turn, not the session
            error = f"{type(agent).__name__}: {agent}"
            return c.StartFailed(turn=effect.turn, error=error)
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
        return None

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


class _ActorPorts:
    """The executor's ports in the session actor: Thespian sends, the turn worker, the
    subscriptions, snapshots and the seal policy of the incarnation ``a``."""

    def __init__(self, a: DecisionExecution, reply_to: Any) -> None:
        self.a = a
        self.reply_to = reply_to

    def prepare(self, d: c.Decision, state: c.Session) -> c.Decision:
        return self.a._with_instant_turn(d)

    def timed(self, took: float) -> None:
        a = self.a
        a._commit_wait += (took - a._commit_wait) * _WAIT_WEIGHT
        if a.outbox is not None:
            a.outbox.appends.observe(took)

    def reply(self, reply: Any) -> None:
        self.a._reply(self.reply_to, reply)

    def appended(self, res: AppendResult, events: tuple[Event, ...], state: c.Session) -> None:
        self.a._absorb(res, events)

    def tell_runner(self, live: tuple[c.Live, ...]) -> None:
        self.a._tell_runner(live=[x.as_tuple() for x in live])

    def start_turn(self, effect: c.StartTurn) -> c.Command | None:
        return self.a._start_turn(effect)

    def cancel_turn(self, effect: c.CancelTurn) -> None:
        a = self.a
        if a.worker is not None and a.worker.turn == effect.turn:
            a.worker.cancel()
            a.worker = None

    def answer_worker(self, effect: c.AnswerWorker) -> None:
        w = self.a.worker
        if w is not None and w.turn == effect.turn:
            w.answer(
                effect.action,
                effect.tool_use_id,
                effect.verdict,
                effect.call,
                effect.fault,
                effect.steers,
            )

    def create_child(self, effect: c.CreateChild) -> None:
        a = self.a
        rid = f"spawn-{effect.child}-{time.monotonic_ns()}"
        a._spawning[rid] = (effect.turn, effect.tool_use_id, effect.child)
        create = m.CreateSession(
            request_id=rid, session_id=effect.child, metadata=dict(effect.metadata)
        )
        a.send(a.runner, create)

    def cancel_children(self, effect: c.CancelChildren) -> None:
        for child in effect.children:
            stop = m.Interrupt(
                request_id=f"cancel-{child}",
                session_id=child,
                key=f"cancel-{child}",
                reason="cancelled",
            )
            self.a.send(self.a.runner, stop)

    def end_subscriptions(self, effect: c.EndSubscriptions) -> None:
        assert self.a.subs is not None
        self.a.subs.end_all()

    def stop(self, reason: str) -> None:
        assert self.a.state is not None
        sid = self.a.state.stored.session_id
        if reason == "stale incarnation":
            session_log().error("session %s: stale incarnation, stopping", sid)
        else:
            session_log().exception("session %s: append failed, stopping", sid)
        self.a._stop_self(reason)

    def stop_self(self, effect: c.StopSelf) -> None:
        self.a._stop_self(effect.reason)

    def intercept(self, effect: c.RunInterceptors, state: c.Session) -> c.Command | None:
        return self.a._intercept(effect, self.reply_to)

    def seal(self, effect: c.ComputeSeal) -> c.Command:
        a = self.a
        assert a.log is not None and a.cfg is not None
        return effects.seal(a.log, a.cfg.session_id, a._keys().signing_key(), effect.request_id)

    def verify(self, effect: c.ComputeVerification) -> c.Command:
        a = self.a
        assert a.log is not None and a.cfg is not None
        ring = a._keys().keyring()
        return effects.verification(a.log, a.cfg.session_id, ring, effect.request_id)
