"""`GuardedActor`: a Thespian actor whose handlers are never run twice.

Thespian retries a handler that raises (its side effects happen twice) and then sends the
message back to its sender as a `PoisonMessage`. A guarded actor catches the exception
inside, logs it, and answers the request (if the message was one) with `RequestFailed`,
so a failing handler is a failed request, not a retry.
"""

from __future__ import annotations

import logging
from typing import Any

from thespian.actors import ActorTypeDispatcher

from spine import UnavailableError

from .. import messages as m
from ..validation import field_problem

#: Replies are never answered: a failed reply handler must not start a ping-pong.
_REPLIES = (m.RequestFailed, m.Done, m.Pong, m.Ack)
_CHECKED = frozenset(m.REQUESTS)


def requester_of(msg: Any, sender: Any) -> tuple[Any, Any] | None:
    """Who waits for an answer to ``msg`` and the request itself, or None.

    A forwarded request (any message with ``message`` and ``reply_to``, such as the
    Runner's ``Routed``) is answered to its ``reply_to``; any other message that carries a
    ``request_id`` is answered to its sender.
    """
    inner, to = msg, sender
    if hasattr(msg, "message") and hasattr(msg, "reply_to"):
        inner, to = msg.message, msg.reply_to
    if to is None or isinstance(inner, _REPLIES) or type(inner).__name__.endswith("Reply"):
        return None
    if not isinstance(getattr(inner, "request_id", None), str):
        return None
    return to, inner


class GuardedActor(ActorTypeDispatcher):  # type: ignore[misc]
    """An `ActorTypeDispatcher` whose ``receiveMsg_*`` handlers are exception-safe.

    Subclasses name their logger in ``log_name`` and may override `handler_failed`.
    """

    log_name = "vertebra"

    def receiveMessage(self, msg: Any, sender: Any) -> None:
        try:
            if type(msg) in _CHECKED:
                problem = field_problem(msg)
                if problem is not None:
                    self.refuse_invalid(msg, sender, problem)
                    return
            super().receiveMessage(msg, sender)
        except Exception as exc:  # answered here: a retry would repeat side effects
            try:
                self.handler_failed(msg, sender, exc)
            except Exception:
                logging.getLogger(self.log_name).exception("answering a failed handler failed")

    def refuse_invalid(self, msg: Any, sender: Any, problem: str) -> None:
        """Answer a public message with a wrongly typed field: ``InvalidRequest`` naming
        it, echoing whatever request id and session id there are if they are strings."""
        logging.getLogger(self.log_name).warning(
            "refused a malformed %s: %s", type(msg).__name__, problem
        )
        rid = getattr(msg, "request_id", None)
        if sender is None:
            return
        sid = getattr(msg, "session_id", "")
        self.send(
            sender,
            m.RequestFailed(
                request_id=rid if isinstance(rid, str) else "",
                error="InvalidRequest",
                message=f"{type(msg).__name__}: {problem}",
                session_id=sid if isinstance(sid, str) else "",
            ),
        )

    def handler_failed(self, msg: Any, sender: Any, exc: Exception) -> None:
        """Log the failure and answer the requester, if there is one."""
        logging.getLogger(self.log_name).error(
            "handler for %s failed", type(msg).__name__, exc_info=exc
        )
        found = requester_of(msg, sender)
        if found is None:
            return
        to, request = found
        self.send(
            to,
            m.RequestFailed(
                request_id=request.request_id,
                # An unreachable spine passes: the caller is told it may send again.
                error="SpineUnavailable" if isinstance(exc, UnavailableError) else "ActorsError",
                message=f"{type(exc).__name__}: {exc}",
                session_id=getattr(request, "session_id", "") or "",
            ),
        )
