"""`Executor`: carries out the session decider's decisions through ports.

One decision is carried out in one order: append its events with the expected seq and
its idempotency key (a key stored before answers as then and changes nothing), reply,
fold the appended events, publish them, tell the Runner its live items, then run its
effects from one table (`EFFECTS`). An effect that yields a command (the interceptor
chain, a seal, a verification, a turn whose agent could not be built) does not decide it
from inside the effect: the command is queued and decided once the current decision is
applied, in a loop, so decisions are merged and applied in this one place.

What differs between a shell and another is only its `Ports`: `RecordingPorts` keep what
happened in lists, over any log (the test kit and the spare's warm-up use them over a
`spine.MemoryLog`)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import attrs

from spine import AppendResult, ConflictError, Event, Kind, Log, StorageError, UnavailableError
from spine.seal import KeysLike, SigningKey

from ... import messages as m
from ...interceptors import Interceptor
from ..protocol import SPINE_UNAVAILABLE, SessionReady
from ..rules import commands as c
from ..rules.decide import decide
from ..rules.replace import replace
from ..rules.state import fold
from ..rules.views import ingress_seq
from . import effects

__all__ = ["EFFECTS", "Executor", "Ports", "RecordingPorts", "as_then"]

#: Kinds whose time the fold reads (a turn's cost counts in the periods of its end): they
#: are stamped before the append, so the fold of what was appended sees the stored time.
_STAMPED = frozenset({Kind.TURN_COMPLETED, Kind.TURN_CANCELLED})


def stamped(events: tuple[Event, ...]) -> tuple[Event, ...]:
    """``events`` stamped now where unset, when one of them is of a kind the fold reads the
    time of; else as they are (the spine stamps them as it stores them). Every event of
    the append gets the one time, as the spine's own stamp gives an append one time."""
    if not any(e.kind in _STAMPED and e.time is None for e in events):
        return events
    now = datetime.now(UTC)
    return tuple(attrs.evolve(e, time=now) if e.time is None else e for e in events)


#: How long an append waits for an unreachable spine (a database restarting, a network
#: blip), trying again with a growing pause, before the incarnation asks to be restarted
#: once the spine is back. A session holding its state through a short outage goes on as
#: if nothing happened: its running turn and its tools are not cut, so nothing is in doubt.
SPINE_HOLD = 10.0
SPINE_PAUSE = (0.05, 1.0)


class Ports(Protocol):
    """What a shell lends the executor: where replies, records and effects go."""

    def prepare(self, d: c.Decision, state: c.Session) -> c.Decision:
        """``d`` as it is to be appended (the actor may store an instant turn with it)."""

    def timed(self, took: float) -> None:
        """An append took ``took`` seconds."""

    def reply(self, reply: Any) -> None:
        """Answer the command's sender (None: nothing to answer)."""

    def appended(self, res: AppendResult, events: tuple[Event, ...], state: c.Session) -> None:
        """``events`` were stored as ``res`` and folded into ``state``: publish them."""

    def tell_runner(self, live: tuple[c.Live, ...]) -> None:
        """Hand the Runner the decision's live items (notices, text deltas)."""

    def start_turn(self, effect: c.StartTurn) -> c.Command | None:
        """Build the turn's agent and run it; the command to decide if it cannot start."""

    def cancel_turn(self, effect: c.CancelTurn) -> None: ...

    def answer_worker(self, effect: c.AnswerWorker) -> None: ...

    def create_child(self, effect: c.CreateChild) -> None: ...

    def cancel_children(self, effect: c.CancelChildren) -> None: ...

    def end_subscriptions(self, effect: c.EndSubscriptions) -> None: ...

    def stop(self, reason: str) -> None:
        """Ask the Runner to stop this incarnation (its append failed)."""

    def stop_self(self, effect: c.StopSelf) -> None:
        """The decider asks the Runner to stop this incarnation."""

    def intercept(self, effect: c.RunInterceptors, state: c.Session) -> c.Command | None:
        """Run the interceptor chain; the command it yields (None: answered already)."""

    def seal(self, effect: c.ComputeSeal) -> c.Command: ...

    def verify(self, effect: c.ComputeVerification) -> c.Command: ...


_Handler = Callable[[Ports, Any, c.Session], "c.Command | None"]


def _none(call: Callable[[Any], None]) -> Callable[[Any], c.Command | None]:
    def run(effect: Any) -> c.Command | None:
        call(effect)
        return None

    return run


#: Every effect the decider asks for, and the port that carries it out; a handler
#: returns the command to decide next, or None.
EFFECTS: dict[type[Any], _Handler] = {
    c.RunInterceptors: lambda p, e, s: p.intercept(e, s),
    c.StartTurn: lambda p, e, s: p.start_turn(e),
    c.CancelTurn: lambda p, e, s: _none(p.cancel_turn)(e),
    c.AnswerWorker: lambda p, e, s: _none(p.answer_worker)(e),
    c.CreateChild: lambda p, e, s: _none(p.create_child)(e),
    c.CancelChildren: lambda p, e, s: _none(p.cancel_children)(e),
    c.EndSubscriptions: lambda p, e, s: _none(p.end_subscriptions)(e),
    c.StopSelf: lambda p, e, s: _none(p.stop_self)(e),
    c.ComputeSeal: lambda p, e, s: p.seal(e),
    c.ComputeVerification: lambda p, e, s: p.verify(e),
}


def as_then(reply: Any, res: AppendResult) -> Any:
    """The ack of a redelivered key names what the first delivery stored."""
    if not isinstance(reply, m.Ack):
        return reply
    seq = ingress_seq([(r.seq, r.kind) for r in res.records]) or res.last_seq
    return attrs.evolve(reply, seq=seq, duplicate=True)


class Executor:
    """Runs commands through `decide` over one session's log and carries each out."""

    def __init__(self, log: Log, ports: Ports, state: c.Session, holder: Any = None) -> None:
        self.log = log
        self.ports = ports
        # The state lives on ``holder`` (its ``state`` attribute) when given: the actor's
        # other parts read and change the same state between and during decisions.
        self._holder: Any = holder if holder is not None else _Cell(state)
        if holder is None or holder.state is None:
            self._holder.state = state

    @property
    def state(self) -> c.Session:
        state: c.Session = self._holder.state
        return state

    @state.setter
    def state(self, value: c.Session) -> None:
        self._holder.state = value

    def run(self, command: c.Command) -> None:
        """Decide ``command`` and carry the decision (and what it leads to) out."""
        self.apply(decide(self.state, command))

    def apply(self, d: c.Decision) -> None:
        """Carry ``d`` out, then decide and carry out, in order, the commands its effects
        yielded (and theirs): a loop, never a decision from inside an effect."""
        queued: deque[c.Command] = deque(self._apply(d))
        while queued:
            queued.extend(self._apply(decide(self.state, queued.popleft())))

    def settle(self) -> None:
        """Start the next turn (or fail it at once) while one is due."""
        while not self.state.stopping:
            d = decide(self.state, c.Settle())
            if not d.events and not d.effects:
                return
            self.apply(d)

    def _apply(self, d: c.Decision) -> list[c.Command]:
        if d.events:
            d = self.ports.prepare(d, self.state)
            events = stamped(d.events)
            if events is not d.events:
                d = attrs.evolve(d, events=events)
        reply = d.reply
        if d.events:
            res = self._append(d.events, d.key)
            if res.duplicate:
                # Stored by an earlier delivery: answer as then, change nothing.
                self.ports.reply(as_then(reply, res))
                return []
            if isinstance(reply, m.SealReply | m.VerifyReply):
                reply = attrs.evolve(reply, seq=res.first_seq)
            if isinstance(reply, SessionReady):
                reply = attrs.evolve(reply, last_seq=res.last_seq)
            # The sender waits for this answer, and only for what is durable: it goes out
            # before the fold and the publishing.
            self.ports.reply(reply)
            reply = None
            st = fold(self.state.stored, d.events, res.first_seq)
            self.state = replace(self.state, stored=st)
            self.ports.appended(res, d.events, self.state)
        self.state = replace(d.state, stored=self.state.stored)
        if d.live:
            self.ports.tell_runner(d.live)
        self.ports.reply(reply)
        out: list[c.Command] = []
        for effect in d.effects:
            cmd = EFFECTS[type(effect)](self.ports, effect, self.state)
            if cmd is not None:
                out.append(cmd)
        return out

    def _append(self, events: tuple[Event, ...], key: str | None) -> AppendResult:
        started = time.perf_counter()
        try:
            res = self._append_held(events, key)
        except ConflictError:
            self.ports.stop("stale incarnation")
            raise
        except UnavailableError:
            self.ports.stop(SPINE_UNAVAILABLE)
            raise
        except StorageError:
            # What this incarnation holds may no longer match the log (a turn it thinks
            # running, say): a new one rebuilds from the log and closes what is open.
            self.ports.stop("storage error")
            raise
        self.ports.timed(time.perf_counter() - started)
        return res

    def _append_held(self, events: tuple[Event, ...], key: str | None) -> AppendResult:
        """Append, trying again while the spine is unreachable, for up to `SPINE_HOLD`.

        A try that raced the break may have committed: the next one then finds its key
        (answered as a duplicate) or the stream moved past the expected seq (a conflict,
        and a new incarnation rebuilds from the log); never a second copy."""
        st = self.state.stored
        pause, deadline = SPINE_PAUSE[0], time.monotonic() + SPINE_HOLD
        while True:
            try:
                return self.log.append(
                    st.session_id, events, expected_seq=st.last_seq, idempotency_key=key
                )
            except UnavailableError:
                if time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause)
            pause = min(SPINE_PAUSE[1], pause * 2)


@attrs.define
class _Cell:
    state: c.Session


@attrs.define
class RecordingPorts:
    """Ports that keep what happened: the last reply, live items, every effect in the
    order it ran, the records appended. Interceptors run inline (one that raises
    propagates), seals and verifications against ``log``; turns are not run (a
    subclass may run them)."""

    log: Log
    session_id: str
    interceptors: Sequence[Interceptor] = ()
    key: Callable[[], SigningKey] | None = None
    replies: list[Any] = attrs.field(factory=list)
    live: list[tuple[int, str, str, str]] = attrs.field(factory=list)
    effects: list[c.Effect] = attrs.field(factory=list)
    records: list[Event] = attrs.field(factory=list)
    stops: list[str] = attrs.field(factory=list)

    def clear(self) -> None:
        """Forget what was recorded (the kit does before each command)."""
        self.replies.clear()
        self.live.clear()
        self.effects.clear()
        self.records.clear()

    @property
    def last_reply(self) -> Any:
        """The last non-None reply (what the command's sender was last told)."""
        return self.replies[-1] if self.replies else None

    def _signing_key(self) -> SigningKey:
        if self.key is None:
            raise RuntimeError("these ports have no signing key")
        return self.key()

    def prepare(self, d: c.Decision, state: c.Session) -> c.Decision:
        return d

    def timed(self, took: float) -> None:
        pass

    def reply(self, reply: Any) -> None:
        if reply is not None:
            self.replies.append(reply)

    def appended(self, res: AppendResult, events: tuple[Event, ...], state: c.Session) -> None:
        self.records.extend(r.event() for r in res.records)

    def tell_runner(self, live: tuple[c.Live, ...]) -> None:
        self.live.extend(x.as_tuple() for x in live)

    def start_turn(self, effect: c.StartTurn) -> c.Command | None:
        self.effects.append(effect)
        return None

    def cancel_turn(self, effect: c.CancelTurn) -> None:
        self.effects.append(effect)

    def answer_worker(self, effect: c.AnswerWorker) -> None:
        self.effects.append(effect)

    def create_child(self, effect: c.CreateChild) -> None:
        self.effects.append(effect)

    def cancel_children(self, effect: c.CancelChildren) -> None:
        self.effects.append(effect)

    def end_subscriptions(self, effect: c.EndSubscriptions) -> None:
        self.effects.append(effect)

    def stop(self, reason: str) -> None:
        self.stops.append(reason)

    def stop_self(self, effect: c.StopSelf) -> None:
        self.effects.append(effect)
        self.stops.append(effect.reason)

    def intercept(self, effect: c.RunInterceptors, state: c.Session) -> c.Command | None:
        self.effects.append(effect)
        return effects.intercept(self.interceptors, effect, state)

    def seal(self, effect: c.ComputeSeal) -> c.Command:
        self.effects.append(effect)
        return effects.seal(self.log, self.session_id, self._signing_key(), effect.request_id)

    def verify(self, effect: c.ComputeVerification) -> c.Command:
        self.effects.append(effect)
        keys: KeysLike = self._signing_key()
        return effects.verification(self.log, self.session_id, keys, effect.request_id)
