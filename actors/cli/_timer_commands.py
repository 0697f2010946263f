"""The commands for time and money in a session: timers and schedules (``timers``,
``schedule``, ``unschedule``) and what it spent against its budget (``budget``)."""

from __future__ import annotations

import argparse
import json
import re
from datetime import datetime
from typing import Any

from ._access import add_json, attach, open_spine, session_id, unknown_session
from ._daemon import EXIT_USAGE, CliError
from ._format import json_line
from ._output import Out
from ._parser import positive
from ._session_commands import decide_args

_AFTER = re.compile(r"^\+(\d+(?:\.\d+)?)([smhd]?)$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def when(text: str) -> dict[str, Any]:
    """``+90``, ``+10m``, ``+2h``: after; an ISO time (with its offset): at; anything
    else: a five-field cron expression."""
    m = _AFTER.match(text.strip())
    if m:
        return {"after": float(m.group(1)) * _UNIT[m.group(2)]}
    if re.match(r"^\d{4}-\d\d-\d\d[T ]", text.strip()):
        try:
            at = datetime.fromisoformat(text.strip())
        except ValueError as exc:
            raise CliError(f"WHEN {text!r} is not an ISO time: {exc}", EXIT_USAGE) from None
        if at.tzinfo is None:
            raise CliError(f"WHEN {text!r} needs its UTC offset (e.g. +02:00 or Z)", EXIT_USAGE)
        return {"at": at.timestamp()}
    return {"cron": text}


def approve_args(p: argparse.ArgumentParser) -> None:
    decide_args(p)
    p.add_argument(
        "--raise",
        dest="raise_by",
        type=float,
        default=0.0,
        metavar="AMOUNT",
        help="raise the session's cost budget by AMOUNT (a call paused for it)",
    )
    p.add_argument(
        "--answer",
        type=_answer,
        default=None,
        metavar="JSON",
        help="answer a server's question (action elicitation) with these fields, as a JSON "
        'object (e.g. \'{"color": "red"}\'); reject declines it',
    )


def _answer(text: str) -> dict[str, Any]:
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise argparse.ArgumentTypeError("an answer is a JSON object of the asked fields")
    return obj


def schedule_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    p.add_argument(
        "when",
        metavar="WHEN",
        help="a cron expression ('0 9 * * 1-5'), +SECONDS or +10m/+2h/+1d, or an ISO time",
    )
    p.add_argument(
        "text", metavar="TEXT", help="the message each firing delivers (with --goal: the objective)"
    )
    p.add_argument("--tz", default="", help="the cron expression's time zone (default UTC)")
    p.add_argument("--id", default=None, dest="timer_id", help="the timer's id (replaces one)")
    p.add_argument(
        "--missed",
        choices=("fire_once", "skip"),
        default="fire_once",
        help="firings missed while the daemon was down: one late firing, or none",
    )
    p.add_argument(
        "--grace", type=float, default=60.0, metavar="S", help="seconds late still on time"
    )
    p.add_argument(
        "--goal", action="store_true", help="each firing opens a goal run, TEXT its objective"
    )
    for name in ("max-turns", "max-tokens", "max-tool-calls", "max-seconds"):
        p.add_argument(f"--{name}", type=int, metavar="N", help=f"with --goal, budget: {name[4:]}")
    p.add_argument("--max-cost", type=positive, metavar="AMOUNT", help="with --goal, budget: money")
    add_json(p)


def schedule(args: argparse.Namespace, out: Out) -> int:
    from ..errors import InvalidRequest

    sid = session_id(args.session)
    spec = when(args.when)
    budget = {
        k.replace("-", "_"): v
        for k in ("max-turns", "max-tokens", "max-tool-calls", "max-seconds", "max-cost")
        if (v := getattr(args, k.replace("-", "_"))) is not None
    }
    with attach(args) as host:
        try:
            tid = host.set_timer(
                sid,
                args.text,
                tz=args.tz,
                policy=args.missed,
                grace=args.grace,
                timer_id=args.timer_id,
                goal=args.goal,
                budget=budget,
                **spec,
            )
        except InvalidRequest as exc:
            raise CliError(str(exc), EXIT_USAGE) from None
        row = next((t for t in host.timers(sid) if t["id"] == tid), None)
    due = row["dueAt"] if row else "?"
    if args.json:
        out.line(json_line({"timer": tid, "dueAt": due}))
    else:
        out.line(f"timer {tid} set: next at {due}")
    return 0


def unschedule_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    p.add_argument("timer", metavar="TIMER", help="the timer's id (as `vertebra timers` shows)")
    add_json(p)


def unschedule(args: argparse.Namespace, out: Out) -> int:
    sid = session_id(args.session)
    with attach(args) as host:
        ack = host.cancel_timer(sid, args.timer)
    if args.json:
        out.line(json_line({"timer": args.timer, "cancelled": not ack.consumed}))
    else:
        out.line(f"timer {args.timer} " + ("was not set" if ack.consumed else "cancelled"))
    return 0


def timers_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    add_json(p)


def timers(args: argparse.Namespace, out: Out) -> int:
    """The session's timers, read from the spine (no daemon needed)."""
    from ..host.timers import read_state

    sid = session_id(args.session)
    with open_spine(args) as log:
        if not log.last_seq(sid):
            raise unknown_session(sid)
        st = read_state(log, sid)
    from ..session.rules.timerbook import iso

    rows = sorted(st.timers.values(), key=lambda t: (t.due, t.id))
    for t in rows:
        if args.json:
            out.line(json_line({**t.as_dict(), "dueAt": iso(t.due)}))
        else:
            every = f"cron '{t.cron}' {t.tz or 'UTC'}" if t.cron else "once"
            goal = "goal run: " if t.goal else ""
            out.line(f"{t.id:<16} {iso(t.due)}  {every:<28} {goal}{t.text}")
    if not rows and not args.json:
        out.line("no timer is set")
    return 0


def budget_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", nargs="?", metavar="SESSION")
    p.add_argument(
        "--tenants", action="store_true", help="what each tenant's sessions spent (reads all)"
    )
    add_json(p)


def budget(args: argparse.Namespace, out: Out) -> int:
    """What the session spent under the operator's prices, its budget, and a pause."""
    from ..host.timers import read_state, spending_by_tenant, spending_of

    if args.tenants or not args.session:
        with open_spine(args) as log:
            rows = spending_by_tenant(log)
        for tenant, row in sorted(rows.items()):
            name = tenant or "(no tenant)"
            if args.json:
                out.line(json_line({"tenant": tenant, **row}))
            else:
                out.line(f"{name:<24} {row['cost']:.6g}  ({row['sessions']} sessions)" + _now(row))
        if not rows and not args.json:
            out.line("no priced spending yet (serve --prices FILE)")
        return 0
    sid = session_id(args.session)
    with open_spine(args) as log:
        if not log.last_seq(sid):
            raise unknown_session(sid)
        spent = spending_of(read_state(log, sid))
    if args.json:
        out.line(json_line(spent))
        return 0
    if not spent["version"]:
        out.line("no operator price table: spending is not priced (serve --prices FILE)")
        return 0
    limit = "none" if spent["budget"] is None else f"{spent['budget']:g}"
    money = f"{spent['cost']:.6g} {spent['currency']}".strip()
    out.line(f"spent {money} of budget {limit} (prices {spent['version']})")
    if spent["caps"]:
        caps = ", ".join(f"{p} {c:g}" for p, c in spent["caps"].items())
        out.line(f"tenant {spent['tenant']} capped per {caps} (vertebra budget --tenants)")
    for call in spent["paused"]:
        period = spent["pausedFor"].get(str(call))
        what = f"tenant {spent['tenant']}'s cap for {period}" if period else "the budget"
        out.line(f"paused for {what}: vertebra approve {sid} {call} --raise AMOUNT, or reject")
    return 0


def _now(row: dict[str, Any]) -> str:
    """The tenant's spending in the current day and month, against its caps."""
    import time

    from ..session.rules.spend import period_keys

    parts = []
    for period, key in period_keys(time.time()).items():
        cap = row["caps"].get(period)
        spent = row["periods"].get(key, 0.0)
        limit = "" if cap is None else f" of {cap + row['raised'].get(key, 0.0):g}"
        parts.append(f"this {period} {spent:.6g}{limit}")
    return "; " + ", ".join(parts)


def time_and_money(log: Any, sid: str) -> dict[str, Any]:
    """The session's timers and spending for its status (nothing when it has neither, or
    its stream does not decode: the projection says why)."""
    from spine import SpineError

    from ..host.timers import read_state, spending_of
    from ..session.rules.timerbook import iso

    try:
        st = read_state(log, sid)
    except SpineError:
        return {}
    out: dict[str, Any] = {}
    if st.timers:
        first = min(st.timers.values(), key=lambda t: t.due)
        out["timers"] = {"set": len(st.timers), "next": iso(first.due)}
    if st.spend.priced:
        s = spending_of(st)
        out["spend"] = {
            "cost": s["cost"],
            "budget": s["budget"],
            "paused": len(s["paused"]),
        }
    return out


def chat_decision(answer: str, budget: bool) -> tuple[bool, float]:
    """The chat's answer to an approval: (approve, raise the budget by). For a pause on
    the cost budget the answer is the amount (a positive number approves); otherwise y."""
    text = answer.strip().lower()
    if not budget:
        return text in ("y", "yes"), 0.0
    try:
        amount = float(text)
    except ValueError:
        return False, 0.0
    return (True, amount) if 0 < amount < float("inf") else (False, 0.0)


def _form_question(ev: Any) -> dict[str, Any] | None:
    q = (ev.extra or {}).get("elicitation") if ev.action == "elicitation" else None
    return q if isinstance(q, dict) and q.get("mode") != "url" else None


def chat_prompt(ev: Any, budget: bool) -> tuple[str, str]:
    """What the chat shows about a waiting action, and what it asks."""
    q = _form_question(ev)
    if q is not None:
        fields = json.dumps((q.get("requestedSchema") or {}).get("properties") or {})
        who = f"{q.get('server')}.{q.get('tool')}"
        what = f"question from {who} (action {ev.call}): {q.get('message')} {fields}"
        return what, "answer as a JSON object [decline] "
    what = ev.error if budget else f"{ev.action} {ev.input}"
    ask = "raise the budget by [stop] " if budget else "approve? [y/N] "
    return f"approval needed: action {ev.call}: {what}", ask


def chat_answer(ev: Any, answer: str, budget: bool) -> tuple[bool, float, dict[str, Any] | None]:
    """The chat's decision: (approve, raise the budget by, a question's content). A
    server's form question takes a JSON object (anything else goes on as no content and
    is refused, naming why, the question still waiting); an empty line declines."""
    if _form_question(ev) is None:
        approve, raise_by = chat_decision(answer, budget)
        return approve, raise_by, None
    text = answer.strip()
    if not text:
        return False, 0.0, None
    try:
        obj = json.loads(text)
    except ValueError:
        obj = None
    return True, 0.0, obj if isinstance(obj, dict) else None
