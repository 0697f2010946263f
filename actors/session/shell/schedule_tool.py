"""The model's ``schedule`` tool as the turn worker runs it: the arguments checked into the
`SetTimer` the session stores, keyed by the call (a resumed turn that runs the call again
sets it once), and what the model is told. With ``goal`` the firing opens a goal run on the
text as its objective, under the budget the model gives; a goal run's budgets only narrow
what the session's own (the operator's ``governance.*``) allow, so the model cannot spend
past them by scheduling."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...agents.tools import ToolError
from ..rules.commands import SetTimer
from ..rules.goals import budget_problem
from ..rules.timerbook import TimerError, iso, plan


def _goal_of(args: Mapping[str, Any]) -> tuple[bool, dict[str, Any]]:
    goal, budget = args.get("goal", False), args.get("budget")
    if not isinstance(goal, bool):
        raise ToolError("goal must be true or false")
    if budget is None:
        return goal, {}
    if not isinstance(budget, Mapping):
        raise ToolError('budget must be an object of limits, e.g. {"max_turns": 3}')
    if not goal:
        raise ToolError("a budget is a goal run's: set goal to true too")
    problem = budget_problem(budget)
    if problem:
        raise ToolError(problem)
    return goal, dict(budget)


def timer_of(
    turn: int, tool_use_id: str, args: Mapping[str, Any], now: float
) -> tuple[SetTimer, str]:
    """The timer the call asks for at ``now`` and the tool's answer; `ToolError` naming a
    field that cannot be used (the model is told, nothing is set)."""
    after = args.get("after_seconds")
    if after is not None and (isinstance(after, bool) or not isinstance(after, int | float)):
        raise ToolError("after_seconds must be a number")
    goal, budget = _goal_of(args)
    tid = f"m-{turn}-{tool_use_id}"[:128]
    spec: dict[str, Any] = {
        "text": args.get("text"),
        "after": None if after is None else float(after),
        "cron": str(args.get("cron") or ""),
        "tz": str(args.get("tz") or ""),
    }
    try:
        t = plan(timer_id=tid, now=now, goal=goal, budget=budget, **spec)
    except TimerError as exc:
        raise ToolError(str(exc)) from None
    cmd = SetTimer(request_id="", key=f"tool-{tid}", timer_id=tid, goal=goal, budget=budget, **spec)
    what = "goal run" if goal else "timer"
    return cmd, f"{what} {tid} set: first firing at {iso(t.due)}"
