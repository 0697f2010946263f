"""`RunnerEffects`: the Runner carrying the registry's actions out as Thespian effects.

``createActor`` (spawns, spare session processes), ``send``, ``wakeupAfter``, and the few
appends the Runner makes itself as a stream's writer: a failure it records, a failed
session it verifies, sessions without a process that close-all closes.
"""

from __future__ import annotations

import logging
import os
import time
from datetime import timedelta
from typing import Any

import orjson
from thespian.actors import ActorExitRequest

from spine import ConflictError, Event, Kind, Log, Phase, SpineError
from spine.seal import KeyStore, verify_stream

from ... import messages as m
from ..._runtime.histogram import Histogram
from ..._runtime.logformat import child_context
from ...messages import RunnerConfig
from ...placement import HOST
from ...session import protocol as sp
from ...session.rules.commands import CloseStored, Session
from ...session.rules.decide import decide
from ...session.rules.state import SessionState, fold, recovery_events
from ...session.shell.actor import SessionActor
from ...session.shell.subscriptions import Subscriptions
from .. import spine_path, spine_spec
from ..protocol import RestartDue, SparesDue
from ..rules import actions as a
from ..rules.cluster import HostTable
from ..rules.registry import Registry
from .publishing import RunnerPublishing


def _log() -> logging.Logger:
    # Looked up at each use: Thespian re-initializes logging in actor processes after
    # import, so a logger captured at import time may no longer be wired to anything.
    return logging.getLogger("vertebra.runner")


#: Seconds after a spare session process is used before the Runner starts another.
SPARE_REFILL_AFTER = 0.2


#: Attempts at closing a stream without a process before giving up (a write raced it).
_CLOSE_ATTEMPTS = 3


class RunnerEffects(RunnerPublishing):
    """The Runner's state (config, log, registry, member hosts, spare processes) and the
    carrying out of the registry's actions."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cfg: RunnerConfig | None = None
        self.spine: Log | None = None
        self.registry: Registry | None = None
        #: Spine append latencies of every session process (merged from their reports)
        #: and of the Runner's own appends.
        self.appends = Histogram()
        self.exiting = False
        #: Member hosts of the convention this Runner leads (None on a single host).
        self.hosts: HostTable | None = None
        #: Session processes started ahead of need (`RunnerConfig.spare_sessions`).
        self._spares: list[Any] = []
        #: Those of `_spares` that have answered `Standby` (opened and warmed up).
        self._standing: list[Any] = []
        self._refill_due = False
        self._no_spares = False

    def _do(self, actions: list[a.Action]) -> None:
        for action in actions:
            match action:
                case a.Forward(address=address, routed=routed) if address is not None:
                    self.send(address, routed)
                case a.Reply(to=to, message=message):
                    self.send(to, message)
                case a.Fail():
                    self.send(action.to, _failed(action))
                case a.Deliver(session_id=sid, records=records, live=live):
                    self.sinks.deliver(sid, records, live)
                case a.WakeProjection():
                    self._wake_projection()
                case a.Spawn():
                    self._spawn(action)
                case a.Stop(address=address):
                    self.send(address, ActorExitRequest())
                case a.Schedule(delay=delay, payload=payload):
                    if isinstance(payload, RestartDue):
                        sid = payload.session_id
                        _log().warning("session %s died; restarting in %.3fs", sid, delay)
                    self.wakeupAfter(timedelta(seconds=delay), payload)
                case a.RecordPoison(address=address, key=key, detail=detail):
                    self.send(address, sp.RecordPoison(key=key, detail=detail))
                case a.RecordFailure():
                    self._record_failure(action)
                case a.CloseStored(session_id=sid):
                    self._do(self._close_stored(sid))
                case a.VerifyStored():
                    self._verify_stored(action)
                case a.ReplayStored():
                    self._replay_stored(action)
                case _:
                    _log().error("runner cannot carry out %r", action)

    def _refill(self) -> None:
        """Start spare session processes up to `RunnerConfig.spare_sessions`: starting a
        process is most of what creating a session costs (a goal's children wait on it)."""
        if self.cfg is None or self.exiting or self._no_spares:
            return
        while len(self._spares) < self.cfg.spare_sessions:
            address = self.createActor(SessionActor)
            spine = spine_spec(self.cfg.data_dir, self.cfg.spine).url
            self.send(address, sp.Standby(db_path=spine_path(self.cfg.data_dir), spine=spine))
            self._spares.append(address)

    def _spawn(self, action: a.Spawn) -> None:
        assert self.cfg is not None and self.registry is not None
        # The new process's records name its session from Thespian's first one on.
        entry = self.registry.entries.get(action.session_id)
        child_context(
            session=action.session_id,
            incarnation=action.incarnation,
            seq=entry.last_seq if entry is not None else 0,
        )
        member = self.hosts.place(action.session_id) if self.hosts is not None else None
        spare = False
        if member is None:
            spare = bool(self._spares)
            if spare:
                # One that is ready if there is one: another may still be starting.
                address = self._standing.pop(0) if self._standing else self._spares[0]
                self._spares.remove(address)
            else:
                address = self.createActor(SessionActor)
            data_dir = self.cfg.data_dir
        else:
            # Thespian's capability-based placement creates it on that member's system.
            address = self.createActor(SessionActor, targetActorRequirements={HOST: member.name})
            data_dir = member.data_dir or self.cfg.data_dir
        self.registry.bind(action.session_id, action.incarnation, address)
        config = sp.SessionConfig(
            session_id=action.session_id,
            db_path=spine_path(data_dir),
            spine=spine_spec(self.cfg.data_dir, self.cfg.spine).url,
            incarnation=action.incarnation,
            interceptors=self.cfg.interceptors,
            factory=self.cfg.factory,
            busy_policy=self.cfg.busy_policy,
            create=action.create,
            metadata=action.metadata,
            auto_seal=self.cfg.auto_seal,
            prices=self.cfg.prices,
        )
        self.send(address, config)
        if spare and not self._refill_due:
            # Later, not now: starting a process now would compete with the session just
            # handed out (and with its siblings of the same fan-out) for the CPU.
            self._refill_due = True
            self.wakeupAfter(timedelta(seconds=SPARE_REFILL_AFTER), SparesDue())

    def _record_failure(self, action: a.RecordFailure) -> None:
        """No process writes the stream of a failed session: the Runner records it."""
        sid = action.session_id
        _log().error("session %s: %s; marked failed", sid, action.reason)
        if self.spine is None:
            return
        ev = Event(kind=Kind.LIFECYCLE, phase=Phase.FAILED, error=action.reason)
        try:
            # The crash that used up the budget cut a turn off: close it, or it stays
            # open forever (no process will ever write this stream again).
            try:
                state = fold(SessionState(session_id=sid), self.spine.read_events(sid, 0))
                events, last = [*recovery_events(state, "failed"), ev], state.last_seq
            except SpineError:
                # The stream does not decode: no fold, just the failure (once).
                last = self.spine.last_seq(sid)
                tail = self.spine.read(sid, last - 1, 1) if last else []
                if tail and tail[0].kind == Kind.LIFECYCLE and _says_failed(tail[0].payload):
                    return
                events = [ev]
            res = self._append(sid, events, expected_seq=last)
        except SpineError as exc:
            _log().error("could not record failure of %s: %s", sid, exc)
            return
        self._published(sid, res.records)

    def _verify_stored(self, action: a.VerifyStored) -> None:
        """Verify a failed session from its stored rows, without decoding them, and record
        the outcome: no process loads its stream, so the Runner is the writer."""
        assert self.cfg is not None
        sid = action.session_id
        if self.spine is None:
            return
        try:
            ring = KeyStore(os.path.join(self.cfg.data_dir, "keys")).keyring()
            report = verify_stream(self.spine, sid, ring)
        except SpineError as exc:
            self.send(
                action.reply_to,
                m.RequestFailed(
                    request_id=action.request_id,
                    error="ActorsError",
                    message=f"could not verify {sid}: {exc}",
                    session_id=sid,
                ),
            )
            return
        if report.verified_seq:
            self._published(sid, self.spine.read(sid, report.verified_seq - 1, 1))
        reply = m.VerifyReply(
            request_id=action.request_id,
            session_id=sid,
            ok=report.ok,
            summary=report.summary(),
            seq=report.verified_seq,
        )
        self.send(action.reply_to, reply)

    def _replay_stored(self, action: a.ReplayStored) -> None:
        """Answer a subscription to a failed session from its stored rows, read raw (a
        stream that does not decode is replayed all the same), ending with a closed batch:
        nothing will be appended until an operator revives it."""
        sid = action.session_id
        if self.spine is None:
            return
        try:
            last = self.spine.last_seq(sid)
            Subscriptions(sid, self.spine, self.send).add(
                action.request, action.reply_to, last, closed=True
            )
        except SpineError as exc:
            text = f"could not replay {sid}: {exc}"
            self.send(
                action.reply_to,
                m.RequestFailed(
                    request_id=action.request.request_id,
                    error="ActorsError",
                    message=text,
                    session_id=sid,
                ),
            )

    def _close_stored(self, sid: str) -> list[a.Action]:
        """Close a stream that has no process: close an open turn, append ``closed``.

        The append expects the seq just folded, so a writer that raced it (an orphaned
        incarnation) makes it fold and try again instead of interleaving.
        """
        assert self.spine is not None and self.registry is not None
        for _ in range(_CLOSE_ATTEMPTS):
            state = fold(SessionState(session_id=sid), self.spine.read_events(sid, 0))
            if state.closed or state.failed:
                terminal = "closed" if state.closed else "failed"
                return self.registry.stored_terminal(sid, terminal, state.last_seq)
            # The session's own decider: a goal run in flight stalls before ``closed``,
            # so `wait` answers and a parent hears of its child.
            events = list(decide(Session(stored=state), CloseStored()).events)
            try:
                res = self._append(sid, events, expected_seq=state.last_seq)
            except ConflictError:
                continue
            self._published(sid, res.records)
            return self.registry.stored_terminal(sid, "closed", res.last_seq)
        _log().error("session %s: could not close it in the log; its stream kept moving", sid)
        return []

    def _append(self, sid: str, events: list[Event], expected_seq: int) -> Any:
        """Append to ``sid`` as its writer, timing it with the sessions' appends."""
        assert self.spine is not None
        started = time.perf_counter()
        res = self.spine.append(sid, events, expected_seq=expected_seq)
        self.appends.observe(time.perf_counter() - started)
        return res

    def _published(self, sid: str, records: Any) -> None:
        """Records the Runner appended itself reach sinks and the projection like any."""
        rows = tuple((r.seq, r.kind, r.payload) for r in records)
        self._do([a.WakeProjection(), a.Deliver(session_id=sid, records=rows)])


def _says_failed(payload: bytes) -> bool:
    """Whether a stored lifecycle row records a failure (read without decoding the event)."""
    try:
        d = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return False
    return isinstance(d, dict) and d.get("phase") == Phase.FAILED


def _failed(action: a.Fail) -> m.RequestFailed:
    return m.RequestFailed(
        request_id=action.request_id,
        error=action.error,
        message=action.message,
        session_id=action.session_id,
    )
