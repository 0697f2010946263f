"""The fold of a session's timers and spending into its state (pure): one handler per
``timer.*`` and ``budget.*`` kind, each changing only the ``timers`` or ``spend`` field."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from spine import Event, Kind

from . import timerbook
from .spend import Spend, folded_pause, folded_prices, folded_raise
from .timerbook import Timer

__all__ = ["TIMESPEND_FOLD", "Spend", "Timer"]

Handler = Callable[[Any, Event, int], dict[str, Any]]


def _timers(fold: Callable[[timerbook.Timers, Event], timerbook.Timers]) -> Handler:
    return lambda state, ev, seq: {"timers": fold(state.timers, ev)}


def _spend(fold: Callable[[Spend, Event], Spend]) -> Handler:
    return lambda state, ev, seq: {"spend": fold(state.spend, ev)}


TIMESPEND_FOLD: dict[str, Handler] = {
    **{kind: _timers(f) for kind, f in timerbook.FOLD.items()},
    Kind.PRICES: _spend(folded_prices),
    Kind.BUDGET_RAISED: _spend(folded_raise),
    Kind.PAUSED: _spend(folded_pause),
}
