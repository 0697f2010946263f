"""The fold of a session's timers and spending into its state (pure): one handler per
``timer.*`` and ``budget.*`` kind, each changing only the ``timers`` or ``spend`` field
(or the goal run, whose own money budget a raise may grow)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from spine import Event, Kind

from . import timerbook
from .spend import Spend, folded_pause, folded_prices, folded_raise, raised_amount
from .timerbook import Timer

__all__ = ["TIMESPEND_FOLD", "Spend", "Timer"]

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


TIMESPEND_FOLD: dict[str, Handler] = {
    **{kind: _timers(f) for kind, f in timerbook.FOLD.items()},
    Kind.PRICES: _spend(folded_prices),
    Kind.BUDGET_RAISED: _raised,
    Kind.PAUSED: _spend(folded_pause),
}
