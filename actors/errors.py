"""The actor layer's exception tree; `RequestFailed.error` names one of these classes."""

from __future__ import annotations


class ActorsError(Exception):
    """Base of every error raised by the actor layer."""

    def __init__(self, message: str, *, session_id: str = "") -> None:
        super().__init__(message)
        self.session_id = session_id


class WrongDaemon(ActorsError):
    """The actor system reached is not the daemon of the Host's data directory."""


class SessionAlreadyExists(ActorsError):
    """``create`` named a session that exists; the existing one is untouched."""


class SessionNotFound(ActorsError):
    """No session has this id."""


class SessionClosed(ActorsError):
    """The session was closed; it takes no more ingress."""


class SessionFailed(ActorsError):
    """The session crashed more often than its restart budget allows."""


class Rejected(ActorsError):
    """The session refused the ingress (e.g. a message mid-turn under the reject policy)."""


class PoisonMessageError(ActorsError):
    """The ingress crashed the session twice; it was recorded and dropped."""


class InterceptorError(ActorsError):
    """An interceptor raised while handling the ingress; nothing was stored, the session
    serves on. The message names the interceptor and its error."""


class InvalidRequest(ActorsError, ValueError):
    """The request itself is malformed (bad id, bad argument)."""


class IdempotencyConflict(InvalidRequest):
    """An idempotency key came back with a different request than the one it was first
    used for; nothing was stored. The message names the key."""


class NotAuthorized(InvalidRequest):
    """A write on a session's behalf named a key only the operator may set
    (`actors.authority`); nothing was stored. The message names the key."""


class TurnNotFound(InvalidRequest):
    """An edit, a regeneration or a branch switch named a seq that opens no turn of the
    session (`Host.branches` lists the ones that do); nothing was stored. A well-formed
    request about a turn that is not there: HTTP answers it 404, not as a bad field."""


class RunnerClosed(ActorsError):
    """The Runner was closed."""


class HostClosed(ActorsError):
    """The Host was closed; it makes no more calls (raised by the Host itself, never
    carried in a reply)."""


class HostTimeout(ActorsError, TimeoutError):
    """No reply arrived within the timeout."""


class SpineUnavailable(ActorsError):
    """The spine (the session's database) could not be reached: a passing condition,
    not a fault of the session, which serves again once it is back. Nothing the request
    asked for is known to be stored; sending it again under the same key is safe (it is
    stored at most once)."""


class GoalStalled(ActorsError):
    """A goal run ended without converging; the message is the stall reason (budget
    exceeded, repeated failures, cancelled, governance refused the model call)."""


class GoalInterrupted(ActorsError):
    """A goal run is in flight in the log but nothing drives it: no process is on its
    session (the daemon restarted with ``--no-resume-goals``, or the session failed) and
    it waits for no human. Nothing is lost: `Host.resume` (``vertebra resume``) continues
    it from where it stopped. ``goal`` and ``seq`` name the run and its ``session.started``."""

    def __init__(self, message: str, *, session_id: str = "", goal: str = "", seq: int = 0):
        super().__init__(message, session_id=session_id)
        self.goal = goal
        self.seq = seq


ERRORS: dict[str, type[ActorsError]] = {
    cls.__name__: cls
    for cls in (
        ActorsError,
        SessionAlreadyExists,
        SessionNotFound,
        SessionClosed,
        SessionFailed,
        Rejected,
        PoisonMessageError,
        InterceptorError,
        InvalidRequest,
        IdempotencyConflict,
        NotAuthorized,
        TurnNotFound,
        RunnerClosed,
        HostTimeout,
        SpineUnavailable,
        GoalStalled,
        GoalInterrupted,
    )
}
