"""The session test kit: run the session's decider without processes.

Given events, run a command, get the events it stored, its reply, its live items, its
effects and the new state; `SessionKit.restart` refolds from the stored events as a new
incarnation would after a crash. Interceptors run inline, seals and verifications run
against the kit's in-memory log; turns are not run: a `StartTurn` effect is recorded and the
test plays the worker's part with `SessionKit.progress` and `SessionKit.finish`::

    kit = SessionKit()
    out = kit.send("hello")
    assert out.kinds == ["user.message", "turn.started", "action.admitted"]
    out = kit.finish(text="hi there")
    assert out.kinds == ["assistant.message", "turn.completed", "session.lifecycle"]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from spine import Event, Kind, MemoryLog, Usage
from spine.seal import SigningKey

from . import messages as m
from .interceptors import Ingress, Interceptor, SlashCommands
from .policy import BusyPolicy
from .session import commands as c
from .session import effects
from .session.decide import decide, ingress_seq
from .session.state import SessionState, fold

__all__ = ["Outcome", "SessionKit"]


@attrs.frozen(kw_only=True)
class Outcome:
    """What one command did: stored events (with seqs), the reply, live items (notices
    and text deltas as ``(after_seq, kind, severity, text)``), effects and the state after."""

    events: tuple[Event, ...]
    reply: Any
    live: tuple[tuple[int, str, str, str], ...]
    effects: tuple[c.Effect, ...]
    state: c.Session

    @property
    def kinds(self) -> list[str]:
        return [str(e.kind) for e in self.events]

    @property
    def error(self) -> str:
        """The reply's error class name, "" when the reply is not a failure."""
        return self.reply.error if isinstance(self.reply, m.RequestFailed) else ""


class SessionKit:
    """One session's decider over an in-memory log, driven command by command."""

    def __init__(
        self,
        events: Iterable[Event] = (),
        *,
        session_id: str = "s1",
        busy_policy: BusyPolicy = BusyPolicy.ENQUEUE,
        interceptors: Sequence[Interceptor] | None = None,
    ) -> None:
        self.session_id = session_id
        self.log = MemoryLog()
        given = list(events)
        if given:
            self.log.append(session_id, [attrs.evolve(e, seq=0) for e in given])
        self.interceptors = list(interceptors) if interceptors is not None else [SlashCommands()]
        self.busy_policy = busy_policy
        self._key: SigningKey | None = None
        self._n = 0
        self.state = self._fold()

    @property
    def key(self) -> SigningKey:
        """The kit's signing key, made on first use: generating one costs a process that
        has not used the crypto library yet about 2 MB (the spares' warm-up never seals)."""
        if self._key is None:
            self._key = SigningKey.generate()
        return self._key

    def _fold(self) -> c.Session:
        stored = fold(SessionState(session_id=self.session_id), self.events)
        return c.Session(stored=stored, busy_policy=self.busy_policy)

    @property
    def events(self) -> list[Event]:
        """Every stored event, in order."""
        return [r.event() for r in self.log.read(self.session_id, 0, None)]

    def _rid(self) -> str:
        self._n += 1
        return f"r{self._n}"

    # -- running ---------------------------------------------------------------------

    def run(self, command: c.Command) -> Outcome:
        """Decide ``command``, store its events, carry out what can be carried out here,
        then start the next turn if one is due (as the shell does)."""
        first = self.log.last_seq(self.session_id)
        acc = _Acc()
        self._apply(decide(self.state, command), acc)
        while not self.state.stopping:
            d = decide(self.state, c.Settle())
            if not d.events and not d.effects:
                break
            self._apply(d, acc)
        stored = tuple(r.event() for r in self.log.read(self.session_id, first, None))
        return Outcome(
            events=stored,
            reply=acc.reply,
            live=tuple(acc.live),
            effects=tuple(acc.effects),
            state=self.state,
        )

    def _apply(self, d: c.Decision, acc: _Acc) -> None:
        reply = d.reply
        if d.events:
            res = self.log.append(
                self.session_id,
                list(d.events),
                expected_seq=self.state.stored.last_seq,
                idempotency_key=d.key,
            )
            if res.duplicate:
                if isinstance(reply, m.Ack):
                    seq = ingress_seq([(r.seq, r.kind) for r in res.records]) or res.last_seq
                    reply = attrs.evolve(reply, seq=seq, duplicate=True)
                acc.reply = reply if reply is not None else acc.reply
                return
            stored = fold(self.state.stored, [r.event() for r in res.records])
            self.state = attrs.evolve(d.state, stored=stored)
        else:
            self.state = attrs.evolve(d.state, stored=self.state.stored)
        acc.live.extend(x.as_tuple() for x in d.live)
        if reply is not None:
            acc.reply = reply
        for effect in d.effects:
            acc.effects.append(effect)
            self._effect(effect, acc)

    def _effect(self, effect: c.Effect, acc: _Acc) -> None:
        if isinstance(effect, c.RunInterceptors):
            cmd: c.Command = effects.intercept(self.interceptors, effect, self.state)
        elif isinstance(effect, c.ComputeSeal):
            cmd = effects.seal(self.log, self.session_id, self.key, effect.request_id)
        elif isinstance(effect, c.ComputeVerification):
            cmd = effects.verification(self.log, self.session_id, self.key, effect.request_id)
        else:
            return
        self._apply(decide(self.state, cmd), acc)

    # -- conveniences ----------------------------------------------------------------

    def _ingress(self, ingress: Ingress) -> Outcome:
        prior = self.log.find_key(self.session_id, ingress.key)
        records = () if prior is None else prior.records
        stored = tuple((r.seq, r.kind) for r in records)
        events = tuple(r.event() for r in records)
        return self.run(
            c.Receive(request_id=self._rid(), ingress=ingress, stored=stored, prior=events)
        )

    def send(self, text: str, *, key: str | None = None) -> Outcome:
        k = key or self._rid()
        return self._ingress(Ingress(kind=Kind.USER_MESSAGE, key=k, text=text))

    def interrupt(self, reason: str = "interrupted", *, key: str | None = None) -> Outcome:
        k = key or self._rid()
        return self._ingress(Ingress(kind=Kind.INTERRUPT, key=k, text=reason))

    def set_metadata(
        self, properties: Mapping[str, str | None], *, key: str | None = None
    ) -> Outcome:
        k = key or self._rid()
        return self._ingress(Ingress(kind=Kind.PROPERTIES, key=k, properties=dict(properties)))

    def switch(self, target: str, *, key: str | None = None) -> Outcome:
        k = key or self._rid()
        return self._ingress(Ingress(kind=Kind.SESSION_SWITCH, key=k, target=target))

    def close(self) -> Outcome:
        return self.run(c.Close(request_id=self._rid()))

    def seal(self) -> Outcome:
        return self.run(c.SealStream(request_id=self._rid()))

    def verify(self) -> Outcome:
        return self.run(c.VerifyStream(request_id=self._rid()))

    def _turn(self) -> int:
        run = self.state.running
        if run is None:
            raise AssertionError("no turn is running")
        return run.turn

    def progress(
        self, text: str = "", events: Sequence[Event] = (), usage: Usage | None = None
    ) -> Outcome:
        """The running turn's worker streams ``text`` and hands over tool ``events``."""
        return self.run(c.Progress(turn=self._turn(), text=text, events=tuple(events), usage=usage))

    def finish(
        self,
        stop_reason: str = "end_turn",
        text: str = "",
        error: str = "",
        usage: Usage | None = None,
    ) -> Outcome:
        """The running turn's worker ends."""
        cmd = c.Finished(
            turn=self._turn(), stop_reason=stop_reason, text=text, error=error, usage=usage
        )
        return self.run(cmd)

    def start_failed(self, error: str = "no model") -> Outcome:
        """The factory could not build the running turn's agent."""
        return self.run(c.StartFailed(turn=self._turn(), error=error))

    def restart(
        self, *, create: bool = False, metadata: Mapping[str, str] | None = None
    ) -> Outcome:
        """A new incarnation: refold from the stored events (what the crashed one held in
        memory is gone) and open, closing what the crash left open."""
        self.state = self._fold()
        return self.run(c.Open(create=create, metadata=dict(metadata or {})))

    def create(self, metadata: Mapping[str, str] | None = None) -> Outcome:
        """Open this session as a new one (``create``)."""
        return self.restart(create=True, metadata=metadata)


@attrs.define
class _Acc:
    reply: Any = None
    live: list[tuple[int, str, str, str]] = attrs.field(factory=list)
    effects: list[c.Effect] = attrs.field(factory=list)
