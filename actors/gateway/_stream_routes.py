"""The routes that read a session's stream: its status, a page of its history, sealing
and verifying it, and the SSE streams of one session and of every session."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from spine import subscribe_all

from . import _sse
from ._gateway import Gateway, call, known
from ._replies import HttpError, json_response, status_json
from ._requests import int_param, session_id
from ._tokens import Grant
from ._wire import SseResponse

#: Largest page of history one request returns.
MAX_LIMIT = 1000
#: Largest seq or position a resume point may name (``after``, ``Last-Event-ID``).
MAX_POSITION = 2**62


async def status(gw: Gateway, request: Request) -> Response:
    sid = session_id(request)
    await known(gw, sid)
    p = await call(gw.host.status, sid)
    return json_response(status_json(p))


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


async def seal(gw: Gateway, request: Request) -> Response:
    sid = session_id(request)
    await known(gw, sid)
    r = await call(gw.host.seal, sid)
    return json_response(
        {"seq": r.seq, "first": r.first, "last": r.last, "root": r.root, "key_id": r.key_id}
    )


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
        # The same range as ``after``, answered the same way.
        if not 0 <= value <= MAX_POSITION:
            raise HttpError(
                422, "invalid_field", f"Last-Event-ID must be between 0 and {MAX_POSITION}"
            )
        return value
    return int_param(request, param, 0, high=MAX_POSITION)


def _sse_response(
    gw: Gateway, grant: Grant, body: Callable[[Any], Coroutine[Any, Any, bool]]
) -> Response:
    # A revoked or expired token's stream ends at its next heartbeat.
    valid = functools.partial(gw.tokens.valid, grant)
    return SseResponse(
        body, ping=gw.ping, send_timeout=gw.send_timeout, direct=gw.direct, valid=valid
    )


async def session_events(gw: Gateway, request: Request) -> Response:
    sid = session_id(request)
    after = _resume_point(request, "after")
    kinds = _kinds(request)
    await known(gw, sid)
    if gw.stopping:
        raise HttpError(503, "unavailable", "the gateway is stopping")
    return _sse_response(
        gw, request.state.grant, functools.partial(gw.hubs.serve, sid, after, kinds)
    )


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

    return _sse_response(gw, request.state.grant, body)
