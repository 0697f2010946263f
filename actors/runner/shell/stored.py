"""`StoredWriter`: the Runner as the writer of streams that have no process.

A session without a process is closed by close-all, marked failed past its restart
budget, revived by an operator, verified or replayed while failed. Each write folds the
stream and runs the session's own decider through the session's `Executor` (`CloseStored`,
`FailStored`, `ReviveStored`), so the stream follows one set of rules whoever writes it;
the append expects the folded seq, so a writer that raced it (an orphaned incarnation)
is refused instead of interleaved. Only a stream that does not decode is written without
a fold: its failure is recorded once, from the raw tail.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import attrs
import orjson

from spine import AppendResult, ConflictError, Event, Kind, Log, Phase, SpineError
from spine.seal import KeyStore, verify_stream

from ... import messages as m
from ...session.rules import commands as c
from ...session.rules.state import SessionState, fold
from ...session.shell.execution import cancellations
from ...session.shell.executor import Executor, RecordingPorts
from ...session.shell.subscriptions import Subscriptions

#: Attempts at closing a stream without a process before giving up (a write raced it).
CLOSE_ATTEMPTS = 3


def _log() -> logging.Logger:
    # Looked up at each use: Thespian re-initializes logging in actor processes after
    # import, so a logger captured at import time may no longer be wired to anything.
    return logging.getLogger("vertebra.runner")


@attrs.define
class _StoredPorts(RecordingPorts):
    """The executor's ports when the Runner writes: replies and the children's stop are
    the Runner's sends, what is stored is published like any session's records."""

    runner: Any = None
    reply_to: Any = None

    def timed(self, took: float) -> None:
        self.runner.appends.observe(took)

    def reply(self, reply: Any) -> None:
        if reply is not None and self.reply_to is not None:
            self.runner.send(self.reply_to, reply)

    def appended(self, res: AppendResult, events: tuple[Event, ...], state: c.Session) -> None:
        self.runner.published(self.session_id, res.records)

    def cancel_children(self, effect: c.CancelChildren) -> None:
        # Sent to the Runner itself, routed once the message that closed the parent is
        # done: a close-all closes a stored child in the same pass, and its interrupt then
        # finds it closed instead of starting a process for it.
        for stop in cancellations(effect):
            self.runner.send(self.runner.myAddress, stop)


class StoredWriter:
    """The spine as the Runner reads and writes it."""

    def __init__(self, log: Log, data_dir: str, runner: Any) -> None:
        self.log = log
        self.data_dir = data_dir
        #: The Runner: its sends, its routing, its publishing and its append timings.
        self.runner = runner

    def fold(self, sid: str) -> c.Session:
        return c.Session(stored=fold(SessionState(session_id=sid), self.log.read_events(sid, 0)))

    def execute(self, state: c.Session, command: c.Command, reply_to: Any = None) -> c.Session:
        """Run ``command`` through the session's decider over ``state``; the state after."""
        sid = state.stored.session_id
        ports = _StoredPorts(self.log, sid, runner=self.runner, reply_to=reply_to)
        ex = Executor(self.log, ports, state)
        ex.run(command)
        return ex.state

    def close(self, sid: str) -> tuple[str, int] | None:
        """Close a stream that has no process; its terminal state and last seq after."""
        for _ in range(CLOSE_ATTEMPTS):
            try:
                st = self.execute(self.fold(sid), c.CloseStored()).stored
            except ConflictError:
                continue  # a writer raced this one: fold again
            except SpineError as exc:
                _log().error("session %s: could not close it in the log: %s", sid, exc)
                return None
            return ("closed" if st.closed else "failed"), st.last_seq
        _log().error("session %s: could not close it in the log; its stream kept moving", sid)
        return None

    def fail(self, sid: str, reason: str) -> None:
        """Record the failure of a session no process will write again."""
        _log().error("session %s: %s; marked failed", sid, reason)
        try:
            try:
                state = self.fold(sid)
            except SpineError:
                self._fail_undecodable(sid, reason)
                return
            self.execute(state, c.FailStored(reason=reason))
        except SpineError as exc:
            _log().error("could not record failure of %s: %s", sid, exc)

    def _fail_undecodable(self, sid: str, reason: str) -> None:
        """The stream does not decode: no fold, just the failure (once)."""
        last = self.log.last_seq(sid)
        tail = self.log.read(sid, last - 1, 1) if last else []
        if tail and tail[0].kind == Kind.LIFECYCLE and _says_failed(tail[0].payload):
            return
        ev = Event(kind=Kind.LIFECYCLE, phase=Phase.FAILED, error=reason)
        ports = _StoredPorts(self.log, sid, runner=self.runner)
        res = self.log.append(sid, [ev], expected_seq=last)
        ports.appended(res, (ev,), c.Session(stored=SessionState(session_id=sid)))

    def revive(self, msg: m.ReviveSession, sender: Any, held_failed: str = "") -> bool:
        """An operator's revival of a failed session, answered to ``sender``; whether it
        was recorded. ``held_failed`` is why this Runner holds the session failed ("" if
        it does not): a failure it could not store then (the spine was away) is stored
        first, so the stream says what the revival undoes."""
        sid = msg.session_id
        try:
            state = self.fold(sid)
            if held_failed and not state.stored.failed and state.stored.last_seq:
                state = self.execute(state, c.FailStored(reason=held_failed))
        except SpineError as exc:
            self._refuse(msg, sender, "InvalidRequest", f"session {sid} cannot be revived: {exc}")
            return False
        try:
            cmd = c.ReviveStored(request_id=msg.request_id, reason=msg.reason)
            after = self.execute(state, cmd, reply_to=sender)
        except SpineError as exc:
            text = f"could not record the revival of {sid}: {exc}"
            self._refuse(msg, sender, "ActorsError", text)
            return False
        return after.stored.last_seq > state.stored.last_seq

    def _refuse(self, msg: Any, to: Any, error: str, text: str) -> None:
        """Answer ``msg`` (anything with a request id and a session id) with a failure."""
        failed = m.RequestFailed(
            request_id=msg.request_id, error=error, message=text, session_id=msg.session_id
        )
        self.runner.send(to, failed)

    def verify(self, sid: str, request_id: str, reply_to: Any) -> None:
        """Verify a failed session from its stored rows, without decoding them, and record
        the outcome: no process loads its stream, so the Runner is the writer."""
        try:
            ring = KeyStore(os.path.join(self.data_dir, "keys")).keyring()
            report = verify_stream(self.log, sid, ring)
        except SpineError as exc:
            asked = m.VerifySession(request_id=request_id, session_id=sid)
            self._refuse(asked, reply_to, "ActorsError", f"could not verify {sid}: {exc}")
            return
        if report.verified_seq:
            self.runner.published(sid, self.log.read(sid, report.verified_seq - 1, 1))
        reply = m.VerifyReply(
            request_id=request_id,
            session_id=sid,
            ok=report.ok,
            summary=report.summary(),
            seq=report.verified_seq,
        )
        self.runner.send(reply_to, reply)

    def replay(self, sid: str, request: Any, reply_to: Any) -> None:
        """Answer a subscription to a failed session from its stored rows, read raw (a
        stream that does not decode is replayed all the same), ending with a closed batch:
        nothing will be appended until an operator revives it."""
        try:
            last = self.log.last_seq(sid)
            Subscriptions(sid, self.log, self.runner.send).add(request, reply_to, last, closed=True)
        except SpineError as exc:
            self._refuse(request, reply_to, "ActorsError", f"could not replay {sid}: {exc}")


def _says_failed(payload: bytes) -> bool:
    """Whether a stored lifecycle row records a failure (read without decoding the event)."""
    try:
        d = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return False
    return isinstance(d, dict) and d.get("phase") == Phase.FAILED
