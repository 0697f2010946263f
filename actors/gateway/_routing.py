"""What a route is (`RouteSpec`: method, path, access, handler) and the wrapper every
route runs in: it checks the bearer token against the session in the path and turns the
actor layer's errors into JSON error replies. The list of routes is `_app.ROUTES`."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from .. import errors as e
from ._gateway import Gateway, call
from ._replies import HttpError, error_response
from ._requests import session_id
from ._tenants import retry_after
from ._tokens import Grant

log = logging.getLogger("vertebra.gateway")

# Errors of the actor layer and the status each gets.
STATUS: dict[type[e.ActorsError], tuple[int, str]] = {
    e.SessionNotFound: (404, "not_found"),
    e.SessionAlreadyExists: (409, "exists"),
    e.SessionClosed: (409, "closed"),
    e.SessionFailed: (409, "failed"),
    e.Rejected: (429, "busy"),
    e.InterceptorError: (422, "interceptor_failed"),
    e.PoisonMessageError: (422, "poison_message"),
    e.TurnNotFound: (404, "no_such_turn"),
    e.InvalidRequest: (422, "invalid_field"),
    e.NotAuthorized: (403, "forbidden_key"),
    e.IdempotencyConflict: (422, "idempotency_conflict"),
    e.RunnerClosed: (503, "unavailable"),
    e.HostTimeout: (503, "unavailable"),
    e.HostClosed: (503, "unavailable"),
    e.SpineUnavailable: (503, "unavailable"),
}

Handler = Callable[[Gateway, Request], Awaitable[Response]]


class RouteSpec(NamedTuple):
    """One ``/v1`` route: ``access`` is what the token needs on the session in the path
    (``read`` or ``write``), or ``admin`` for the whole daemon."""

    method: str
    path: str
    access: str
    handler: Handler


def _grant(gw: Gateway, request: Request) -> Grant:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise HttpError(401, "unauthorized", "send Authorization: Bearer <token>")
    g = gw.tokens.grant(token.strip())
    if g is None:
        raise HttpError(401, "unauthorized", "unknown token")
    return g


def _check_access(g: Grant, access: str, sid: str | None) -> None:
    if access == "admin" and not g.admin:
        raise HttpError(403, "forbidden", "this route needs the admin token")
    if sid is None:
        if access == "write" and g.read_only:
            raise HttpError(403, "forbidden", "this token is read-only")
        return
    if g.tenant is None and not g.may_read(sid):
        raise HttpError(403, "forbidden", f"this token is not valid for session {sid!r}")
    if access == "write" and g.read_only:
        raise HttpError(403, "forbidden", "this token is read-only")


async def _check_tenant(gw: Gateway, g: Grant, sid: str | None) -> None:
    """A tenant's token: within its request rate, and only on its tenant's sessions (any
    other is 404, as if it did not exist)."""
    assert g.tenant is not None
    wait = gw.tenants.take(g.tenant)
    if wait > 0:
        raise HttpError(
            429,
            "rate_limited",
            f"tenant {g.tenant!r} is over its request rate",
            {"Retry-After": retry_after(wait)},
        )
    if sid is not None and await call(gw.tenants.tenant_of, sid) != g.tenant:
        raise HttpError(404, "not_found", f"no session {sid!r}")


def endpoint(gw: Gateway, access: str, fn: Handler) -> Callable[[Request], Awaitable[Response]]:
    """``fn`` as a Starlette endpoint serving ``gw``, behind the token check."""

    @functools.wraps(fn)
    async def guarded(request: Request) -> Response:
        try:
            g = _grant(gw, request)
            sid = session_id(request) if "id" in request.path_params else None
            if g.tenant is not None:
                await _check_tenant(gw, g, sid)
            _check_access(g, access, sid)
            request.state.grant = g
            return await fn(gw, request)
        except HttpError as exc:
            return error_response(exc.status, exc.code, exc.message, exc.headers)
        except ClientDisconnect:
            # The client went (or missed its body's deadline) mid-request: nobody reads
            # this answer, and it is no server fault to log.
            return error_response(400, "disconnected", "the client went before its body ended")
        except e.ActorsError as exc:
            status, code = STATUS.get(type(exc), (503, "unavailable"))
            return error_response(status, code, str(exc))
        except Exception as exc:
            log.exception("%s %s failed", request.method, request.url.path)
            return error_response(500, "internal", f"{type(exc).__name__}: {exc}")

    return guarded
