"""`SessionActor`: one live session, the only writer of its stream.

The mailbox serializes ingress. A turn runs on a worker thread inside the session's process
and hands its output back by sending to the actor's own address, so only the actor's
handlers touch state and an interrupt is handled while the turn is still running.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from datetime import timedelta
from typing import Any

import attrs
from thespian.actors import ActorExitRequest, ActorTypeDispatcher, WakeupMessage

from spine import (
    AppendResult,
    ConflictError,
    Event,
    Kind,
    Phase,
    Severity,
    SpineError,
    SqliteLog,
    Usage,
    validate_session_id,
)
from spine.seal import KeyStore, NothingToSealError, seal_stream, verify_stream

from .. import messages as m
from ..agents import AgentSpec, ScriptedFactory, TurnInput
from ..interceptors import Ingress, InterceptResult, SessionView, run_chain
from ..messages import Ping, Pong
from ..system import configure_actor_logging
from .protocol import (
    Appended,
    RecordPoison,
    Routed,
    SessionConfig,
    SessionReady,
    SessionStopping,
    TurnFinished,
    TurnProgress,
)
from .snapshots import SNAPSHOT_EVERY, SnapshotStore
from .state import POISONED, SessionState, evolve, fold, metadata_diff, recovery_events


def _log() -> logging.Logger:
    # Looked up at each use: Thespian re-initializes logging in actor processes after
    # import, so a logger captured at import time may no longer be wired to anything.
    return logging.getLogger("vertebra.session")


ASSISTANT_DELTA = "assistant.delta"
BUSY_POLICIES = ("enqueue", "reject", "interrupt")
# Requests a closed session still answers.
_READS = (m.Subscribe, m.Unsubscribe, m.GetSession, Ping)
#: Metadata key that overrides the Runner's mid-turn policy for one session.
BUSY_POLICY_KEY = "session.busy_policy"
_ORPHAN_CHECK = 0.5
#: Seconds a session gathers news for the Runner before sending it in one message.
NOTIFY_INTERVAL = 0.005
NOTIFY_MAX_RECORDS = 500


@attrs.define
class _Sub:
    sub_id: str
    address: Any
    cursor: int
    kinds: tuple[str, ...]


@attrs.define
class _Run:
    run_id: str
    turn: int
    cancel: threading.Event
    text: list[str] = attrs.field(factory=list)
    usage: Usage | None = None


class _Output:
    """The worker thread's side of a turn: batches text so that a turn costs a few messages,
    not one per token."""

    def __init__(self, actor: SessionActor, run: _Run, interval: float) -> None:
        self._actor = actor
        self._run_id = run.run_id
        self.cancelled = run.cancel
        self._interval = interval
        self._buf: list[str] = []
        self._last = time.monotonic()
        self._usage: Usage | None = None

    def _send(self, msg: Any) -> None:
        self._actor.send(self._actor.myAddress, msg)

    def flush(self, events: tuple[Event, ...] = ()) -> None:
        if self._buf or events:
            text = "".join(self._buf)
            self._buf.clear()
            self._send(
                TurnProgress(run_id=self._run_id, text=text, events=events, usage=self._usage)
            )
        self._last = time.monotonic()

    def text(self, delta: str) -> None:
        self._buf.append(delta)
        if time.monotonic() - self._last >= self._interval:
            self.flush()

    def tool_call(self, tool: str, tool_use_id: str, input_json: str) -> None:
        self.flush(
            (Event(kind=Kind.TOOL_CALL, tool=tool, tool_use_id=tool_use_id, input=input_json),)
        )

    def tool_result(self, tool: str, tool_use_id: str, result: str, is_error: bool) -> None:
        ev = Event(
            kind=Kind.TOOL_RESULT,
            tool=tool,
            tool_use_id=tool_use_id,
            result=result,
            is_error=is_error,
        )
        self.flush((ev,))

    def usage(self, usage: Usage) -> None:
        self._usage = usage

    def finish(self, stop_reason: str, error: str) -> None:
        # The last text rides on the finish message: one hand-back fewer per turn.
        text = "".join(self._buf)
        self._buf.clear()
        self._send(
            TurnFinished(
                run_id=self._run_id,
                stop_reason=stop_reason,
                text=text,
                error=error,
                usage=self._usage,
            )
        )


class SessionActor(ActorTypeDispatcher):  # type: ignore[misc]
    """One session. Created only by the Runner; configured by a `SessionConfig` message."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cfg: SessionConfig | None = None
        self.spine: SqliteLog | None = None
        self.state: SessionState | None = None
        self.runner: Any = None
        self.run: _Run | None = None
        self.subs: dict[str, _Sub] = {}
        self.stopping = False
        self.snapshots: SnapshotStore | None = None
        self.snap_seq = 0
        self._key_reported = False
        self._out_recs: list[tuple[int, str, bytes]] = []
        self._out_live: list[tuple[str, str, str]] = []
        self._out_keys: list[str] = []
        self._notify_scheduled = False

    # -- start -------------------------------------------------------------------------

    def receiveMsg_SessionConfig(self, cfg: SessionConfig, sender: Any) -> None:
        if self.cfg is not None:
            return
        self.cfg = cfg
        self.runner = sender
        sid = cfg.session_id
        # If the Runner's process dies this process is re-parented: then this incarnation
        # is an orphan that a new Runner will replace, so it stops itself.
        self.ppid = os.getppid()
        self.wakeupAfter(timedelta(seconds=_ORPHAN_CHECK), "orphan-check")
        configure_actor_logging(os.path.dirname(cfg.db_path))
        self.spine = SqliteLog(cfg.db_path)
        self.snapshots = SnapshotStore(os.path.dirname(cfg.db_path))
        base = self.snapshots.load(sid)
        if base is None or base.last_seq > self.spine.last_seq(sid):
            base = SessionState(session_id=sid)
        self.snap_seq = base.last_seq
        self.state = fold(base, self.spine.read_events(sid, base.last_seq))
        created = already = False
        error = ""
        try:
            if cfg.create:
                if self.state.last_seq > 0:
                    already = True
                else:
                    first = [
                        Event(kind=Kind.SESSION_STARTED, text=cfg.metadata.get("objective", ""))
                    ]
                    if cfg.metadata:
                        first.append(Event(kind=Kind.PROPERTIES, properties=dict(cfg.metadata)))
                    self._append(first)
                    created = True
            recovery = recovery_events(self.state)
            if recovery:
                self._append(recovery)
        except ConflictError:
            already = cfg.create and not created
            error = "" if already else "stale incarnation"
        st = self.state
        self.send(
            sender,
            SessionReady(
                session_id=sid,
                incarnation=cfg.incarnation,
                last_seq=st.last_seq,
                closed=st.closed,
                failed=st.failed,
                created=created,
                already_exists=already,
                metadata=dict(st.metadata),
                error=error,
            ),
        )
        self._maybe_start_turn()

    # -- writing -----------------------------------------------------------------------

    def _append(
        self,
        events: list[Event],
        key: str | None = None,
        live: tuple[tuple[str, str, str], ...] = (),
    ) -> AppendResult:
        assert self.spine is not None and self.state is not None and self.cfg is not None
        try:
            res = self.spine.append(
                self.cfg.session_id, events, expected_seq=self.state.last_seq, idempotency_key=key
            )
        except ConflictError:
            # Another incarnation wrote this stream: this one is stale and must not write.
            _log().error("session %s: stale incarnation, stopping", self.cfg.session_id)
            self._stop_self("stale incarnation")
            raise
        if not res.duplicate:
            self._absorb(res, key, live)
        return res

    def _absorb(
        self, res: AppendResult, key: str | None, live: tuple[tuple[str, str, str], ...]
    ) -> None:
        """Fold newly stored records into the state, snapshot if due, and publish them."""
        assert self.state is not None
        st = self.state
        for r in res.records:
            st = evolve(st, r.event())
        self.state = st
        if self.snapshots is not None and st.last_seq - self.snap_seq >= SNAPSHOT_EVERY:
            self.snapshots.save(st)
            self.snap_seq = st.last_seq
        self._publish(res, key, live)

    def _publish(
        self, res: AppendResult, key: str | None, live: tuple[tuple[str, str, str], ...]
    ) -> None:
        assert self.cfg is not None
        recs = tuple((r.seq, r.kind, r.payload) for r in res.records)
        for sub in self.subs.values():
            out = tuple(
                (r.seq, r.kind, r.payload)
                for r in res.records
                if r.seq > sub.cursor and (not sub.kinds or r.kind in sub.kinds)
            )
            if res.records:
                sub.cursor = max(sub.cursor, res.records[-1].seq)
            if out:
                self.send(
                    sub.address,
                    m.EventBatch(
                        session_id=self.cfg.session_id, subscription_id=sub.sub_id, records=out
                    ),
                )
        if key:
            self._key_reported = True
        self._tell_runner(recs, live, (key,) if key else ())

    def _tell_runner(
        self,
        recs: tuple[tuple[int, str, bytes], ...],
        live: tuple[tuple[str, str, str], ...],
        keys: tuple[str, ...],
    ) -> None:
        """Queue news for the Runner (sinks, committed keys, the busy flag).

        Notifications are coalesced over `NOTIFY_INTERVAL`: one message per append would
        queue up behind Thespian's one-in-flight-per-pair transport and cost more CPU than
        the turn itself. Late is safe: sinks are live views, and a key cleared late at most
        makes a redelivery that the idempotency key turns into a duplicate.
        """
        self._out_recs.extend(recs)
        self._out_live.extend(live)
        self._out_keys.extend(keys)
        if len(self._out_recs) >= NOTIFY_MAX_RECORDS:
            self._notify()
        elif not self._notify_scheduled:
            self._notify_scheduled = True
            self.wakeupAfter(timedelta(seconds=NOTIFY_INTERVAL), "notify")

    def _notify(self) -> None:
        if self.cfg is None or not (self._out_recs or self._out_live or self._out_keys):
            return
        assert self.state is not None
        busy = self.run is not None or bool(self.state.pending)
        self.send(
            self.runner,
            Appended(
                session_id=self.cfg.session_id,
                incarnation=self.cfg.incarnation,
                records=tuple(self._out_recs),
                live=tuple(self._out_live),
                keys=tuple(self._out_keys),
                busy=busy,
            ),
        )
        self._out_recs.clear()
        self._out_live.clear()
        self._out_keys.clear()

    def _stop_self(self, reason: str) -> None:
        if self.stopping or self.cfg is None:
            return
        self._notify()
        self.stopping = True
        if self.run is not None:
            self.run.cancel.set()
        self.send(
            self.runner,
            SessionStopping(
                session_id=self.cfg.session_id, incarnation=self.cfg.incarnation, reason=reason
            ),
        )

    # -- ingress -----------------------------------------------------------------------

    def _fail(self, reply_to: Any, request_id: str, error: str, message: str) -> None:
        sid = self.cfg.session_id if self.cfg else ""
        self.send(
            reply_to,
            m.RequestFailed(request_id=request_id, error=error, message=message, session_id=sid),
        )

    def receiveMsg_Routed(self, routed: Routed, sender: Any) -> None:
        self._key_reported = False
        self._handle(routed)
        key = getattr(routed.message, "key", "")
        if key and not self._key_reported and not self.stopping and self.cfg is not None:
            # Answered without a new append (a duplicate, a consumed command, a refusal):
            # tell the Runner so it stops tracking the key for redelivery.
            self._tell_runner((), (), (key,))

    def _handle(self, routed: Routed) -> None:
        msg, reply_to = routed.message, routed.reply_to
        if self.state is not None and self.state.closed and not isinstance(msg, _READS):
            if isinstance(msg, m.CloseSession):
                self.send(reply_to, m.Done(request_id=msg.request_id))
            else:
                sid = self.state.session_id
                self._fail(reply_to, msg.request_id, "SessionClosed", f"session {sid} is closed")
            return
        if self.stopping and self.runner is not None:
            # This incarnation is on its way out; the Runner learned that before this
            # bounce arrives (same sender, ordered), so it queues it for the next one.
            self.send(self.runner, routed)
            return
        if self.cfg is None or self.state is None or self.stopping:
            self._fail(reply_to, msg.request_id, "SessionNotFound", "session is not serving")
            return
        st = self.state
        sid = self.cfg.session_id
        if isinstance(msg, Ping):
            self.send(reply_to, Pong(request_id=msg.request_id, pid=os.getpid()))
            return
        if isinstance(msg, m.GetSession):
            self.send(
                reply_to,
                m.SessionReply(request_id=msg.request_id, info=self._info(routed.restarts)),
            )
            return
        if isinstance(msg, m.Subscribe):
            self._subscribe(msg, reply_to)
            return
        if isinstance(msg, m.Unsubscribe):
            self.subs.pop(msg.subscription_id, None)
            self.send(reply_to, m.Done(request_id=msg.request_id))
            return
        if st.closed:
            self._fail(reply_to, msg.request_id, "SessionClosed", f"session {sid} is closed")
            return
        if st.failed:
            self._fail(reply_to, msg.request_id, "SessionFailed", f"session {sid} has failed")
            return
        try:
            if isinstance(msg, m.SendMessage):
                self._ingress(
                    msg, reply_to, Ingress(kind=Kind.USER_MESSAGE, key=msg.key, text=msg.text)
                )
            elif isinstance(msg, m.SetMetadata):
                self._ingress(
                    msg,
                    reply_to,
                    Ingress(kind=Kind.PROPERTIES, key=msg.key, properties=dict(msg.properties)),
                )
            elif isinstance(msg, m.SwitchSession):
                self._ingress(
                    msg, reply_to, Ingress(kind=Kind.SESSION_SWITCH, key=msg.key, target=msg.target)
                )
            elif isinstance(msg, m.Interrupt):
                self._interrupt(msg, reply_to)
            elif isinstance(msg, m.CloseSession):
                self._close(msg, reply_to)
            elif isinstance(msg, m.SealSession):
                self._seal(msg, reply_to)
            elif isinstance(msg, m.VerifySession):
                self._verify(msg, reply_to)
            else:
                self._fail(
                    reply_to,
                    getattr(msg, "request_id", ""),
                    "InvalidRequest",
                    f"a session does not take {type(msg).__name__}",
                )
        except ConflictError:
            self._fail(
                reply_to, msg.request_id, "SessionNotFound", "session incarnation is stale; retry"
            )
        except SpineError as exc:
            self._fail(reply_to, msg.request_id, "InvalidRequest", str(exc))

    def _ingress(self, msg: Any, reply_to: Any, ingress: Ingress) -> None:
        assert self.cfg is not None and self.state is not None
        st = self.state
        view = SessionView(st.session_id, st.metadata, st.last_seq, st.turns, self.run is not None)
        res: InterceptResult
        if ingress.kind == Kind.USER_MESSAGE:
            res = run_chain(self.cfg.interceptors, ingress, view)
        else:
            res = InterceptResult(event=ingress)
        notices = tuple((str(n.severity), n.text) for n in res.notices)
        live = tuple(("notice", s, t) for s, t in notices)
        events: list[Event] = []
        changes = metadata_diff(st.metadata, view.changes)
        ev = res.event
        if ev is not None and ev.kind == Kind.PROPERTIES:
            changes.update(metadata_diff(st.metadata, ev.properties))
        if changes:
            events.append(Event(kind=Kind.PROPERTIES, properties=changes))
        start_turn = False
        if ev is None or ev.kind == Kind.PROPERTIES:
            pass
        elif ev.kind == Kind.SESSION_SWITCH:
            try:
                validate_session_id(ev.target)
            except SpineError as exc:
                self._fail(reply_to, msg.request_id, "InvalidRequest", str(exc))
                return
            events.append(Event(kind=Kind.SESSION_SWITCH, session=ev.target))
        elif ev.kind == Kind.USER_MESSAGE:
            policy = st.metadata.get(BUSY_POLICY_KEY) or self.cfg.busy_policy
            if self.run is not None and policy == "reject":
                if events:
                    self._append(events, live=live)
                self._fail(
                    reply_to,
                    msg.request_id,
                    "Rejected",
                    f"session {st.session_id} is running a turn; message rejected",
                )
                return
            if self.run is not None and policy == "interrupt":
                events.extend(self._cancel_events("superseded"))
            events.append(Event(kind=Kind.USER_MESSAGE, text=ev.text))
            start_turn = True
        if not events:
            # A consumed command that changed nothing (a bad argument, /status, /help)
            # stores nothing; its notices go to the sender and the sinks.
            if live:
                self._tell_runner((), live, ())
            self.send(
                reply_to,
                m.Ack(
                    request_id=msg.request_id,
                    session_id=st.session_id,
                    key=ingress.key,
                    seq=0,
                    consumed=True,
                    notices=notices,
                ),
            )
            return
        if not start_turn:
            events.append(Event(kind=Kind.LIFECYCLE, phase=Phase.DONE))
        res_a = self._append(events, key=ingress.key, live=live)
        self.send(
            reply_to,
            m.Ack(
                request_id=msg.request_id,
                session_id=st.session_id,
                key=ingress.key,
                seq=res_a.last_seq,
                duplicate=res_a.duplicate,
                consumed=ev is None,
                notices=notices,
            ),
        )
        if start_turn and not res_a.duplicate:
            self._maybe_start_turn()

    def _cancel_events(self, reason: str) -> list[Event]:
        """Close the running turn now, keeping what it produced so far."""
        run = self.run
        if run is None:
            return []
        run.cancel.set()
        self.run = None
        usage = run.usage if run.usage is not None and not run.usage.is_zero() else None
        return [
            Event(
                kind=Kind.TURN_CANCELLED,
                turn=run.turn,
                text="".join(run.text),
                usage=usage,
                reason=reason,
            ),
            Event(kind=Kind.LIFECYCLE, phase=Phase.DONE, turn=run.turn),
        ]

    def _interrupt(self, msg: m.Interrupt, reply_to: Any) -> None:
        assert self.state is not None
        if self.run is None:
            self.send(
                reply_to,
                m.Ack(
                    request_id=msg.request_id,
                    session_id=self.state.session_id,
                    key=msg.key,
                    seq=0,
                    notices=((Severity.INFO.value, "nothing to interrupt"),),
                ),
            )
            return
        events = [Event(kind=Kind.INTERRUPT, reason=msg.reason), *self._cancel_events(msg.reason)]
        res = self._append(events, key=msg.key)
        self.send(
            reply_to,
            m.Ack(
                request_id=msg.request_id,
                session_id=self.state.session_id,
                key=msg.key,
                seq=res.last_seq,
                duplicate=res.duplicate,
            ),
        )
        self._maybe_start_turn()

    def _close(self, msg: m.CloseSession, reply_to: Any) -> None:
        assert self.state is not None and self.cfg is not None
        events = self._cancel_events("closed")
        events.append(Event(kind=Kind.LIFECYCLE, phase=Phase.CLOSED))
        self._append(events)
        for sub in list(self.subs.values()):
            self.send(
                sub.address,
                m.EventBatch(
                    session_id=self.cfg.session_id, subscription_id=sub.sub_id, closed=True
                ),
            )
        self.subs.clear()
        self.send(reply_to, m.Done(request_id=msg.request_id))
        self._stop_self("closed")

    def _keys(self) -> KeyStore:
        assert self.cfg is not None
        return KeyStore(os.path.join(os.path.dirname(self.cfg.db_path), "keys"))

    def _catch_up(self) -> None:
        """Fold and publish what a spine.seal call appended to this stream."""
        assert self.spine is not None and self.state is not None and self.cfg is not None
        recs = self.spine.read(self.cfg.session_id, self.state.last_seq, None)
        if not recs:
            return
        res = AppendResult(
            stream=self.cfg.session_id,
            first_seq=recs[0].seq,
            last_seq=recs[-1].seq,
            first_position=recs[0].position,
            last_position=recs[-1].position,
            records=tuple(recs),
        )
        self._absorb(res, None, ())

    def _seal(self, msg: m.SealSession, reply_to: Any) -> None:
        assert self.spine is not None and self.state is not None
        sid = self.state.session_id
        try:
            seal = seal_stream(
                self.spine, sid, self._keys().signing_key(), expected_seq=self.state.last_seq
            )
        except NothingToSealError:
            self.send(reply_to, m.SealReply(request_id=msg.request_id, session_id=sid, seq=0))
            return
        self._catch_up()
        self.send(
            reply_to,
            m.SealReply(
                request_id=msg.request_id,
                session_id=sid,
                seq=seal.seq,
                first=seal.first,
                last=seal.last,
                root=seal.root.hex(),
                key_id=seal.key_id,
            ),
        )

    def _verify(self, msg: m.VerifySession, reply_to: Any) -> None:
        assert self.spine is not None and self.state is not None
        sid = self.state.session_id
        report = verify_stream(self.spine, sid, self._keys().keyring())
        self._catch_up()
        self.send(
            reply_to,
            m.VerifyReply(
                request_id=msg.request_id,
                session_id=sid,
                ok=report.ok,
                summary=report.summary(),
                seq=report.verified_seq or 0,
            ),
        )

    def _subscribe(self, msg: m.Subscribe, reply_to: Any) -> None:
        assert self.spine is not None and self.cfg is not None and self.state is not None
        sub = _Sub(
            sub_id=uuid.uuid4().hex, address=reply_to, cursor=msg.after_seq, kinds=tuple(msg.kinds)
        )
        self.send(
            reply_to,
            m.SubscribeReply(
                request_id=msg.request_id,
                session_id=self.cfg.session_id,
                subscription_id=sub.sub_id,
            ),
        )
        # Backlog from the log, then live from every later append: the actor is the only
        # writer, so nothing can slip in between the read and the registration.
        while sub.cursor < self.state.last_seq:
            page = self.spine.read(self.cfg.session_id, sub.cursor, 500, sub.kinds or None)
            if not page:
                break
            self.send(
                reply_to,
                m.EventBatch(
                    session_id=self.cfg.session_id,
                    subscription_id=sub.sub_id,
                    records=tuple((r.seq, r.kind, r.payload) for r in page),
                ),
            )
            sub.cursor = page[-1].seq
        sub.cursor = max(sub.cursor, self.state.last_seq)
        if self.state.closed:
            self.send(
                reply_to,
                m.EventBatch(
                    session_id=self.cfg.session_id, subscription_id=sub.sub_id, closed=True
                ),
            )
            return
        self.subs[sub.sub_id] = sub

    def _info(self, restarts: int) -> m.SessionInfo:
        assert self.state is not None
        st = self.state
        return m.SessionInfo(
            session_id=st.session_id,
            state="closed" if st.closed else "failed" if st.failed else "live",
            last_seq=st.last_seq,
            restarts=restarts,
            metadata=dict(st.metadata),
        )

    def receiveMsg_RecordPoison(self, msg: RecordPoison, sender: Any) -> None:
        if self.state is None or self.state.closed:
            return
        self._append([Event(kind=Kind.LIFECYCLE, phase=POISONED, error=msg.detail, reason=msg.key)])

    def receiveMsg_Ping(self, msg: Ping, sender: Any) -> None:
        self.send(sender, Pong(request_id=msg.request_id, pid=os.getpid()))

    def receiveMsg_WakeupMessage(self, msg: WakeupMessage, sender: Any) -> None:
        if msg.payload == "notify":
            self._notify_scheduled = False
            self._notify()
            return
        if msg.payload != "orphan-check" or self.stopping:
            return
        if os.getppid() != self.ppid:
            _log().warning(
                "session %s: runner gone, stopping orphaned incarnation",
                self.state.session_id if self.state else "?",
            )
            self.stopping = True
            if self.run is not None:
                self.run.cancel.set()
            self.send(self.myAddress, ActorExitRequest())
            return
        self.wakeupAfter(timedelta(seconds=_ORPHAN_CHECK), "orphan-check")

    # -- turns -------------------------------------------------------------------------

    def _maybe_start_turn(self) -> None:
        st = self.state
        cfg = self.cfg
        if st is None or cfg is None or self.run is not None or self.stopping:
            return
        if not st.pending or st.closed or st.failed:
            return
        _seq, text = st.pending[0]
        n = st.turns + 1
        spec = AgentSpec.from_metadata(st.metadata)
        factory = cfg.factory or ScriptedFactory()
        try:
            agent = factory.build(spec, st.session_id)
        except Exception as exc:  # a factory failure fails the turn, not the session
            self._append(
                [
                    Event(kind=Kind.TURN_STARTED, turn=n),
                    Event(
                        kind=Kind.TURN_COMPLETED,
                        turn=n,
                        stop_reason="error",
                        error=f"agent factory failed: {exc}",
                    ),
                    Event(kind=Kind.LIFECYCLE, phase=Phase.DONE, turn=n),
                ]
            )
            self._maybe_start_turn()
            return
        run = _Run(run_id=uuid.uuid4().hex, turn=n, cancel=threading.Event())
        self._append([Event(kind=Kind.TURN_STARTED, turn=n)])
        self.run = run
        turn_input = TurnInput(
            session_id=st.session_id, turn=n, text=text, history=st.history[:-1], spec=spec
        )
        out = _Output(self, run, cfg.flush_interval)

        def work() -> None:
            try:
                stop = agent.run(turn_input, out)
                out.finish(stop, "")
            except Exception as exc:
                out.finish("error", f"{type(exc).__name__}: {exc}")

        threading.Thread(target=work, name=f"turn-{st.session_id}-{n}", daemon=True).start()

    def receiveMsg_TurnProgress(self, msg: TurnProgress, sender: Any) -> None:
        run = self.run
        if run is None or run.run_id != msg.run_id:
            return  # output of a turn already cancelled
        if msg.usage is not None:
            run.usage = msg.usage
        live: tuple[tuple[str, str, str], ...] = ()
        if msg.text:
            run.text.append(msg.text)
            live = ((ASSISTANT_DELTA, "", msg.text),)
        if msg.events:
            self._append([attrs.evolve(e, turn=run.turn) for e in msg.events], live=live)
        elif live:
            self._tell_runner((), live, ())

    def receiveMsg_TurnFinished(self, msg: TurnFinished, sender: Any) -> None:
        run = self.run
        if run is None or run.run_id != msg.run_id:
            return
        self.run = None
        usage = msg.usage if msg.usage is not None and not msg.usage.is_zero() else None
        live: tuple[tuple[str, str, str], ...] = ()
        if msg.text:
            run.text.append(msg.text)
            live = ((ASSISTANT_DELTA, "", msg.text),)
        text = "".join(run.text)
        events: list[Event] = []
        if msg.stop_reason == "cancelled" or run.cancel.is_set():
            events.append(
                Event(
                    kind=Kind.TURN_CANCELLED,
                    turn=run.turn,
                    text=text,
                    usage=usage,
                    reason="cancelled",
                )
            )
        else:
            if text:
                events.append(Event(kind=Kind.ASSISTANT, turn=run.turn, text=text))
            events.append(
                Event(
                    kind=Kind.TURN_COMPLETED,
                    turn=run.turn,
                    stop_reason=msg.stop_reason,
                    usage=usage,
                    error=msg.error,
                )
            )
        events.append(Event(kind=Kind.LIFECYCLE, phase=Phase.DONE, turn=run.turn))
        self._append(events, live=live)
        self._maybe_start_turn()

    # -- stop --------------------------------------------------------------------------

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: Any) -> None:
        self._notify()
        if self.run is not None:
            self.run.cancel.set()
        if self.spine is not None:
            self.spine.close()
            self.spine = None
        if self.snapshots is not None:
            self.snapshots.close()
            self.snapshots = None
