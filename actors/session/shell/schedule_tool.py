"""The model's ``schedule`` tool as the turn worker runs it: the arguments checked into the
`SetTimer` the session stores, keyed by the call (a resumed turn that runs the call again
sets it once), and what the model is told."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...agents.tools import ToolError
from ..rules.commands import SetTimer
from ..rules.timerbook import TimerError, iso, plan


def timer_of(
    turn: int, tool_use_id: str, args: Mapping[str, Any], now: float
) -> tuple[SetTimer, str]:
    """The timer the call asks for at ``now`` and the tool's answer; `ToolError` naming a
    field that cannot be used (the model is told, nothing is set)."""
    after = args.get("after_seconds")
    if after is not None and (isinstance(after, bool) or not isinstance(after, int | float)):
        raise ToolError("after_seconds must be a number")
    tid = f"m-{turn}-{tool_use_id}"[:128]
    spec: dict[str, Any] = {
        "text": args.get("text"),
        "after": None if after is None else float(after),
        "cron": str(args.get("cron") or ""),
        "tz": str(args.get("tz") or ""),
    }
    try:
        t = plan(timer_id=tid, now=now, **spec)
    except TimerError as exc:
        raise ToolError(str(exc)) from None
    cmd = SetTimer(request_id="", key=f"tool-{tid}", timer_id=tid, **spec)
    return cmd, f"timer {tid} set: first firing at {iso(t.due)}"
