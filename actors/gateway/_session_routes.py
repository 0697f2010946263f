"""The routes of sessions and what goes into them: create, list, read and close a
session, send a message, run a goal and wait for its end, interrupt, change the
metadata, and decide the actions waiting for approval."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from spine import InvalidArgumentError, Kind, validate_session_id
from spine import history as stream_history

from .. import errors as e
from ..authority import Authority, refusal
from ..model_servers import ModelServers
from ..policy import BusyPolicy
from ..session.rules.goals import budget_problem
from ._gateway import Gateway, call, known
from ._replies import (
    HttpError,
    ack_json,
    info_json,
    json_response,
    pending_json,
    session_path,
)
from ._requests import (
    field,
    float_param,
    idempotency_key,
    json_body,
    session_id,
    string_map,
)
from ._tenants import TENANT_KEY
from ._tokens import Grant

#: How long ``GET .../goals/wait`` waits without a ``timeout``, and at most (seconds).
WAIT_DEFAULT = 30.0
WAIT_MAX = 300.0


async def list_sessions(gw: Gateway, request: Request) -> Response:
    g: Grant = request.state.grant
    infos = await call(gw.host.sessions)
    return json_response({"sessions": [info_json(i) for i in infos if _covers(g, i)]})


def _covers(g: Grant, info: Any) -> bool:
    return g.may_read(info.session_id, info.metadata.get(TENANT_KEY))


async def create_session(gw: Gateway, request: Request) -> Response:
    body = await json_body(request, required=False)
    if "id" in body and body["id"] is None:
        raise HttpError(422, "invalid_field", "'id' must be a string (leave it out for a fresh id)")
    sid = field(body, "id", str, None)
    metadata = string_map(field(body, "metadata", dict, {}), "metadata", nulls=False)
    if sid is not None:
        try:
            validate_session_id(sid)
        except (ValueError, InvalidArgumentError) as exc:
            raise HttpError(400, "bad_id", str(exc)) from None
    g: Grant = request.state.grant
    if g.tenant is not None:
        authorize(g, metadata, {}, gw.host.model_servers)
        sid = await _create_in_tenant(gw, g.tenant, sid, metadata)
    else:
        if not g.admin and (sid is None or not g.may_write(sid)):
            raise HttpError(403, "forbidden", "this token may only create its own sessions")
        authorize(g, metadata, {}, gw.host.model_servers)
        sid = await call(gw.host.create, sid, metadata, authority=_authority(g))
    info = await call(gw.host.get, sid)
    # A header is Latin-1 on the wire and an id need not be: percent-encode it (RFC 3986).
    return json_response(info_json(info), 201, {"Location": session_path(sid)})


async def within_quota(gw: Gateway, tenant: str) -> None:
    """429 if ``tenant`` holds its quota of live sessions."""
    limit = gw.quotas.sessions
    if limit is None:
        return
    infos = await call(gw.host.sessions)
    live = [
        i
        for i in infos
        if i.metadata.get(TENANT_KEY) == tenant and i.state not in ("closed", "failed")
    ]
    if len(live) >= limit:
        raise HttpError(
            429,
            "quota_exceeded",
            f"tenant {tenant!r} holds its {limit} live sessions; close one first",
        )


async def within_spend(gw: Gateway, tenant: str | None) -> None:
    """429 ``quota_exceeded`` if ``tenant``'s sessions spent what it may."""
    limit = gw.quotas.cost
    if tenant is None or limit is None:
        return
    spent = await call(gw.tenants.spent, tenant)
    if spent >= limit:
        raise HttpError(
            429,
            "quota_exceeded",
            f"tenant {tenant!r} spent {spent:.6g} of the {limit:g} it may spend; no turn "
            "starts until the operator raises its quota",
        )


async def within_turns(
    gw: Gateway, request: Request, sid: str, fn: Any, *args: Any, **kw: Any
) -> Any:
    """``fn(*args, **kw)`` (a request that may start a turn in ``sid``) within the token's
    tenant's quota of turns at once: 429 ``quota_exceeded`` if it holds them all."""
    g: Grant = request.state.grant
    await within_spend(gw, g.tenant)
    took = gw.tenants.admit_turn(g.tenant, sid) if g.tenant is not None else False
    if took is None:
        raise HttpError(
            429,
            "quota_exceeded",
            f"tenant {g.tenant!r} runs its {gw.quotas.turns} turns at once; "
            "send again when one has ended",
            {"Retry-After": "1"},
        )
    try:
        ack = await call(fn, *args, **kw)
    except BaseException:
        if took:
            gw.tenants.release(str(g.tenant), sid)
        raise
    if took and (ack.consumed or ack.duplicate):
        gw.tenants.release(str(g.tenant), sid)  # no turn of its own starts
    return ack


async def _create_in_tenant(
    gw: Gateway, tenant: str, sid: str | None, metadata: dict[str, Any]
) -> str:
    """Create a session of ``tenant`` within its quota of live sessions."""
    await within_quota(gw, tenant)
    # The tenant is the operator's key: the gateway sets it, on the tenant's behalf.
    sid = await call(
        gw.host.create, sid, {**metadata, TENANT_KEY: tenant}, authority=Authority.OPERATOR
    )
    gw.tenants.remember(sid, tenant)
    return str(sid)


async def get_session(gw: Gateway, request: Request) -> Response:
    # Read from the Runner's registry and the projections: a read never wakes a session.
    info = await call(gw.host.info, session_id(request))
    return json_response(info_json(info))


async def close_session(gw: Gateway, request: Request) -> Response:
    sid = session_id(request)
    await call(gw.host.close_session, sid)
    info = await call(gw.host.get, sid)
    return json_response(info_json(info))


async def send_message(gw: Gateway, request: Request) -> Response:
    sid = session_id(request)
    body = await json_body(request)
    text = body.get("text")
    if not isinstance(text, str):
        raise HttpError(422, "invalid_field", "'text' must be a string")
    mode = field(body, "mode", str, "")
    if mode and mode not in tuple(BusyPolicy):
        choices = ", ".join(p.value for p in BusyPolicy)
        raise HttpError(422, "invalid_field", f"'mode' must be one of {choices}")
    key = idempotency_key(request)
    try:
        ack = await within_turns(
            gw, request, sid, gw.host.send, sid, text, key=f"http:{key}" if key else None, mode=mode
        )
    except e.IdempotencyConflict:
        raise HttpError(
            422,
            "idempotency_conflict",
            f"Idempotency-Key {key!r} was already used for a different message in session "
            f"{sid!r}: nothing was stored (send a new request with a new key)",
        ) from None
    return json_response(ack_json(ack), 201)


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
    # JSON has one number type: 3.0 is the integer 3 (as JSON Schema reads it).
    budget = {
        k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in budget.items()
    }
    problem = budget_problem(budget)
    if problem:
        raise HttpError(422, "invalid_field", problem)
    key = idempotency_key(request)
    try:
        goal_key = f"http-goal:{key}" if key else None
        ack = await within_turns(
            gw, request, sid, gw.host.submit, sid, objective, budget=budget, key=goal_key
        )
    except e.InvalidRequest as exc:
        if "already runs a goal" in str(exc):
            raise HttpError(409, "running", str(exc)) from None
        raise
    return json_response(ack_json(ack), 201)


async def wait_goal(gw: Gateway, request: Request) -> Response:
    """The end of the session's latest goal run, waiting up to ``timeout`` seconds
    (default `WAIT_DEFAULT`, at most `WAIT_MAX`): ``{"state": "converged", "answer": ...}``,
    ``{"state": "stalled", "reason": ...}``, or ``{"state": "running"}`` if it has not
    ended by then (ask again); ``{"state": "interrupted", "reason": ...}`` at once, or
    then, if nothing drives it (`Host.interrupted`: resume it). Read from the stream, so
    it answers for a run that ended before the call and across daemon restarts. 409 if
    the session has run no goal."""
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
        # Asked at the start and the end of the wait only: a long poll that asked the
        # Runner every second would cost it a request per waiter per second.
        if end is None and (stuck := await call(gw.host.interrupted, sid)) is not None:
            return _interrupted(stuck)
        while end is None:
            hit = next((r for r in waiter.found if r.seq > start.seq), None)
            if hit is not None:
                end = hit.event()
                break
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0 or gw.stopping:
                if not gw.stopping and (stuck := await call(gw.host.interrupted, sid)):
                    return _interrupted(stuck)
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


def _interrupted(why: e.GoalInterrupted) -> Response:
    body = {"state": "interrupted", "reason": str(why), "goal": why.goal, "seq": why.seq}
    return json_response(body)


async def interrupt(gw: Gateway, request: Request) -> Response:
    sid = session_id(request)
    body = await json_body(request, required=False)
    reason = field(body, "reason", str, "interrupted")
    ack = await call(gw.host.interrupt, sid, reason=reason)
    return json_response(ack_json(ack))


async def set_metadata(gw: Gateway, request: Request) -> Response:
    sid = session_id(request)
    changes = string_map(await json_body(request), "body", nulls=True)
    await known(gw, sid)
    g: Grant = request.state.grant
    # The session checks as it stores (what it holds then is what counts; 403 naming the
    # key, `NotAuthorized`).
    ack = await call(gw.host.set_metadata, sid, changes, authority=_authority(g))
    return json_response(ack_json(ack))


def _authority(g: Grant) -> Authority:
    return Authority.OPERATOR if g.admin else Authority.SESSION


def authorize(
    g: Grant,
    changes: Mapping[str, str | None],
    metadata: Mapping[str, str],
    servers: ModelServers,
) -> None:
    """403 naming the first key ``g`` may not write (`actors.authority`; ``servers``: the
    model servers the operator lets sessions name)."""
    problem = refusal(changes, metadata, _authority(g), servers)
    if problem is not None:
        raise HttpError(403, "forbidden_key", problem)


async def approvals(gw: Gateway, request: Request) -> Response:
    """The session's actions waiting for a human's approval, oldest first."""
    sid = session_id(request)
    await known(gw, sid)
    waiting = await call(gw.host.pending, sid)
    return json_response({"pending": [pending_json(e) for e in waiting]})


async def decide(gw: Gateway, request: Request) -> Response:
    """Approve or reject a waiting action: ``{"decision": "approve"|"reject", "note": ...}``
    (``"raise": AMOUNT`` with an approval raises the cost budget a paused call waits on;
    ``"content": {...}`` with an approval answers a server's question), or answer a call
    in doubt by hand: ``{"decision": "resolve", "result": TEXT, "error": false}``.
    Deciding again the same way answers ``duplicate: true``; a contrary or unknown
    decision is 422."""
    sid = session_id(request)
    raw = str(request.path_params["call"])
    if not raw.isdigit() or int(raw) <= 0:
        raise HttpError(400, "bad_call", f"a call is a positive integer, got {raw!r}")
    body = await json_body(request)
    decision = field(body, "decision", str, None)
    if decision not in ("approve", "reject", "resolve"):
        why = '\'decision\' must be "approve", "reject" or "resolve"'
        raise HttpError(422, "invalid_field", why)
    note = field(body, "note", str, "")
    raise_by = field(body, "raise", (int, float), 0)
    if isinstance(raise_by, bool) or raise_by < 0 or ("raise" in body and decision != "approve"):
        raise HttpError(422, "invalid_field", "'raise' is a non-negative number, with approve")
    content = field(body, "content", dict, None)
    if content is not None and decision != "approve":
        raise HttpError(422, "invalid_field", "'content' answers a question, with approve")
    result, is_error = _given(body, decision)
    await known(gw, sid)
    if decision == "approve":
        ack = await call(
            gw.host.approve, sid, int(raw), note, raise_by=float(raise_by), content=content
        )
    elif decision == "resolve":
        ack = await call(gw.host.resolve, sid, int(raw), result, note, is_error=is_error)
    else:
        ack = await call(gw.host.reject, sid, int(raw), note)
    return json_response(ack_json(ack))


def _given(body: dict[str, Any], decision: str) -> tuple[str, bool]:
    """A result given by hand: required with resolve, refused with anything else."""
    result = field(body, "result", str, "")
    is_error = field(body, "error", bool, False)
    if decision == "resolve" and not result:
        raise HttpError(422, "invalid_field", "'result' is a non-empty string, with resolve")
    if decision != "resolve" and ("result" in body or "error" in body):
        raise HttpError(422, "invalid_field", "'result' and 'error' go with resolve only")
    return result, is_error
