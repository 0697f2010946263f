"""The gateway's Starlette application: the `/v1` routes, the SSE streams and the page.

Every route is one function registered with `route`, which names its method, its path
and the access it needs (``read``, ``write`` or ``admin``); the decorator checks the
bearer token against the session in the path before the function runs, and turns the
actor layer's errors into JSON error replies. Adding a route (approvals, goal runs) is
one decorated function and its entry in ``openapi.json``.

Commands go through the `Host` on worker threads (it keeps one private actor-system
context per thread); reads (history, SSE) tail the spine directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.resources
import logging
import math
import threading
import urllib.parse
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import anyio.to_thread
import attrs
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Route

from spine import InvalidArgumentError, Kind, Log, subscribe_all, validate_session_id
from spine import history as stream_history

from .. import errors as e
from ..host import Host
from ..otel._metrics import CONTENT_TYPE, LogMetrics, prometheus_text, session_states
from ..session.goals import budget_problem
from . import _sse
from ._hub import Hubs
from ._tokens import Grant, TokenStore
from ._wire import SseResponse

log = logging.getLogger("vertebra.gateway")

#: Largest request body accepted (413 above it).
MAX_BODY = 256 * 1024
#: Largest page of history one request returns.
MAX_LIMIT = 1000
#: How long ``GET .../goals/wait`` waits without a ``timeout``, and at most (seconds).
WAIT_DEFAULT = 30.0
WAIT_MAX = 300.0
STATIC = importlib.resources.files("actors.gateway") / "static"

# Errors of the actor layer and the status each gets.
STATUS: dict[type[e.ActorsError], tuple[int, str]] = {
    e.SessionNotFound: (404, "not_found"),
    e.SessionAlreadyExists: (409, "exists"),
    e.SessionClosed: (409, "closed"),
    e.SessionFailed: (409, "failed"),
    e.Rejected: (429, "busy"),
    e.InterceptorError: (422, "interceptor_failed"),
    e.PoisonMessageError: (422, "poison_message"),
    e.InvalidRequest: (422, "invalid_field"),
    e.RunnerClosed: (503, "unavailable"),
    e.HostTimeout: (503, "unavailable"),
}


class HttpError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status, headers, media_type="application/json")


def error_response(status: int, code: str, message: str) -> Response:
    headers = {"Retry-After": "1"} if status in (429, 503) else None
    if status == 401:
        headers = {"WWW-Authenticate": 'Bearer realm="vertebra"'}
    return json_response({"error": code, "message": message}, status, headers)


@attrs.define(kw_only=True)
class Gateway:
    """What every handler needs: the Host, the spine, the tokens and the limits."""

    host: Host
    log: Log
    tokens: TokenStore
    ping: float = 15.0
    send_timeout: float = 30.0
    #: Events the every-session stream holds for one client.
    buffer: int = 4096
    #: Bytes a live session stream may leave unread before its client is disconnected.
    buffer_bytes: int = 4 * 1024 * 1024
    #: Write SSE bodies straight to the socket (False: through ASGI, as any server).
    direct: bool = True
    hubs: Hubs = attrs.field()
    feeds: list[_sse.Feed] = attrs.field(factory=list)
    lock: threading.Lock = attrs.field(factory=threading.Lock)
    stopping: bool = False
    metrics: LogMetrics = attrs.field(factory=LogMetrics)

    @hubs.default
    def _hubs(self) -> Hubs:
        return Hubs(self.log, self.buffer_bytes, self.send_timeout)

    def on_sink(self, sid: str, ev: Any, live: Any) -> None:
        """The Host sink: remember each session's last stored seq, so that a live item
        knows which stored event it follows, and pass live items to the session's hub."""
        if ev is not None:
            self.hubs.last_seen[sid] = ev.seq
        elif live is not None:
            self.hubs.post_live(sid, live)

    def attach(self, feed: _sse.Feed) -> None:
        with self.lock:
            self.feeds.append(feed)

        def detach() -> None:
            with self.lock:
                if feed in self.feeds:
                    self.feeds.remove(feed)

        feed.on_stop.append(detach)

    def stop_feeds(self) -> None:
        self.stopping = True
        self.hubs.stop()
        with self.lock:
            feeds = list(self.feeds)
        for f in feeds:
            f.stop()
            f.end()


Handler = Callable[[Gateway, Request], Awaitable[Response]]
ROUTES: list[tuple[str, str, str, Handler]] = []


def route(method: str, path: str, access: str) -> Callable[[Handler], Handler]:
    """Register ``fn`` for ``method path``; ``access`` is what the token needs on the
    session in the path (``read`` or ``write``), or ``admin`` for the whole daemon."""

    def register(fn: Handler) -> Handler:
        ROUTES.append((method, path, access, fn))
        return fn

    return register


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
    if not g.may_read(sid):
        raise HttpError(403, "forbidden", f"this token is not valid for session {sid!r}")
    if access == "write" and not g.may_write(sid):
        raise HttpError(403, "forbidden", "this token is read-only")


def session_id(request: Request) -> str:
    sid = str(request.path_params["id"])
    try:
        validate_session_id(sid)
    except (ValueError, InvalidArgumentError) as exc:
        raise HttpError(400, "bad_id", str(exc)) from None
    return sid


def _endpoint(gw: Gateway, access: str, fn: Handler) -> Callable[[Request], Awaitable[Response]]:
    @functools.wraps(fn)
    async def endpoint(request: Request) -> Response:
        try:
            g = _grant(gw, request)
            sid = session_id(request) if "id" in request.path_params else None
            _check_access(g, access, sid)
            request.state.grant = g
            return await fn(gw, request)
        except HttpError as exc:
            return error_response(exc.status, exc.code, exc.message)
        except e.ActorsError as exc:
            status, code = STATUS.get(type(exc), (503, "unavailable"))
            if str(exc) == "the host is closed":
                status, code = 503, "unavailable"
            return error_response(status, code, str(exc))
        except Exception as exc:
            log.exception("%s %s failed", request.method, request.url.path)
            return error_response(500, "internal", f"{type(exc).__name__}: {exc}")

    return endpoint


async def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a Host call on a worker thread (each keeps its own actor-system context)."""
    return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))


async def json_body(request: Request, *, required: bool = True) -> dict[str, Any]:
    """The request's JSON object, read up to `MAX_BODY` bytes (413 beyond)."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > MAX_BODY:
        raise HttpError(413, "too_large", f"the body exceeds {MAX_BODY} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise HttpError(413, "too_large", f"the body exceeds {MAX_BODY} bytes")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        if required:
            raise HttpError(400, "bad_json", "a JSON object body is required")
        return {}
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise HttpError(400, "bad_json", f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise HttpError(400, "bad_json", "the body must be a JSON object")
    return body


def field(body: dict[str, Any], name: str, kind: type | tuple[type, ...], default: Any) -> Any:
    value = body.get(name, default)
    if value is not default and not isinstance(value, kind):
        raise HttpError(422, "invalid_field", f"{name!r} has the wrong type")
    return value


def string_map(value: Any, name: str, *, nulls: bool) -> dict[str, str | None]:
    if not isinstance(value, dict):
        raise HttpError(422, "invalid_field", f"{name!r} must be an object")
    for k, v in value.items():
        if not k or not (isinstance(v, str) or (nulls and v is None)):
            kinds = "strings or null" if nulls else "strings"
            raise HttpError(422, "invalid_field", f"{name!r} must map non-empty keys to {kinds}")
    return value


def session_path(sid: str) -> str:
    """The session's address, its id percent-encoded (headers carry Latin-1 only)."""
    return f"/v1/sessions/{urllib.parse.quote(sid, safe='')}"


def idempotency_key(request: Request) -> str | None:
    key = request.headers.get("idempotency-key")
    if key is not None and not (0 < len(key) <= 200 and key.isprintable()):
        raise HttpError(422, "invalid_field", "Idempotency-Key must be 1-200 printable characters")
    return key


def float_param(request: Request, name: str, default: float, *, high: float) -> float:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise HttpError(422, "invalid_field", f"{name} must be a number of seconds") from None
    if not 0 <= value <= high:  # also refuses nan
        raise HttpError(422, "invalid_field", f"{name} must be between 0 and {high:g}")
    return value


def int_param(request: Request, name: str, default: int, *, low: int = 0, high: int = 2**62) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise HttpError(422, "invalid_field", f"{name} must be an integer") from None
    if not low <= value <= high:
        raise HttpError(422, "invalid_field", f"{name} must be between {low} and {high}")
    return value


def info_json(info: Any) -> dict[str, Any]:
    return {
        "id": info.session_id,
        "state": info.state,
        "last_seq": info.last_seq,
        "restarts": info.restarts,
        "metadata": dict(info.metadata),
    }


def ack_json(ack: Any) -> dict[str, Any]:
    return {
        "seq": ack.seq,
        "duplicate": ack.duplicate,
        "consumed": ack.consumed,
        "notices": [{"severity": s, "text": t} for s, t in ack.notices],
    }


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def _plain(value: Any) -> Any:
    if attrs.has(type(value)):
        return {_camel(a.name): _plain(getattr(value, a.name)) for a in attrs.fields(type(value))}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def status_json(p: Any) -> dict[str, Any]:
    """The status projection with the seed's field names (camelCase), plus the cache
    hit rate the page shows (cached input tokens over all input tokens)."""
    out: dict[str, Any] = _plain(p)
    u = p.usage
    total = u.input_tokens + u.cache_read_tokens
    rate = u.cache_read_tokens / total if total else 0.0
    out["cacheHitRate"] = rate if math.isfinite(rate) else 0.0
    return out


async def known(gw: Gateway, sid: str) -> None:
    if gw.log.last_seq(sid) == 0:
        raise HttpError(404, "not_found", f"no session {sid!r}")


# -- routes -------------------------------------------------------------------------------


@route("GET", "/v1/sessions", "read")
async def list_sessions(gw: Gateway, request: Request) -> Response:
    g: Grant = request.state.grant
    infos = await call(gw.host.sessions)
    return json_response({"sessions": [info_json(i) for i in infos if g.may_read(i.session_id)]})


@route("POST", "/v1/sessions", "write")
async def create_session(gw: Gateway, request: Request) -> Response:
    body = await json_body(request, required=False)
    sid = field(body, "id", str, None)
    metadata = string_map(field(body, "metadata", dict, {}), "metadata", nulls=False)
    if sid is not None:
        try:
            validate_session_id(sid)
        except (ValueError, InvalidArgumentError) as exc:
            raise HttpError(400, "bad_id", str(exc)) from None
    g: Grant = request.state.grant
    if not g.admin and (sid is None or not g.may_write(sid)):
        raise HttpError(403, "forbidden", "this token may only create its own sessions")
    sid = await call(gw.host.create, sid, metadata)
    info = await call(gw.host.get, sid)
    # A header is Latin-1 on the wire and an id need not be: percent-encode it (RFC 3986).
    return json_response(info_json(info), 201, {"Location": session_path(sid)})


@route("GET", "/v1/sessions/{id}", "read")
async def get_session(gw: Gateway, request: Request) -> Response:
    info = await call(gw.host.get, session_id(request))
    return json_response(info_json(info))


@route("DELETE", "/v1/sessions/{id}", "write")
async def close_session(gw: Gateway, request: Request) -> Response:
    sid = session_id(request)
    await call(gw.host.close_session, sid)
    info = await call(gw.host.get, sid)
    return json_response(info_json(info))


@route("POST", "/v1/sessions/{id}/messages", "write")
async def send_message(gw: Gateway, request: Request) -> Response:
    sid = session_id(request)
    body = await json_body(request)
    text = body.get("text")
    if not isinstance(text, str):
        raise HttpError(422, "invalid_field", "'text' must be a string")
    key = idempotency_key(request)
    ack = await call(gw.host.send, sid, text, key=f"http:{key}" if key else None)
    return json_response(ack_json(ack), 201)


@route("POST", "/v1/sessions/{id}/goals", "write")
async def submit_goal(gw: Gateway, request: Request) -> Response:
    """Open a goal run: ``{"objective": ..., "budget": {"max_turns": N, ...}}``; 201 with
    the Ack (``seq`` of the objective's user message). ``Idempotency-Key`` makes a retry
    return the same Ack, also while the run goes on; another run in flight is 409."""
    sid = session_id(request)
    body = await json_body(request)
    objective = body.get("objective")
    if not isinstance(objective, str) or not objective.strip():
        raise HttpError(422, "invalid_field", "'objective' must be a non-empty string")
    budget = field(body, "budget", dict, {})
    problem = budget_problem(budget)
    if problem:
        raise HttpError(422, "invalid_field", problem)
    key = idempotency_key(request)
    try:
        ack = await call(
            gw.host.submit, sid, objective, budget=budget, key=f"http-goal:{key}" if key else None
        )
    except e.InvalidRequest as exc:
        if "already runs a goal" in str(exc):
            raise HttpError(409, "running", str(exc)) from None
        raise
    return json_response(ack_json(ack), 201)


@route("GET", "/v1/sessions/{id}/goals/wait", "read")
async def wait_goal(gw: Gateway, request: Request) -> Response:
    """The end of the session's latest goal run, waiting up to ``timeout`` seconds
    (default `WAIT_DEFAULT`, at most `WAIT_MAX`): ``{"state": "converged", "answer": ...}``,
    ``{"state": "stalled", "reason": ...}``, or ``{"state": "running"}`` if it has not
    ended by then (ask again). Read from the stream, so it answers for a run that ended
    before the call and across daemon restarts. 409 if the session has run no goal."""
    sid = session_id(request)
    timeout = float_param(request, "timeout", WAIT_DEFAULT, high=WAIT_MAX)
    await known(gw, sid)
    if gw.stopping:
        raise HttpError(503, "unavailable", "the gateway is stopping")
    ends = (Kind.CONVERGED, Kind.STALLED)
    with gw.hubs.waiting(sid, ends) as waiter:
        # Joined first, read second: an end stored meanwhile is in one or the other.
        events = await call(stream_history, gw.log, sid)
        start = next(
            (ev for ev in reversed(events) if ev.kind == Kind.SESSION_STARTED and ev.goal), None
        )
        if start is None:
            raise HttpError(409, "no_goal", f"session {sid!r} has run no goal")
        end = next((ev for ev in events if ev.seq > start.seq and ev.kind in ends), None)
        deadline = asyncio.get_running_loop().time() + timeout
        while end is None:
            hit = next((r for r in waiter.found if r.seq > start.seq), None)
            if hit is not None:
                end = hit.event()
                break
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0 or gw.stopping:
                return json_response({"state": "running", "goal": start.goal, "seq": start.seq})
            waiter.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter.changed.wait(), left)
    if end.kind == Kind.CONVERGED:
        return json_response(
            {"state": "converged", "answer": end.text, "goal": end.goal, "seq": end.seq}
        )
    reason = end.error or "stalled"
    return json_response({"state": "stalled", "reason": reason, "goal": end.goal, "seq": end.seq})


@route("POST", "/v1/sessions/{id}/interrupt", "write")
async def interrupt(gw: Gateway, request: Request) -> Response:
    sid = session_id(request)
    body = await json_body(request, required=False)
    reason = field(body, "reason", str, "interrupted")
    ack = await call(gw.host.interrupt, sid, reason=reason)
    return json_response(ack_json(ack))


@route("PATCH", "/v1/sessions/{id}/metadata", "write")
async def set_metadata(gw: Gateway, request: Request) -> Response:
    sid = session_id(request)
    changes = string_map(await json_body(request), "body", nulls=True)
    await known(gw, sid)
    ack = await call(gw.host.set_metadata, sid, changes)
    return json_response(ack_json(ack))


@route("GET", "/v1/sessions/{id}/approvals", "read")
async def approvals(gw: Gateway, request: Request) -> Response:
    """The session's actions waiting for a human's approval, oldest first."""
    sid = session_id(request)
    await known(gw, sid)
    waiting = await call(gw.host.pending, sid)
    return json_response(
        {
            "pending": [
                {"call": e.call, "action": e.action, "turn": e.turn, "input": e.input}
                for e in waiting
            ]
        }
    )


@route("POST", "/v1/sessions/{id}/approvals/{call}", "write")
async def decide(gw: Gateway, request: Request) -> Response:
    """Approve or reject a waiting action: ``{"decision": "approve"|"reject", "note": ...}``.
    Deciding again the same way answers ``duplicate: true``; a contrary or unknown
    decision is 422."""
    sid = session_id(request)
    raw = str(request.path_params["call"])
    if not raw.isdigit() or int(raw) <= 0:
        raise HttpError(400, "bad_call", f"a call is a positive integer, got {raw!r}")
    body = await json_body(request)
    decision = field(body, "decision", str, None)
    if decision not in ("approve", "reject"):
        raise HttpError(422, "invalid_field", '\'decision\' must be "approve" or "reject"')
    note = field(body, "note", str, "")
    await known(gw, sid)
    fn = gw.host.approve if decision == "approve" else gw.host.reject
    ack = await call(fn, sid, int(raw), note)
    return json_response(ack_json(ack))


@route("GET", "/v1/sessions/{id}/status", "read")
async def status(gw: Gateway, request: Request) -> Response:
    sid = session_id(request)
    await known(gw, sid)
    p = await call(gw.host.status, sid)
    return json_response(status_json(p))


@route("GET", "/v1/sessions/{id}/history", "read")
async def history(gw: Gateway, request: Request) -> Response:
    sid = session_id(request)
    after = int_param(request, "after", 0)
    limit = int_param(request, "limit", 100, low=1, high=MAX_LIMIT)
    await known(gw, sid)
    page = await call(gw.log.read, sid, after, limit)
    last = gw.log.last_seq(sid)
    # The stored JSON is passed through as it is, not decoded and encoded again.
    events = b",".join(r.payload for r in page)
    nxt = page[-1].seq if page else after
    body = b'{"events":[%s],"next_after":%d,"last_seq":%d}' % (events, nxt, last)
    return Response(body, media_type="application/json")


@route("POST", "/v1/sessions/{id}/seal", "write")
async def seal(gw: Gateway, request: Request) -> Response:
    sid = session_id(request)
    await known(gw, sid)
    r = await call(gw.host.seal, sid)
    return json_response(
        {"seq": r.seq, "first": r.first, "last": r.last, "root": r.root, "key_id": r.key_id}
    )


@route("POST", "/v1/sessions/{id}/verify", "write")
async def verify(gw: Gateway, request: Request) -> Response:
    sid = session_id(request)
    await known(gw, sid)
    r = await call(gw.host.verify, sid)
    return json_response({"ok": r.ok, "summary": r.summary, "seq": r.seq})


def _kinds(request: Request) -> list[str] | None:
    raw = request.query_params.get("kinds")
    if raw is None or not raw.strip():
        return None
    kinds = [k.strip() for k in raw.split(",") if k.strip()]
    for k in kinds:
        if len(k) > 100 or not k.isprintable():
            raise HttpError(422, "invalid_field", f"bad kind {k[:100]!r}")
    return kinds


def _resume_point(request: Request, param: str) -> int:
    last_id = request.headers.get("last-event-id")
    if last_id is not None and last_id.strip():
        try:
            value = int(last_id.strip())
        except ValueError:
            raise HttpError(400, "bad_id", "Last-Event-ID must be an integer") from None
        if value < 0:
            raise HttpError(400, "bad_id", "Last-Event-ID must not be negative")
        return value
    return int_param(request, param, 0)


def _sse_response(gw: Gateway, body: Callable[[Any], Coroutine[Any, Any, bool]]) -> Response:
    return SseResponse(body, ping=gw.ping, send_timeout=gw.send_timeout, direct=gw.direct)


@route("GET", "/v1/sessions/{id}/events", "read")
async def session_events(gw: Gateway, request: Request) -> Response:
    sid = session_id(request)
    after = _resume_point(request, "after")
    kinds = _kinds(request)
    await known(gw, sid)
    if gw.stopping:
        raise HttpError(503, "unavailable", "the gateway is stopping")
    return _sse_response(gw, functools.partial(gw.hubs.serve, sid, after, kinds))


@route("GET", "/v1/events", "admin")
async def all_events(gw: Gateway, request: Request) -> Response:
    after = _resume_point(request, "after")
    kinds = _kinds(request)
    if gw.stopping:
        raise HttpError(503, "unavailable", "the gateway is stopping")
    feed = _sse.Feed(asyncio.get_running_loop(), gw.buffer)
    sub = subscribe_all(gw.log, after, kinds)
    gw.attach(feed)
    _sse.start_pump(sub, feed, "sse-all")

    async def body(out: Any) -> bool:
        return await _sse.global_body(feed, out, gw.send_timeout)

    return _sse_response(gw, body)


@route("GET", "/metrics", "admin")
async def metrics(gw: Gateway, request: Request) -> Response:
    def collect() -> str:
        folder = gw.metrics.update(gw.log)
        states = session_states(gw.host.sessions())
        runtime = gw.host.runner_stats()
        return prometheus_text(folder, dict(runtime.counters), states, runtime=runtime)

    return Response(await call(collect), media_type=CONTENT_TYPE)


# -- unauthenticated: the page and the API description ----------------------------------


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
        Route(path, _endpoint(gw, access, fn), methods=[method], name=fn.__name__)
        for method, path, access, fn in ROUTES
    ]
    routes.append(Route("/openapi.json", openapi, methods=["GET"]))
    for path, (name, media) in PAGES.items():
        routes.append(Route(path, _static(name, media), methods=["GET"]))
    return Starlette(
        routes=routes,
        exception_handlers={404: _not_found, 405: _not_allowed, 500: _server_error},
    )
