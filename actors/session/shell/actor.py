"""`SessionActor`: the thin shell that runs one session's decider.

Each handler turns a message into a command, calls `decide`, appends the decision's events
(the session is its stream's only writer: ``expected_seq`` guards against a stale
incarnation), replies, and carries out the effects. A turn runs on a worker thread that
hands its output back to the session's own address, so only handlers touch state and an
interrupt is handled while the turn still runs; a turn whose agent answers without waiting
is run in the handler (and, while commits wait for the log's write lock, stored in the
append that started it).

No handler may raise: Thespian would run it again (side effects twice) and then bounce the
message as poison. `GuardedActor` catches, logs and answers instead.

The actor is composed of mixins: `incarnation` (its state, the end of each message, news
for the Runner), `execution` (carrying decisions out), `lifecycle` (standby, start, timers,
exit) and `requests` (routed requests, the worker's output, the Runner's answers).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...placement import fits
from .lifecycle import SessionLifecycle
from .requests import SessionRequests


class SessionActor(SessionLifecycle, SessionRequests):
    """One session. Created only by the Runner; configured by a `SessionConfig` message."""

    log_name = "vertebra.session"

    @staticmethod
    def actorSystemCapabilityCheck(
        capabilities: Mapping[str, Any], requirements: Mapping[str, Any] | None
    ) -> bool:
        # With several hosts the Runner names the member a session goes to.
        return fits(capabilities, requirements)
