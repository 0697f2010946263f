"""Actors: sessions, the Runner that supervises them, and the Host that embeds them.

The public face: `Host` (the embedding API), the errors it raises, the pluggable parts
(`Agent`, `AgentFactory`, `Interceptor`) with their built-ins, the policies, and the
message protocol for Thespian hosts (`actors.messages`). `actors.testing` runs a session's
decisions without processes.
"""

from typing import TYPE_CHECKING

from .errors import (
    ActorsError,
    HostClosed,
    HostTimeout,
    IdempotencyConflict,
    InterceptorError,
    InvalidRequest,
    PoisonMessageError,
    Rejected,
    RunnerClosed,
    SessionAlreadyExists,
    SessionClosed,
    SessionFailed,
    SessionNotFound,
    SpineUnavailable,
    TurnNotFound,
    WrongDaemon,
)

if TYPE_CHECKING:
    from . import messages
    from .agents import Agent, AgentFactory, AgentSpec, ScriptedFactory, TurnInput, TurnOutput
    from .host import Host
    from .interceptors import (
        Emitter,
        Ingress,
        Interceptor,
        InterceptResult,
        NoticeItem,
        SessionView,
        SlashCommands,
    )
    from .policy import BusyPolicy, RestartPolicy, SealPolicy, SnapshotPolicy

# Where each lazily imported name lives. The command line imports this package first, and
# `vertebra --help` must not pay for the actor system, the agents and the spine's codecs
# (about 100 ms); a pure module of the package (a decider, the test kit) should not either.
_LAZY = {
    "Agent": ".agents",
    "AgentFactory": ".agents",
    "AgentSpec": ".agents",
    "BusyPolicy": ".policy",
    "Emitter": ".interceptors",
    "Host": ".host",
    "Ingress": ".interceptors",
    "InterceptResult": ".interceptors",
    "Interceptor": ".interceptors",
    "NoticeItem": ".interceptors",
    "RestartPolicy": ".policy",
    "ScriptedFactory": ".agents",
    "SealPolicy": ".policy",
    "SessionView": ".interceptors",
    "SlashCommands": ".interceptors",
    "SnapshotPolicy": ".policy",
    "TurnInput": ".agents",
    "TurnOutput": ".agents",
}


def __getattr__(name: str) -> object:
    import importlib

    where = _LAZY.get(name)
    if where is None:
        # A submodule (`actors.messages`, `actors.agents`...) reached as an attribute, as
        # it could be when this package imported them all.
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
        raise AttributeError(f"module 'actors' has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "ActorsError",
    "Agent",
    "AgentFactory",
    "AgentSpec",
    "BusyPolicy",
    "Emitter",
    "Host",
    "HostClosed",
    "HostTimeout",
    "IdempotencyConflict",
    "Ingress",
    "InterceptResult",
    "Interceptor",
    "InterceptorError",
    "InvalidRequest",
    "NoticeItem",
    "PoisonMessageError",
    "Rejected",
    "RestartPolicy",
    "RunnerClosed",
    "ScriptedFactory",
    "SealPolicy",
    "SessionAlreadyExists",
    "SessionClosed",
    "SessionFailed",
    "SessionNotFound",
    "SessionView",
    "SlashCommands",
    "SnapshotPolicy",
    "SpineUnavailable",
    "TurnInput",
    "TurnNotFound",
    "TurnOutput",
    "WrongDaemon",
    "messages",
]
