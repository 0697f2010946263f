"""The gateway's Starlette application: `create_app`, the unauthenticated page and API
description, and the replies to an unknown path or method.

Every `/v1` route is one entry of `ROUTES`, an explicit list naming its method, its path,
the access it needs (``read``, ``write`` or ``admin``) and its handler (a function in the
module of its resource); `create_app` wraps each handler in the check of the bearer token
against the session in the path and the mapping of the actor layer's errors to JSON error
replies (`_routing.endpoint`). Adding a route is one function, its entry here and its
entry in ``openapi.json`` (a test keeps the three equal).

Commands go through the `Host` on worker threads (it keeps one private actor-system
context per thread); reads (history, SSE) tail the spine directly.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Awaitable, Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Match, Route

from . import _a2a_routes as a2a
from . import _agui_routes as agui
from . import _conversation_routes as conversation
from . import _session_routes as sessions
from . import _stream_routes as streams
from . import _telemetry_routes as telemetry
from . import _timer_routes as timers
from . import _token_routes as tokens
from ._gateway import Gateway
from ._replies import error_response
from ._routing import RouteSpec, endpoint

#: Every ``/v1`` route, in the order Starlette tries them.
ROUTES: tuple[RouteSpec, ...] = (
    RouteSpec("GET", "/v1/sessions", "read", sessions.list_sessions),
    RouteSpec("POST", "/v1/sessions", "write", sessions.create_session),
    RouteSpec("GET", "/v1/sessions/{id}", "read", sessions.get_session),
    RouteSpec("DELETE", "/v1/sessions/{id}", "write", sessions.close_session),
    RouteSpec("POST", "/v1/sessions/{id}/messages", "write", sessions.send_message),
    RouteSpec("POST", "/v1/sessions/{id}/edits", "write", conversation.edit),
    RouteSpec("POST", "/v1/sessions/{id}/regenerations", "write", conversation.regenerate),
    RouteSpec("GET", "/v1/sessions/{id}/branches", "read", conversation.branches),
    RouteSpec("PUT", "/v1/sessions/{id}/branch", "write", conversation.switch_branch),
    RouteSpec("POST", "/v1/sessions/{id}/forks", "write", conversation.fork),
    RouteSpec("POST", "/v1/sessions/{id}/goals", "write", sessions.submit_goal),
    RouteSpec("GET", "/v1/sessions/{id}/goals/wait", "read", sessions.wait_goal),
    RouteSpec("POST", "/v1/sessions/{id}/interrupt", "write", sessions.interrupt),
    RouteSpec("PATCH", "/v1/sessions/{id}/metadata", "write", sessions.set_metadata),
    RouteSpec("GET", "/v1/sessions/{id}/approvals", "read", sessions.approvals),
    RouteSpec("POST", "/v1/sessions/{id}/approvals/{call}", "write", sessions.decide),
    RouteSpec("GET", "/v1/sessions/{id}/timers", "read", timers.list_timers),
    RouteSpec("POST", "/v1/sessions/{id}/timers", "write", timers.set_timer),
    RouteSpec("DELETE", "/v1/sessions/{id}/timers/{timer}", "write", timers.cancel_timer),
    RouteSpec("GET", "/v1/sessions/{id}/budget", "read", timers.budget),
    RouteSpec("GET", "/v1/sessions/{id}/status", "read", streams.status),
    RouteSpec("GET", "/v1/sessions/{id}/context", "read", streams.context),
    RouteSpec("GET", "/v1/sessions/{id}/history", "read", streams.history),
    RouteSpec("POST", "/v1/sessions/{id}/seal", "write", streams.seal),
    RouteSpec("POST", "/v1/sessions/{id}/verify", "write", streams.verify),
    RouteSpec("GET", "/v1/sessions/{id}/events", "read", streams.session_events),
    RouteSpec("GET", "/v1/events", "admin", streams.all_events),
    RouteSpec("POST", "/v1/agui/{id}", "write", agui.run),
    RouteSpec("GET", "/v1/tokens", "admin", tokens.list_all),
    RouteSpec("POST", "/v1/tokens", "admin", tokens.create),
    RouteSpec("DELETE", "/v1/tokens/{token}", "admin", tokens.revoke),
    RouteSpec("GET", "/metrics", "admin", telemetry.metrics),
)

STATIC = importlib.resources.files("actors.gateway") / "static"


def openapi_bytes() -> bytes:
    return (importlib.resources.files("actors.gateway") / "openapi.json").read_bytes()


async def openapi(request: Request) -> Response:
    return Response(openapi_bytes(), media_type="application/json")


def _static(name: str, media: str) -> Callable[[Request], Awaitable[Response]]:
    async def serve(request: Request) -> Response:
        path = STATIC / name
        return FileResponse(str(path), media_type=media, headers={"Cache-Control": "no-cache"})

    return serve


PAGES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/sse.js": ("sse.js", "text/javascript; charset=utf-8"),
    "/markdown.js": ("markdown.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
}


async def _not_found(request: Request, exc: Exception) -> Response:
    return error_response(404, "not_found", f"no route {request.url.path}")


async def _not_allowed(request: Request, exc: Exception) -> Response:
    # RFC 9110: a 405 names the methods the resource has (Starlette puts them on the
    # exception; several routes on one path each name their own, so they are gathered).
    allowed = sorted(
        {m for r in request.app.routes for m in _methods(r, request)}
        | set(_header_methods(getattr(exc, "headers", None)))
    )
    headers = {"Allow": ", ".join(allowed)} if allowed else None
    return error_response(
        405, "method_not_allowed", f"{request.method} is not allowed here", headers
    )


def _methods(route: object, request: Request) -> set[str]:
    if not isinstance(route, Route) or route.methods is None:
        return set()
    match, _ = route.matches({**request.scope, "method": "GET", "type": "http"})
    if match == Match.NONE:
        return set()
    return set(route.methods)


def _header_methods(headers: object) -> list[str]:
    if not isinstance(headers, dict):
        return []
    return [m.strip() for m in str(headers.get("Allow", "")).split(",") if m.strip()]


async def _server_error(request: Request, exc: Exception) -> Response:
    return error_response(500, "internal", f"{type(exc).__name__}")


def create_app(gw: Gateway) -> Starlette:
    """The ASGI application serving ``gw``."""
    routes = [
        Route(path, endpoint(gw, access, fn), methods=[method], name=fn.__name__)
        for method, path, access, fn in ROUTES
    ]
    routes.append(Route("/openapi.json", openapi, methods=["GET"]))
    for path, (name, media) in PAGES.items():
        routes.append(Route(path, _static(name, media), methods=["GET"]))
    # The A2A door is the SDK's protocol, described by the agent card, not by openapi.json.
    routes += a2a.routes(gw)
    return Starlette(
        routes=routes,
        exception_handlers={404: _not_found, 405: _not_allowed, 500: _server_error},
    )
