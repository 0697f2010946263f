"""Reading a request: its JSON body (bounded), typed fields, query parameters, the session
id in its path and its ``Idempotency-Key``; each refusal is an `HttpError`."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request

from spine import InvalidArgumentError, validate_session_id

from ._replies import HttpError

#: Largest request body accepted (413 above it).
MAX_BODY = 256 * 1024


def session_id(request: Request) -> str:
    sid = str(request.path_params["id"])
    try:
        validate_session_id(sid)
    except (ValueError, InvalidArgumentError) as exc:
        raise HttpError(400, "bad_id", str(exc)) from None
    return sid


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
