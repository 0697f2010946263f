"""`SessionRequests`: the session actor's mixin that answers what reaches it: requests the
Runner routes, the turn worker's output, and the Runner's answers to child creations."""

from __future__ import annotations

import os
import time
from typing import Any

import attrs

from spine import ConflictError

from ... import messages as m
from ...messages import Ping, Pong
from ..protocol import RecordPoison, Routed
from ..rules import commands as c
from ..rules.translation import command_of, session_info
from .execution import DecisionExecution


class SessionRequests(DecisionExecution):
    """Handlers for requests, the worker's output and the Runner's answers."""

    # -- requests ------------------------------------------------------------------------

    def receiveMsg_Routed(self, routed: Routed, sender: Any) -> None:
        msg, reply_to = routed.message, routed.reply_to
        if self.stopping_sent and self.runner is not None:
            # This incarnation is on its way out; the Runner learned that before this
            # bounce arrives (same sender, ordered), so it queues it for the next one.
            self.send(self.runner, routed)
            return
        if self.cfg is None or self.state is None:
            self._reply(reply_to, self._failure(msg.request_id, "SessionNotFound", "not serving"))
            return
        self._request(msg, reply_to, routed.restarts)
        key = getattr(msg, "key", "")
        if key:
            # Answered (committed, duplicate, consumed or refused): the Runner stops
            # tracking the key for redelivery.
            self._tell_runner(keys=[key])
        self._flush_if_idle()

    def _request(self, msg: Any, reply_to: Any, restarts: int) -> None:
        assert self.state is not None and self.subs is not None
        st = self.state.stored
        if isinstance(msg, Ping):
            self._reply(reply_to, Pong(request_id=msg.request_id, pid=os.getpid()))
        elif isinstance(msg, m.GetSession):
            self._reply(
                reply_to,
                m.SessionReply(
                    request_id=msg.request_id, info=session_info(self.state.stored, restarts)
                ),
            )
        elif isinstance(msg, m.Subscribe):
            self.subs.add(msg, reply_to, st.last_seq, st.closed)
        elif isinstance(msg, m.Unsubscribe):
            self.subs.remove(msg.subscription_id)
            self._reply(reply_to, m.Done(request_id=msg.request_id))
        else:
            command = command_of(msg)
            if isinstance(command, c.Receive):
                command = self._with_stored(command)
            elif isinstance(command, c.Submit | c.SetTimer):
                command = attrs.evolve(command, now=time.time(), stored=self._stored(command.key))
            elif isinstance(command, c.FireDue):
                command = attrs.evolve(command, now=time.time())
            if command is None:
                text = f"a session does not take {type(msg).__name__}"
                self._reply(reply_to, self._failure(msg.request_id, "InvalidRequest", text))
                return
            try:
                self._run(command, reply_to)
            except ConflictError:
                # Another incarnation writes this stream: this one has asked to be stopped,
                # and the Runner serves the request with the one that is current.
                sid = self.cfg.session_id if self.cfg else ""
                self.send(self.runner, Routed(message=msg, reply_to=reply_to, session_id=sid))
                return
            self._settle()

    def _with_stored(self, cmd: c.Receive) -> c.Receive:
        """The command with what an earlier delivery of its key stored, if any."""
        assert self.log is not None and self.cfg is not None
        prior = self.log.find_key(self.cfg.session_id, cmd.ingress.key)
        if prior is None or not prior.records:
            return cmd
        stored = tuple((r.seq, r.kind) for r in prior.records)
        return attrs.evolve(cmd, stored=stored, prior=tuple(r.event() for r in prior.records))

    def _stored(self, key: str) -> tuple[tuple[int, str], ...]:
        """What an earlier append with ``key`` stored, as ``(seq, kind)`` rows."""
        assert self.log is not None and self.cfg is not None
        prior = self.log.find_key(self.cfg.session_id, key)
        return () if prior is None else tuple((r.seq, r.kind) for r in prior.records)

    # -- from the worker and the Runner --------------------------------------------------

    def receiveMsg_Progress(self, msg: c.Progress, sender: Any) -> None:
        if self.state is not None and not self.stopping_sent:
            self._run(msg, None)

    def receiveMsg_Govern(self, msg: c.Govern, sender: Any) -> None:
        if self.state is not None and not self.stopping_sent:
            # The decider has no clock: a goal's wall-time budget is checked against this.
            self._run(attrs.evolve(msg, now=time.time()), None)

    def receiveMsg_Finished(self, msg: c.Finished, sender: Any) -> None:
        if self.state is None or self.stopping_sent:
            return
        if self.worker is not None and self.worker.turn == msg.turn:
            self.worker = None
        self._run(msg, None)
        self._settle()
        self._flush_if_idle()

    def receiveMsg_SetTimer(self, msg: Any, sender: Any) -> None:
        # From the turn's ``schedule`` tool (the protocol's SetTimer arrives `Routed`).
        if isinstance(msg, c.SetTimer) and self.state is not None and not self.stopping_sent:
            self._run(attrs.evolve(msg, now=time.time(), stored=self._stored(msg.key)), None)
            self._settle()

    def receiveMsg_Spawn(self, msg: c.Spawn, sender: Any) -> None:
        if self.state is not None and not self.stopping_sent:
            self._run(msg, None)

    def _spawned(self, request_id: str, error: str) -> None:
        """The Runner's answer to a child creation: hand it to the waiting spawn call."""
        asked = self._spawning.pop(request_id, None)
        if asked is None:
            return
        turn, tool_use_id, child = asked
        if self.worker is not None and self.worker.turn == turn:
            self.worker.answer_spawn(tool_use_id, child, error)

    def receiveMsg_SessionReply(self, msg: m.SessionReply, sender: Any) -> None:
        self._spawned(msg.request_id, "")

    def receiveMsg_RequestFailed(self, msg: m.RequestFailed, sender: Any) -> None:
        # A child that exists already is the one an earlier attempt of this call created
        # (the turn resumed after a crash): follow it, do not make a second.
        error = "" if msg.error == "SessionAlreadyExists" else f"{msg.error}: {msg.message}"
        asked = self._spawning.get(msg.request_id)
        if asked is not None and not error:
            # After a daemon restart that child is not loaded either: bring it up, so its
            # run goes on while this turn follows it.
            child = asked[2]
            again = m.ResumeGoal(
                request_id=f"resume-{child}", session_id=child, key=f"resume-{child}"
            )
            self.send(self.runner, again)
        self._spawned(msg.request_id, error)

    def receiveMsg_Ack(self, msg: m.Ack, sender: Any) -> None:
        pass  # a child acknowledging its cancellation

    def receiveMsg_RecordPoison(self, msg: RecordPoison, sender: Any) -> None:
        if self.state is not None and not self.stopping_sent:
            self._run(c.Poisoned(key=msg.key, detail=msg.detail), None)

    def receiveMsg_Ping(self, msg: Ping, sender: Any) -> None:
        self.send(sender, Pong(request_id=msg.request_id, pid=os.getpid()))
