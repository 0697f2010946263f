"""The fold of a session's timers and spending into its state (pure): one handler per
``timer.*`` and ``budget.*`` kind, each changing only the ``timers`` or ``spend`` field
(or the goal run, whose own money budget a raise may grow)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from spine import Event, Kind, Usage

from . import timerbook
from .context import calibrated
from .spend import Spend, folded_pause, folded_prices, folded_raise, most, raised_amount
from .timerbook import Timer

__all__ = ["TIMESPEND_FOLD", "Spend", "Timer", "model_call_ended", "turn_used"]

Handler = Callable[[Any, Event, int], dict[str, Any]]


def _timers(fold: Callable[[timerbook.Timers, Event], timerbook.Timers]) -> Handler:
    return lambda state, ev, seq: {"timers": fold(state.timers, ev)}


def _spend(fold: Callable[[Spend, Event], Spend]) -> Handler:
    return lambda state, ev, seq: {"spend": fold(state.spend, ev)}


def _raised(state: Any, ev: Event, seq: int) -> dict[str, Any]:
    """A raise of the goal run's own money budget grows that run's; any other, the
    session's spending (its budget, or a tenant's cap in a period)."""
    g, amount = state.goal, raised_amount(ev)
    if ev.goal and g is not None and g.id == ev.goal:
        return {} if amount is None else {"goal": attrs.evolve(g, raised=g.raised + amount)}
    return {"spend": folded_raise(state.spend, ev)}


def model_call_ended(state: Any, ev: Event) -> dict[str, Any]:
    """A model call's ``action.completed``: the context's calibration from what it
    measured, and its usage counted in the open turn, stored as the call ended (a crash
    before the turn's end loses none of it: the turn's close takes it from there)."""
    changes: dict[str, Any] = {}
    if ev.extra:
        changes["context"] = calibrated(state.context, ev)
    ot = state.open_turn
    if ev.usage is not None and ot is not None and ev.turn in (0, ot.turn):
        changes["open_turn"] = attrs.evolve(ot, usage=ot.usage + ev.usage)
    return changes


def turn_used(ot: Any, ev: Event) -> Usage | None:
    """What the turn ``ev`` ends used: its model calls' stored usage (``ot``, the open
    turn) or what ``ev`` carries, as `spend.most` takes them (each call once)."""
    return most(ot.usage if ot is not None else None, ev.usage)


TIMESPEND_FOLD: dict[str, Handler] = {
    **{kind: _timers(f) for kind, f in timerbook.FOLD.items()},
    Kind.PRICES: _spend(folded_prices),
    Kind.BUDGET_RAISED: _raised,
    Kind.PAUSED: _spend(folded_pause),
}
