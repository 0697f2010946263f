"""`RunnerRouting`: the Runner's registry requests and the routing of session-addressed
ones, loading from the log what the registry needs to decide them."""

from __future__ import annotations

import time
from typing import Any

from spine import Event, Kind, Phase, SpineError, new_session_id

from ... import messages as m
from ...messages import Ping, SessionPid
from ...session import protocol as sp
from ...session.rules.state import SessionState, fold
from ..rules.registry import Registry
from .effects import RunnerEffects


class RunnerRouting(RunnerEffects):
    """Create, get, register, list, close-all and revive; every session-addressed request
    routed to its session's process (started or brought back as the registry decides)."""

    # -- loading: what the registry needs from the log ---------------------------------

    def _ready(self, msg: Any, sender: Any) -> Registry | None:
        """The registry, or None after answering that the Runner is not configured."""
        if self.registry is None or self.spine is None:
            text = "the runner is not configured"
            reply = m.RequestFailed(request_id=msg.request_id, error="RunnerClosed", message=text)
            self.send(sender, reply)
            return None
        return self.registry

    def _load(self, sid: str, fresh: bool = True) -> None:
        """Tell the registry the stream's last seq (only for unknown ids unless ``fresh``)."""
        assert self.registry is not None and self.spine is not None
        if fresh or sid not in self.registry.entries:
            try:
                stored = self.spine.last_seq(sid)
            except SpineError:
                return  # not a valid stream name: the registry refuses the request
            self.registry.load(sid, stored)

    def _load_all(self) -> None:
        assert self.registry is not None and self.spine is not None
        for info in self.spine.streams():
            self.registry.load(info.stream, info.last_seq)

    # -- registry requests -------------------------------------------------------------

    def receiveMsg_CreateSession(self, msg: m.CreateSession, sender: Any) -> None:
        if (r := self._ready(msg, sender)) is not None:
            sid = msg.session_id or new_session_id()
            self._load(sid)
            self._do(r.create(sid, msg.request_id, sender, dict(msg.metadata)))

    def receiveMsg_GetSession(self, msg: m.GetSession, sender: Any) -> None:
        if (r := self._ready(msg, sender)) is not None:
            self._load(msg.session_id)  # the log's last seq, not a coalesced report's
            self._do(r.route(msg.session_id, msg, sender, time.monotonic()))

    def receiveMsg_RegisterSession(self, msg: m.RegisterSession, sender: Any) -> None:
        if (r := self._ready(msg, sender)) is not None:
            self._load(msg.session_id)
            self._do(r.register(msg.session_id, msg.request_id, sender))

    def receiveMsg_ListSessions(self, msg: m.ListSessions, sender: Any) -> None:
        if (r := self._ready(msg, sender)) is not None:
            self._load_all()
            self._do(r.list_sessions(msg.request_id, sender))

    def receiveMsg_CloseAll(self, msg: m.CloseAll, sender: Any) -> None:
        if (r := self._ready(msg, sender)) is not None:
            self._load_all()  # stored sessions this Runner has not loaded close too
            self._do(r.close_all(msg.request_id, sender, time.monotonic()))

    def receiveMsg_ReviveSession(self, msg: m.ReviveSession, sender: Any) -> None:
        """An operator's decision to bring a failed session back, recorded in its stream.

        A failed session has no process, so the Runner is its stream's writer; the append
        expects the folded seq. The registry forgets the entry: the next request loads it
        from the log as passivated and spawns it, and the fold no longer says failed.
        """
        if (r := self._ready(msg, sender)) is None:
            return
        assert self.spine is not None
        sid = msg.session_id

        def refuse(error: str, text: str) -> None:
            self.send(
                sender,
                m.RequestFailed(
                    request_id=msg.request_id, error=error, message=text, session_id=sid
                ),
            )

        try:
            state = fold(SessionState(session_id=sid), self.spine.read_events(sid, 0))
        except SpineError as exc:
            refuse("InvalidRequest", f"session {sid} cannot be revived: {exc}")
            return
        if state.last_seq == 0:
            refuse("SessionNotFound", f"session {sid} not found")
            return
        if not state.failed:
            refuse("InvalidRequest", f"session {sid} is not failed")
            return
        why = "revived by an operator" + (f": {msg.reason}" if msg.reason else "")
        ev = Event(kind=Kind.LIFECYCLE, phase=Phase.RECOVERED, reason=why)
        try:
            res = self._append(sid, [ev], expected_seq=state.last_seq)
        except SpineError as exc:
            refuse("ActorsError", f"could not record the revival of {sid}: {exc}")
            return
        r.entries.pop(sid, None)
        self._load(sid)
        self._published(sid, res.records)
        self.send(
            sender,
            m.Ack(request_id=msg.request_id, session_id=sid, key="", seq=res.last_seq),
        )

    # -- session-addressed requests ----------------------------------------------------

    def _route(self, sid: str, msg: Any, reply_to: Any) -> None:
        if (r := self._ready(msg, reply_to)) is not None:
            self._load(sid, fresh=False)
            self._do(r.route(sid, msg, reply_to, time.monotonic()))

    def _route_request(self, msg: Any, sender: Any) -> None:
        self._route(msg.session_id, msg, sender)

    # Every session-addressed request goes the same way.
    receiveMsg_SendMessage = _route_request
    receiveMsg_Interrupt = _route_request
    receiveMsg_SetMetadata = _route_request
    receiveMsg_DecideAction = _route_request
    receiveMsg_SubmitGoal = _route_request
    receiveMsg_SetTimer = _route_request
    receiveMsg_CancelTimer = _route_request
    receiveMsg_ResumeGoal = _route_request
    receiveMsg_SwitchSession = _route_request
    receiveMsg_Subscribe = _route_request
    receiveMsg_Unsubscribe = _route_request
    receiveMsg_CloseSession = _route_request
    receiveMsg_SealSession = _route_request
    receiveMsg_VerifySession = _route_request

    def receiveMsg_Routed(self, routed: sp.Routed, sender: Any) -> None:
        """Ingress bounced by a session incarnation that is stopping: route it again."""
        self._route(routed.session_id, routed.message, routed.reply_to)

    def receiveMsg_SessionPid(self, msg: SessionPid, sender: Any) -> None:
        self._route(msg.session_id, Ping(request_id=msg.request_id), sender)
