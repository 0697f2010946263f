"""The admin's routes over tokens: list them, mint one (shown once), revoke one."""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import Response

from ._gateway import Gateway, call
from ._replies import HttpError, json_response
from ._requests import field, json_body
from ._tokens import list_tokens, mint, parse_ttl, revoke_token

#: The longest lifetime a token may be given (200 years: "no expiry" is leaving it out).
MAX_TTL = 200 * 365.25 * 86400


async def list_all(gw: Gateway, request: Request) -> Response:
    """Every minted token without its secret: id, sessions, read-only, times, expired."""
    infos = await call(list_tokens, gw.tokens.data_dir)
    now = time.time()
    return json_response({"tokens": [i.as_json(now) for i in infos]})


def _ttl(raw: object) -> float | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise HttpError(422, "invalid_field", "'expires_in' must be seconds or text like 7d")
    if isinstance(raw, int | float):
        if not 0 < raw < float("inf"):
            raise HttpError(422, "invalid_field", "'expires_in' must be above 0 seconds")
        ttl = float(raw)
    else:
        try:
            ttl = parse_ttl(raw)
        except ValueError as exc:
            raise HttpError(422, "invalid_field", f"'expires_in': {exc}") from None
    if ttl > MAX_TTL:
        raise HttpError(422, "invalid_field", f"'expires_in' is at most {MAX_TTL:.0f} seconds")
    return ttl


async def create(gw: Gateway, request: Request) -> Response:
    """``{"sessions": [...] or "tenant": T, "read_only": false, "expires_in": "7d"}``: 201 with the
    token (the only time it is shown) and its stored entry."""
    body = await json_body(request)
    tenant = field(body, "tenant", str, None)
    sessions = field(body, "sessions", list, None)
    if (sessions is None) == (tenant is None):
        raise HttpError(422, "invalid_field", "give either 'sessions' or 'tenant'")
    if sessions is not None and (
        not sessions or not all(isinstance(s, str) and s for s in sessions)
    ):
        raise HttpError(422, "invalid_field", "'sessions' must be a non-empty list of ids")
    read_only = field(body, "read_only", bool, False)
    ttl = _ttl(body.get("expires_in"))
    try:
        info, token = await call(
            mint, gw.tokens.data_dir, sessions or (), read_only=read_only, ttl=ttl, tenant=tenant
        )
    except ValueError as exc:
        raise HttpError(422, "invalid_field", str(exc)) from None
    return json_response({**info.as_json(time.time()), "token": token}, 201)


async def revoke(gw: Gateway, request: Request) -> Response:
    """Revoke one token: refused from the next request on, open streams included."""
    token_id = str(request.path_params["token"])
    if not await call(revoke_token, gw.tokens.data_dir, token_id):
        raise HttpError(404, "not_found", f"no token {token_id!r}")
    return json_response({"id": token_id, "revoked": True})
