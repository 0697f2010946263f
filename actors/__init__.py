"""Actors: sessions, the Runner that supervises them, and the Host that embeds them.

The public face: `Host` (the embedding API), the errors it raises, the pluggable parts
(`Agent`, `AgentFactory`, `Interceptor`) with their built-ins, the policies, and the
message protocol for Thespian hosts (`actors.messages`). `actors.testing` runs a session's
decisions without processes.
"""

from . import messages
from .agents import Agent, AgentFactory, AgentSpec, ScriptedFactory, TurnInput, TurnOutput
from .errors import (
    ActorsError,
    HostTimeout,
    InterceptorError,
    InvalidRequest,
    PoisonMessageError,
    Rejected,
    RunnerClosed,
    SessionAlreadyExists,
    SessionClosed,
    SessionFailed,
    SessionNotFound,
)
from .interceptors import (
    Emitter,
    Ingress,
    Interceptor,
    InterceptResult,
    NoticeItem,
    SessionView,
    SlashCommands,
)
from .policy import BusyPolicy, RestartPolicy


def __getattr__(name: str) -> object:
    # The Host pulls in the actor system; importing a pure module of the package (a
    # decider, the test kit) should not.
    if name == "Host":
        from .host import Host

        return Host
    raise AttributeError(f"module 'actors' has no attribute {name!r}")


__all__ = [
    "ActorsError",
    "Agent",
    "AgentFactory",
    "AgentSpec",
    "BusyPolicy",
    "Emitter",
    "Host",
    "HostTimeout",
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
    "SessionAlreadyExists",
    "SessionClosed",
    "SessionFailed",
    "SessionNotFound",
    "SessionView",
    "SlashCommands",
    "TurnInput",
    "TurnOutput",
    "messages",
]
