"""The session's `Executor` as a live incarnation runs it: `IncarnationPorts` lend it
Thespian sends (replies, the Runner), the turn worker, the subscriptions, snapshots and the
seal policy of one `Incarnation`, and store an instant turn in the append that starts it
when the log is contended."""

from __future__ import annotations

import logging
import os
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import attrs

from spine import AppendResult, Event, Log, open_log
from spine.seal import KeyStore

from ... import messages as m
from ..._runtime.logformat import set_context
from ...agents import ModelFactory
from ...spec import TurnInput
from ..protocol import SessionConfig
from ..rules import commands as c
from ..rules.decide import decide
from ..rules.replace import replace
from ..rules.replaying import recorded_approvals, recorded_calls
from ..rules.state import fold
from . import effects
from .executor import Executor
from .worker import TurnWorker

if TYPE_CHECKING:
    from .incarnation import Incarnation

#: Seconds an append takes on average (a moving mean) past which an instant turn is stored
#: in the append of the message that starts it (`IncarnationPorts.prepare`): alone on the
#: log an append takes 0.2 ms; 50 busy sessions wait for the write lock.
GROUP_AFTER = 0.001
#: The weight of the latest append in that mean.
_WAIT_WEIGHT = 0.2


def session_log() -> logging.Logger:
    # Looked up at each use: Thespian re-initializes logging in actor processes after
    # import, so a logger captured at import time may no longer be wired to anything.
    return logging.getLogger("vertebra.session")


def keys(cfg: SessionConfig) -> KeyStore:
    """The host's key store (beside the spine's file)."""
    return KeyStore(os.path.join(os.path.dirname(cfg.db_path), "keys"))


def with_recorded(log: Log, turn: TurnInput) -> TurnInput:
    """A replay's turn with the calls the replayed turn stored (`TurnInput.recorded`) and
    the human decisions its calls got (`TurnInput.approvals`), read from the replayed
    session's stream; one that cannot be read serves nothing, so every call is refused
    rather than run."""
    if turn.replay is None or turn.recorded is not None:
        return turn
    source, seq = turn.replay
    try:
        events = log.read_events(source)
        recorded, approvals = recorded_calls(events, seq), recorded_approvals(events, seq)
    except Exception:
        session_log().exception("replay of %s: its turn %d cannot be read", source, seq)
        recorded, approvals = (), ()
    return attrs.evolve(turn, recorded=recorded, approvals=approvals)


def executor(inc: Incarnation, reply_to: Any) -> Executor:
    """The executor over ``inc``'s log and state, answering ``reply_to``."""
    return Executor(inc.log, IncarnationPorts(inc, reply_to), inc.state, holder=inc)


class IncarnationPorts:
    """The executor's ports for one command of the incarnation ``inc``."""

    def __init__(self, inc: Incarnation, reply_to: Any) -> None:
        self.inc = inc
        self.reply_to = reply_to
        #: The agent built for a turn whose instant answer was tried: (its `StartTurn`,
        #: the agent or its factory's exception), for `start_turn` not to build it twice.
        self.built: tuple[c.StartTurn, Any] | None = None

    def prepare(self, d: c.Decision, state: c.Session) -> c.Decision:
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
        either; it is kept for `start_turn`, which runs it on a thread."""
        start = next((e for e in d.effects if isinstance(e, c.StartTurn)), None)
        if start is None or self.inc.commit_wait < GROUP_AFTER:
            return d
        agent = self._build(start)
        self.built = (start, agent)
        if isinstance(agent, Exception):
            return d
        ended: list[Any] = []
        turn_input = with_recorded(self.inc.log, start.input)
        if not TurnWorker(ended.append, start.turn, 0.0).run_instant(agent, turn_input):
            return d
        self.built = None
        st = state.stored
        began = replace(d.state, stored=fold(st, d.events, st.last_seq + 1))
        e = decide(began, ended[-1])
        return replace(
            d,
            state=replace(e.state, stored=st),
            events=(*d.events, *e.events),
            live=(*d.live, *e.live),
            effects=(*(x for x in d.effects if x is not start), *e.effects),
        )

    def timed(self, took: float) -> None:
        inc = self.inc
        inc.commit_wait += (took - inc.commit_wait) * _WAIT_WEIGHT
        inc.outbox.appends.observe(took)

    def reply(self, reply: Any) -> None:
        self.inc.reply(self.reply_to, reply)

    def appended(self, res: AppendResult, events: tuple[Event, ...], state: c.Session) -> None:
        """Snapshot if due and publish newly stored events (the executor has folded them:
        the objects just appended, numbered from the append's first seq, as decoding the
        stored rows back would give the same state at several times the cost)."""
        inc = self.inc
        st = state.stored
        if res.records:
            set_context(seq=res.records[-1].seq, kind=res.records[-1].kind)
        inc.snap_size += sum(len(r.payload) for r in res.records)
        if inc.cfg.snapshots.due(st.last_seq - inc.snap_seq, inc.snap_size):
            inc.snapshot(st)
        inc.subs.publish(res.records)
        inc.tell_runner(records=[(r.seq, r.kind, r.payload) for r in res.records])
        due = inc.sealer.appended(events, res.first_seq, st.last_seq, st.metadata, res.records)
        if due is not None:
            inc.actor.wakeupAfter(timedelta(seconds=due[0]), due[1])

    def tell_runner(self, live: tuple[c.Live, ...]) -> None:
        self.inc.tell_runner(live=[x.as_tuple() for x in live])

    def start_turn(self, effect: c.StartTurn) -> c.Command | None:
        inc = self.inc
        built, self.built = self.built, None
        # Built already when an instant answer was tried (it said it must wait, or the
        # factory failed): not built, nor tried, twice.
        ahead = built is not None and built[0] is effect
        agent = built[1] if built is not None and ahead else self._build(effect)
        if isinstance(agent, Exception):  # a factory failure fails the turn, not the session
            return c.StartFailed(turn=effect.turn, error=f"{type(agent).__name__}: {agent}")
        cfg = inc.cfg
        worker = TurnWorker(
            inc.hand_back,
            effect.turn,
            cfg.flush_interval,
            # Children are followed on a log of their own: reads only, so it never takes
            # the write lock that opening a log for writing takes to check the schema.
            open_log=lambda: open_log(cfg.spine or cfg.db_path, read_only=True),
        )
        inc.workers = {effect.turn: worker}
        worker.start(agent, with_recorded(inc.log, effect.input), instant=not ahead)
        return None

    def _build(self, start: c.StartTurn) -> Any:
        """The turn's agent, or the exception its factory raised."""
        factory = self.inc.cfg.factory or ModelFactory()
        try:
            return factory.build(start.spec, start.input.session_id)
        except Exception as exc:
            return exc

    def cancel_turn(self, effect: c.CancelTurn) -> None:
        worker = self.inc.workers.pop(effect.turn, None)
        if worker is not None:
            worker.cancel()

    def answer_worker(self, effect: c.AnswerWorker) -> None:
        w = self.inc.workers.get(effect.turn)
        if w is not None:
            w.answer(
                effect.action,
                effect.tool_use_id,
                effect.verdict,
                effect.call,
                effect.fault,
                key=effect.key,
                steers=effect.steers,
                answer=effect.answer,
                given=(effect.result, effect.is_error) if effect.result else None,
            )

    def create_child(self, effect: c.CreateChild) -> None:
        inc = self.inc
        rid = f"spawn-{effect.child}-{time.monotonic_ns()}"
        inc.spawning[rid] = (effect.turn, effect.tool_use_id, effect.child)
        create = m.CreateSession(
            request_id=rid, session_id=effect.child, metadata=dict(effect.metadata)
        )
        inc.actor.send(inc.runner, create)

    def cancel_children(self, effect: c.CancelChildren) -> None:
        for stop in cancellations(effect):
            self.inc.actor.send(self.inc.runner, stop)

    def end_subscriptions(self, effect: c.EndSubscriptions) -> None:
        self.inc.subs.end_all()

    def stop(self, reason: str) -> None:
        sid = self.inc.session_id
        if reason == "stale incarnation":
            session_log().error("session %s: stale incarnation, stopping", sid)
        else:
            session_log().exception("session %s: append failed, stopping", sid)
        self.inc.stop(reason)

    def stop_self(self, effect: c.StopSelf) -> None:
        self.inc.stop(effect.reason)

    def intercept(self, effect: c.RunInterceptors, state: c.Session) -> c.Command | None:
        inc = self.inc
        try:
            return effects.intercept(inc.cfg.interceptors, effect, state)
        except Exception as exc:
            # Called once, answered once: the caller gets the interceptor's own error.
            session_log().warning("session %s: interceptor raised: %r", inc.session_id, exc)
            text = f"interceptor failed: {type(exc).__name__}: {exc}"
            self.reply(inc.failure(effect.request_id, "InterceptorError", text))
            return None

    def seal(self, effect: c.ComputeSeal) -> c.Command:
        inc = self.inc
        key = keys(inc.cfg).signing_key()
        return effects.seal(inc.log, inc.session_id, key, effect.request_id)

    def verify(self, effect: c.ComputeVerification) -> c.Command:
        inc = self.inc
        ring = keys(inc.cfg).keyring()
        return effects.verification(inc.log, inc.session_id, ring, effect.request_id)


def cancellations(effect: c.CancelChildren) -> list[m.Interrupt]:
    """The interrupts that cancel a parent's children, for the Runner to route."""
    return [
        m.Interrupt(
            request_id=f"cancel-{child}",
            session_id=child,
            key=f"cancel-{child}",
            reason="cancelled",
        )
        for child in effect.children
    ]
