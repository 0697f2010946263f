"""The in-memory session: run the session's decider without processes.

Tests use it as `actors.testing.SessionKit`; a spare process's warm-up runs one goal run
through it (with ports that run the turn).

Given events, run a command, get the events it stored, its reply, its live items, its
effects and the new state; `SessionKit.restart` refolds from the stored events as a new
incarnation would after a crash. The decisions are carried out by the session's own
`Executor` over recording ports: interceptors run inline, seals and verifications run
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

from ... import messages as m
from ...agents.providers import default_servers
from ...interceptors import Ingress, Interceptor, SlashCommands
from ...model_servers import ModelServers
from ...policy import BusyPolicy
from ..rules import commands as c
from ..rules.state import SessionState, fold
from .executor import Executor, RecordingPorts

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

    #: The ports the kit's executor carries decisions out through.
    _ports_type: type[RecordingPorts] = RecordingPorts

    def __init__(
        self,
        events: Iterable[Event] = (),
        *,
        session_id: str = "s1",
        busy_policy: BusyPolicy = BusyPolicy.ENQUEUE,
        interceptors: Sequence[Interceptor] | None = None,
        prices: Mapping[str, Any] | None = None,
        model_servers: Iterable[str] | ModelServers = (),
    ) -> None:
        self.session_id = session_id
        #: The operator's price table the kit's incarnations are given.
        self.prices = prices
        #: The model servers the operator lets the kit's session name.
        self.model_servers = (
            model_servers
            if isinstance(model_servers, ModelServers)
            else default_servers().with_urls(model_servers)
        )
        self.log = MemoryLog()
        given = list(events)
        if given:
            self.log.append(session_id, [attrs.evolve(e, seq=0) for e in given])
        self.interceptors = list(interceptors) if interceptors is not None else [SlashCommands()]
        self.busy_policy = busy_policy
        self._key: SigningKey | None = None
        self._n = 0
        self._ports = self._ports_type(
            log=self.log, session_id=session_id, interceptors=self.interceptors, key=self._get_key
        )
        self._executor = Executor(self.log, self._ports, self._fold())

    @property
    def state(self) -> c.Session:
        """The decider's state now."""
        return self._executor.state

    @state.setter
    def state(self, value: c.Session) -> None:
        self._executor.state = value

    def _get_key(self) -> SigningKey:
        return self.key

    @property
    def key(self) -> SigningKey:
        """The kit's signing key, made on first use: generating one costs a process that
        has not used the crypto library yet about 2 MB (the spares' warm-up never seals)."""
        if self._key is None:
            self._key = SigningKey.generate()
        return self._key

    def _fold(self) -> c.Session:
        stored = fold(SessionState(session_id=self.session_id), self.events)
        return c.Session(
            stored=stored,
            busy_policy=self.busy_policy,
            prices=self.prices,
            model_servers=self.model_servers,
        )

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
        ports = self._ports
        ports.clear()
        # The kit's log and interceptors are public: a test may swap either.
        ports.interceptors = self.interceptors
        ports.log = self._executor.log = self.log
        self._executor.run(command)
        self._executor.settle()
        stored = tuple(r.event() for r in self.log.read(self.session_id, first, None))
        return Outcome(
            events=stored,
            reply=ports.last_reply,
            live=tuple(ports.live),
            effects=tuple(ports.effects),
            state=self.state,
        )

    # -- conveniences ----------------------------------------------------------------

    def _ingress(self, ingress: Ingress) -> Outcome:
        prior = self.log.find_key(self.session_id, ingress.key)
        records = () if prior is None else prior.records
        stored = tuple((r.seq, r.kind) for r in records)
        events = tuple(r.event() for r in records)
        return self.run(
            c.Receive(request_id=self._rid(), ingress=ingress, stored=stored, prior=events)
        )

    def send(
        self,
        text: str,
        *,
        key: str | None = None,
        mode: str = "",
        edits: int = 0,
        regenerates: int = 0,
    ) -> Outcome:
        k = key or self._rid()
        ing = Ingress(
            kind=Kind.USER_MESSAGE,
            key=k,
            text=text,
            mode=mode,
            edits=edits,
            regenerates=regenerates,
        )
        return self._ingress(ing)

    def switch_branch(self, turn: int, *, key: str | None = None) -> Outcome:
        k = key or self._rid()
        return self._ingress(Ingress(kind=Kind.BRANCH_SWITCHED, key=k, turn=turn))

    def interrupt(self, reason: str = "interrupted", *, key: str | None = None) -> Outcome:
        k = key or self._rid()
        return self._ingress(Ingress(kind=Kind.INTERRUPT, key=k, text=reason))

    def set_metadata(
        self,
        properties: Mapping[str, str | None],
        *,
        key: str | None = None,
        authority: str = "operator",
    ) -> Outcome:
        k = key or self._rid()
        ing = Ingress(kind=Kind.PROPERTIES, key=k, properties=dict(properties), authority=authority)
        return self._ingress(ing)

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
