"""The gateway's replies: JSON responses, the error reply (`HttpError` is what a handler
raises to send one) and the JSON shapes of a session's info, an ack and its status."""

from __future__ import annotations

import urllib.parse
from typing import Any

import attrs
import orjson
from starlette.responses import Response

from projections import cache_hit_rate


class HttpError(Exception):
    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = headers


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status, headers, media_type="application/json")


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> Response:
    extra = dict(headers or {})
    if status in (429, 503):
        extra.setdefault("Retry-After", "1")
    if status == 401:
        extra["WWW-Authenticate"] = 'Bearer realm="vertebra"'
    return json_response({"error": code, "message": message}, status, extra or None)


def session_path(sid: str) -> str:
    """The session's address, its id percent-encoded (headers carry Latin-1 only)."""
    return f"/v1/sessions/{urllib.parse.quote(sid, safe='')}"


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


def input_json(text: str) -> Any:
    """A tool's arguments as the JSON value they are (``{}`` for none): every route that
    shows an action's ``input`` answers this one type, as the events on the stream do."""
    if not text:
        return {}
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def pending_json(entry: Any) -> dict[str, Any]:
    """An action waiting for approval (an ``action.pending`` event or a `PendingEntry`)."""
    return {
        "call": entry.call,
        "action": entry.action,
        "turn": entry.turn,
        "input": input_json(entry.input),
    }


def status_json(p: Any) -> dict[str, Any]:
    """The status projection with the seed's field names (camelCase), plus the cache
    hit rate the page shows (the seed's: cache-read tokens over input tokens, which
    already count the cached ones)."""
    out: dict[str, Any] = _plain(p)
    out["pending"] = [pending_json(x) for x in p.pending]
    out["cacheHitRate"] = cache_hit_rate(p.usage)
    out["context"] = p.context.report()
    return out
