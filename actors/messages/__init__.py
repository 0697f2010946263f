"""The message protocol: every message a host sends to the Runner and every reply.

All messages are frozen attrs classes defined at module level, so they pickle across
processes. Commands are imperative, replies end in ``...Reply`` or are ``RequestFailed``.
Every request carries a ``request_id`` that its reply echoes, so a host can tell a late or
duplicate reply from the one it waits for. Ingress that changes a session carries an
idempotency ``key``: a redelivered key is acknowledged again without a second event.

The classes live in modules by topic (`registry`, `ingress`, `seals`, `streams`,
`runtime`); import them from here, which is also the module each one names as its own.
"""

from __future__ import annotations

import typing

from ..terse import terse_module
from .converters import _busy_policy as _busy_policy
from .converters import _frozen_map as _frozen_map
from .converters import _tuple as _tuple
from .ingress import (
    Ack,
    DecideAction,
    Interrupt,
    ResumeGoal,
    SendMessage,
    SetMetadata,
    SubmitGoal,
    SwitchBranch,
    SwitchSession,
)
from .registry import (
    CloseAll,
    CloseSession,
    CreateSession,
    Done,
    GetSession,
    ListSessions,
    RegisterSession,
    RequestFailed,
    ReviveSession,
    SessionInfo,
    SessionListReply,
    SessionReply,
)
from .runtime import (
    GetHostTable,
    GetRunner,
    GetRunnerStats,
    HostTableReply,
    Ping,
    Pong,
    RunnerAddress,
    RunnerConfig,
    RunnerStats,
    SessionPid,
)
from .seals import SealReply, SealSession, VerifyReply, VerifySession
from .streams import (
    AddSink,
    EventBatch,
    RemoveSink,
    SinkAck,
    SinkBatch,
    SinkReply,
    Subscribe,
    SubscribeReply,
    Unsubscribe,
)
from .timers import CancelTimer, FireTimers, SetTimer

#: The messages a host sends into the runtime: each is checked field by field where it
#: arrives (`actors.validation`), since an unpickled message never ran its converters.
REQUESTS: tuple[type, ...] = (
    RunnerConfig,
    GetRunner,
    Ping,
    SessionPid,
    SinkAck,
    CreateSession,
    GetSession,
    RegisterSession,
    CloseSession,
    CloseAll,
    ListSessions,
    SendMessage,
    Interrupt,
    SetMetadata,
    DecideAction,
    SubmitGoal,
    ResumeGoal,
    SwitchSession,
    SwitchBranch,
    Subscribe,
    Unsubscribe,
    AddSink,
    RemoveSink,
    GetRunnerStats,
    GetHostTable,
    ReviveSession,
    SealSession,
    VerifySession,
    SetTimer,
    CancelTimer,
    FireTimers,
)

#: Every public message: the requests, then what the runtime sends back or pushes.
ALL_MESSAGES: tuple[type, ...] = (
    *REQUESTS,
    RunnerAddress,
    Pong,
    SealReply,
    VerifyReply,
    RequestFailed,
    SessionInfo,
    SessionReply,
    SessionListReply,
    Ack,
    Done,
    SubscribeReply,
    SinkReply,
    RunnerStats,
    HostTableReply,
    EventBatch,
    SinkBatch,
)

# A pickle names a class by its module and name: every message stays `actors.messages.X`
# on the wire and in anything pickled before these modules were split. The annotations
# are resolved first, where they were written (`typing.get_type_hints`, which validation
# uses, would otherwise look their names up here).
for _message in ALL_MESSAGES:
    _message.__annotations__ = typing.get_type_hints(_message, localns=globals())
    _message.__module__ = __name__
del _message

# Thespian formats every message it moves; keep that cheap (see `actors.terse`).
terse_module(globals())

__all__ = [
    "ALL_MESSAGES",
    "REQUESTS",
    "Ack",
    "AddSink",
    "CancelTimer",
    "CloseAll",
    "CloseSession",
    "CreateSession",
    "DecideAction",
    "Done",
    "EventBatch",
    "FireTimers",
    "GetHostTable",
    "GetRunner",
    "GetRunnerStats",
    "GetSession",
    "HostTableReply",
    "Interrupt",
    "ListSessions",
    "Ping",
    "Pong",
    "RegisterSession",
    "RemoveSink",
    "RequestFailed",
    "ResumeGoal",
    "ReviveSession",
    "RunnerAddress",
    "RunnerConfig",
    "RunnerStats",
    "SealReply",
    "SealSession",
    "SendMessage",
    "SessionInfo",
    "SessionListReply",
    "SessionPid",
    "SessionReply",
    "SetMetadata",
    "SetTimer",
    "SinkAck",
    "SinkBatch",
    "SinkReply",
    "SubmitGoal",
    "Subscribe",
    "SubscribeReply",
    "SwitchBranch",
    "SwitchSession",
    "Unsubscribe",
    "VerifyReply",
    "VerifySession",
]
