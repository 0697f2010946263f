"""The embedding API: `Host`, over a transport per kind of actor-system base."""

from .host import BASES, SYSTEM_SESSIONS, Host, pending_actions
from .ordering import BatchOrder
from .sinks import SinkFn, merge
from .subscription import SessionSubscription
from .transport import MultiprocTransport, SimpleTransport, Transport

__all__ = [
    "BASES",
    "SYSTEM_SESSIONS",
    "BatchOrder",
    "Host",
    "MultiprocTransport",
    "SessionSubscription",
    "SimpleTransport",
    "SinkFn",
    "Transport",
    "merge",
    "pending_actions",
]
