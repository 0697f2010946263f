"""The routes that shape a conversation: edit a past message, regenerate an answer, list
and switch the turn tree's branches, and fork a session at a seq. (A steer is a message
with ``"mode": "steer"``, `_session_routes.send_message`.)"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from spine import InvalidArgumentError, validate_session_id

from .. import errors as e
from ._gateway import Gateway, call
from ._replies import HttpError, ack_json, info_json, json_response, session_path
from ._requests import field, idempotency_key, json_body, session_id, string_map
from ._session_routes import authorize, within_quota, within_turns
from ._tenants import TENANT_KEY
from ._tokens import Grant


def _seq(body: dict[str, Any], name: str, *, required: bool) -> int | None:
    value = body.get(name)
    if value is None and not required:
        return None
    # JSON has one number type: 3.0 is the integer 3, as JSON Schema's "integer" says.
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise HttpError(422, "invalid_field", f"{name!r} must be a seq of at least 1")
    return value


def _key(request: Request, prefix: str) -> str | None:
    key = idempotency_key(request)
    return f"{prefix}:{key}" if key else None


async def edit(gw: Gateway, request: Request) -> Response:
    """``{"seq": N, "text": ...}``: a new branch from the user message at N."""
    sid = session_id(request)
    body = await json_body(request)
    seq = _seq(body, "seq", required=True)
    text = body.get("text")
    # Non-empty, as the schema says (and as a message's text is checked): what counts as
    # white space differs between JSON Schema's patterns and Python.
    if not isinstance(text, str) or not text:
        raise HttpError(422, "invalid_field", "'text' must be a non-empty string")
    key = _key(request, "http-edit")
    ack = await within_turns(gw, request, sid, gw.host.edit, sid, seq, text, key=key)
    return json_response(ack_json(ack), 201)


async def regenerate(gw: Gateway, request: Request) -> Response:
    """``{"seq": N}`` (optional: the latest user message on the active path)."""
    sid = session_id(request)
    body = await json_body(request, required=False)
    seq = _seq(body, "seq", required=False)
    key = _key(request, "http-regen")
    ack = await within_turns(gw, request, sid, gw.host.regenerate, sid, seq, key=key)
    return json_response(ack_json(ack), 201)


def branch_json(b: Any) -> dict[str, Any]:
    return {
        "leaf": b.leaf,
        "path": list(b.path),
        "fork": b.fork,
        "active": b.active,
        "text": b.text,
        "reply": b.reply,
    }


async def branches(gw: Gateway, request: Request) -> Response:
    listed = await call(gw.host.branches, session_id(request))
    return json_response({"branches": [branch_json(b) for b in listed]})


async def switch_branch(gw: Gateway, request: Request) -> Response:
    """``{"turn": N}``: the active path goes through the turn opened at seq N."""
    sid = session_id(request)
    body = await json_body(request)
    turn = _seq(body, "turn", required=True)
    ack = await call(gw.host.switch_branch, sid, turn, key=_key(request, "http-branch"))
    return json_response(ack_json(ack))


async def fork(gw: Gateway, request: Request) -> Response:
    """``{"at": N, "id": NEW, "metadata": {...}}`` (all optional): 201 with the new
    session, its ``Location`` the new session's path."""
    sid = session_id(request)
    body = await json_body(request, required=False)
    at = _seq(body, "at", required=False)
    new_id = field(body, "id", str, None)
    metadata = string_map(field(body, "metadata", dict, {}), "metadata", nulls=False)
    if new_id is not None:
        try:
            validate_session_id(new_id)
        except (ValueError, InvalidArgumentError) as exc:
            raise HttpError(400, "bad_id", str(exc)) from None
    g: Grant = request.state.grant
    # The fork's settings are the caller's say, as a session's own writes are.
    authorize(g, metadata, {}, gw.host.model_servers)
    if g.tenant is not None:
        await within_quota(gw, g.tenant)
        metadata = {**metadata, TENANT_KEY: g.tenant}
    elif not g.admin and (new_id is None or not g.may_write(new_id)):
        raise HttpError(403, "forbidden", "this token may only fork into its own sessions")
    try:
        child = await call(gw.host.fork, sid, at, new_id=new_id, metadata=metadata)
    except e.InvalidRequest as exc:
        if at is not None and "events, not" in str(exc):
            # A seq the session has not reached is its state's answer, not a bad field.
            raise HttpError(409, "beyond_end", str(exc)) from None
        raise
    if g.tenant is not None:
        gw.tenants.remember(child, g.tenant)
    info = await call(gw.host.get, child)
    return json_response(info_json(info), 201, {"Location": session_path(child)})
