"""Matching replies to requests by ``request_id``, over one endpoint.

Every request the Host sends (to the guardian, the Runner, a session through the Runner,
or the projection actor) carries a ``request_id`` that its reply echoes. An endpoint hands
out whatever arrives next: the reply awaited, a late reply to an earlier request that
timed out, a reply to another request of the same endpoint, or a push (a sink batch). The
matcher keeps replies by id until asked for, so no reply is lost to the wrong wait, and
hands pushes to a callback. Failure replies (`RequestFailed` from the actors,
`ProjectionFailed` from the projection actor) become exceptions in one place, `raise_failed`.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable
from typing import Any

from projections import ProjectionFailed

from ..errors import ERRORS, ActorsError
from ..messages import RequestFailed

#: Replies kept for requests nobody waits for any more, before the oldest is dropped.
STASH_LIMIT = 1000

Listen = Callable[[float], Any]


class ReplyMatcher:
    """Replies of one endpoint, matched by ``request_id``; everything else is a push.

    Not thread-safe by itself: a transport gives each endpoint one matcher and serialises
    its use (one per thread on multiproc bases, one under the lock on simpleSystemBase).
    """

    def __init__(self, on_push: Callable[[Any], None], limit: int = STASH_LIMIT) -> None:
        self._on_push = on_push
        self._limit = limit
        self._stash: dict[str, Any] = {}

    def offer(self, msg: Any) -> None:
        """Take one message that arrived: keep a reply by its id, hand a push on."""
        if msg is None:
            return
        rid = getattr(msg, "request_id", None)
        if rid:
            self._stash[rid] = msg
            if len(self._stash) > self._limit:
                # Replies nobody waits for (their request timed out): forget the oldest.
                self._stash.pop(next(iter(self._stash)))
        else:
            self._on_push(msg)

    def take(self, request_id: str) -> Any:
        """The kept reply to ``request_id`` (removed), or None."""
        return self._stash.pop(request_id, None)

    def wait(self, listen: Listen, request_id: str, timeout: float, first: Any = None) -> Any:
        """The reply to ``request_id``, listening on the endpoint for at most ``timeout``
        seconds; ``first`` is a message already received (an ask's answer). None if none."""
        self.offer(first)
        deadline = time.monotonic() + timeout
        while True:
            reply = self.take(request_id)
            if reply is not None:
                return reply
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.offer(listen(left))


_PREFIX = uuid.uuid4().hex[:16]
_COUNTER = itertools.count(1)


def request_id() -> str:
    """A request id unique to this process's life and to the host (a random prefix and a
    counter: uuid4 per request cost a system call each, about 1% of a busy Host)."""
    return f"{_PREFIX}{next(_COUNTER):x}"


def raise_failed(reply: Any) -> Any:
    """``reply`` itself, unless it is a failure reply: then the matching `ActorsError`."""
    if isinstance(reply, RequestFailed):
        cls = ERRORS.get(reply.error, ActorsError)
        raise cls(reply.message, session_id=reply.session_id)
    if isinstance(reply, ProjectionFailed):
        raise ActorsError(f"the projection actor refused the request: {reply.reason}")
    return reply
