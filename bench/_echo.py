"""The raw Thespian baseline for ``bench/actors.py``: echo actors with vertebra's hops.

The pipeline has the shape of vertebra's hot path and none of its work (no log, no
interceptors, no agent, no state):

- ingress -> ack, 3 hops: host -> `EchoRunner` -> `EchoSession` -> host (the session
  answers the host directly, as vertebra's session answers ``reply_to``);
- turn, 3 more hops: the session sends itself two messages (vertebra's worker thread hands
  back `TurnProgress` and `TurnFinished` through the actor's own address), then tells the
  host the turn is done.

The messages are frozen attrs classes of the same size class as vertebra's, so pickling
costs are alike. This module must be importable by actor processes, hence its own file.
"""

from __future__ import annotations

import os
from typing import Any

import attrs
from thespian.actors import ActorTypeDispatcher, ChildActorExited


@attrs.frozen(kw_only=True)
class Spawn:
    """Create ``count`` echo sessions under the runner; answered with `Spawned`."""

    request_id: str
    count: int


@attrs.frozen(kw_only=True)
class Spawned:
    request_id: str
    count: int


@attrs.frozen(kw_only=True)
class EchoSend:
    """Ingress for session number ``session``; ``turn`` asks for a turn after the ack."""

    request_id: str
    session: int
    key: str
    text: str
    turn: bool = True


@attrs.frozen(kw_only=True)
class EchoRouted:
    message: EchoSend | EchoPid
    reply_to: Any


@attrs.frozen(kw_only=True)
class EchoAck:
    request_id: str
    session: int
    key: str
    seq: int


@attrs.frozen(kw_only=True)
class EchoStep:
    """A session's message to itself: ``step`` 1 and 2 stand for progress and finish."""

    step: int
    reply_to: Any
    session: int
    seq: int


@attrs.frozen(kw_only=True)
class EchoTurnDone:
    session: int
    seq: int


@attrs.frozen(kw_only=True)
class EchoPid:
    request_id: str
    session: int


@attrs.frozen(kw_only=True)
class EchoPidReply:
    request_id: str
    pid: int


class EchoRunner(ActorTypeDispatcher):  # type: ignore[misc]
    """Routes ingress to its children by number, like vertebra's Runner by session id.

    A child that dies is recreated at once and gets the last message routed to it again:
    the least a supervisor does, without vertebra's rebuild from the log or its backoff.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sessions: list[Any] = []
        self.last: dict[int, EchoRouted] = {}

    def receiveMsg_Spawn(self, msg: Spawn, sender: Any) -> None:
        while len(self.sessions) < msg.count:
            self.sessions.append(self.createActor(EchoSession))
        self.send(sender, Spawned(request_id=msg.request_id, count=len(self.sessions)))

    def _route(self, msg: EchoSend | EchoPid, sender: Any) -> None:
        routed = EchoRouted(message=msg, reply_to=sender)
        self.last[msg.session] = routed
        self.send(self.sessions[msg.session], routed)

    def receiveMsg_EchoSend(self, msg: EchoSend, sender: Any) -> None:
        self._route(msg, sender)

    def receiveMsg_EchoPid(self, msg: EchoPid, sender: Any) -> None:
        self._route(msg, sender)

    def receiveMsg_ChildActorExited(self, msg: ChildActorExited, sender: Any) -> None:
        for i, addr in enumerate(self.sessions):
            if addr == msg.childAddress:
                self.sessions[i] = self.createActor(EchoSession)
                if i in self.last:
                    self.send(self.sessions[i], self.last[i])


class EchoSession(ActorTypeDispatcher):  # type: ignore[misc]
    """Acks at once, then runs an empty "turn" of two self-sends and a reply."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seq = 0

    def receiveMsg_EchoRouted(self, routed: EchoRouted, sender: Any) -> None:
        msg = routed.message
        if isinstance(msg, EchoPid):
            self.send(routed.reply_to, EchoPidReply(request_id=msg.request_id, pid=os.getpid()))
            return
        self.seq += 1
        self.send(
            routed.reply_to,
            EchoAck(request_id=msg.request_id, session=msg.session, key=msg.key, seq=self.seq),
        )
        if msg.turn:
            step = EchoStep(step=1, reply_to=routed.reply_to, session=msg.session, seq=self.seq)
            self.send(self.myAddress, step)

    def receiveMsg_EchoStep(self, msg: EchoStep, sender: Any) -> None:
        if msg.step == 1:
            self.send(self.myAddress, attrs.evolve(msg, step=2))
        else:
            self.send(msg.reply_to, EchoTurnDone(session=msg.session, seq=msg.seq))
