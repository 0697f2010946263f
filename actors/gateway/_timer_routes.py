"""The routes of time and money in a session: its timers (list, set, cancel) and what it
spent against its budget."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from ..host.timers import read_state, spending_of
from ..session.rules.goals import budget_problem
from ..session.rules.timerbook import POLICIES, iso
from ._gateway import Gateway, call, known
from ._replies import HttpError, ack_json, json_response
from ._requests import field, idempotency_key, json_body, session_id

_NUMBER = (int, float)


async def list_timers(gw: Gateway, request: Request) -> Response:
    """The session's timers, next due first."""
    sid = session_id(request)
    await known(gw, sid)
    st = await call(read_state, gw.log, sid)
    rows = sorted(st.timers.values(), key=lambda t: (t.due, t.id))
    return json_response({"timers": [{**t.as_dict(), "dueAt": iso(t.due)} for t in rows]})


def _seconds(body: dict[str, object], name: str) -> float | None:
    value = field(body, name, _NUMBER, None)
    if value is None:
        return None
    if isinstance(value, bool):
        raise HttpError(422, "invalid_field", f"{name!r} must be a number")
    return float(value)


def goal_budget(budget: dict[str, object]) -> dict[str, float]:
    """A goal run's budget as the body gives it, checked (422 naming what is wrong)."""
    # JSON has one number type: 3.0 is the integer 3 (as JSON Schema reads it).
    out = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in budget.items()}
    problem = budget_problem(out)
    if problem:
        raise HttpError(422, "invalid_field", problem)
    return out  # type: ignore[return-value]


async def set_timer(gw: Gateway, request: Request) -> Response:
    """``{"text", one of "at" | "after" | "cron", "tz", "policy", "grace", "id", "goal",
    "budget"}``."""
    sid = session_id(request)
    body = await json_body(request)
    text = field(body, "text", str, None)
    if not text:
        raise HttpError(422, "invalid_field", "'text' must be a non-empty string")
    policy = field(body, "policy", str, "fire_once")
    if policy not in POLICIES:
        raise HttpError(422, "invalid_field", f"'policy' must be one of {', '.join(POLICIES)}")
    tid = field(body, "id", str, None)
    grace = _seconds(body, "grace")
    goal = field(body, "goal", bool, False)
    budget = goal_budget(field(body, "budget", dict, {}))
    if budget and not goal:
        raise HttpError(422, "invalid_field", "'budget' is a goal run's: set 'goal' too")
    await known(gw, sid)
    tid = await call(
        gw.host.set_timer,
        sid,
        text,
        at=_seconds(body, "at"),
        after=_seconds(body, "after"),
        cron=field(body, "cron", str, ""),
        tz=field(body, "tz", str, ""),
        policy=policy,
        grace=60.0 if grace is None else grace,
        timer_id=tid,
        key=idempotency_key(request),
        goal=goal,
        budget=budget,
    )
    return json_response({"timer": tid}, status=201)


async def cancel_timer(gw: Gateway, request: Request) -> Response:
    sid = session_id(request)
    await known(gw, sid)
    tid = str(request.path_params["timer"])
    ack = await call(gw.host.cancel_timer, sid, tid, key=idempotency_key(request))
    return json_response(ack_json(ack))


async def budget(gw: Gateway, request: Request) -> Response:
    """What the session spent under the operator's prices, its budget, and the model
    calls paused on it (approve one with ``raise`` to go on)."""
    sid = session_id(request)
    await known(gw, sid)
    st = await call(read_state, gw.log, sid)
    return json_response(spending_of(st))
