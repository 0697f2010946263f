"""The gateway's Starlette application: `create_app`, the unauthenticated page and API
description, and the replies to an unknown path or method.

Every `/v1` route is one function registered with `route` (`_routing`), which names its
method, its path and the access it needs (``read``, ``write`` or ``admin``); the
decorator checks the bearer token against the session in the path before the function
runs, and turns the actor layer's errors into JSON error replies. Adding a route
(approvals, goal runs) is one decorated function in the module of its resource and its
entry in ``openapi.json``.

Commands go through the `Host` on worker threads (it keeps one private actor-system
context per thread); reads (history, SSE) tail the spine directly.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Awaitable, Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Route

# The route modules register their routes when imported; in this (alphabetical) order
# `ROUTES` lists them as they always were: sessions, then streams, then telemetry.
from . import _session_routes, _stream_routes, _telemetry_routes  # noqa: F401
from ._gateway import Gateway
from ._replies import error_response
from ._routing import ROUTES, endpoint

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
    "/style.css": ("style.css", "text/css; charset=utf-8"),
}


async def _not_found(request: Request, exc: Exception) -> Response:
    return error_response(404, "not_found", f"no route {request.url.path}")


async def _not_allowed(request: Request, exc: Exception) -> Response:
    return error_response(405, "method_not_allowed", f"{request.method} is not allowed here")


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
    return Starlette(
        routes=routes,
        exception_handlers={404: _not_found, 405: _not_allowed, 500: _server_error},
    )
