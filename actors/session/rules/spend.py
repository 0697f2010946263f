"""What a session has spent, in money (pure): the operator's price table as the session's
stream recorded it, each turn priced under the table in force when it ended, and the raises
a human granted its budget.

The table is the operator's (read by ``vertebra serve --prices``), never the session's own
metadata: a session cannot make itself cheaper. It reaches the stream as a
``budget.prices`` event whenever the table a new incarnation is given differs from the
last one stored, so a replay prices every turn as it was priced then.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from spine import Event, Kind, Usage

#: The kinds of tokens priced, each per million: ``input`` (uncached input), ``output``
#: (output less reasoning), ``cache_read``, ``cache_write``, ``reasoning``. A kind a table
#: leaves out costs what ``input`` (cache) or ``output`` (reasoning) costs.
PRICE_KINDS = ("input", "output", "cache_read", "cache_write", "reasoning")
#: The model entry that prices every model the table does not name.
ANY_MODEL = "*"


class PriceError(ValueError):
    """A price table cannot be used; the message names the entry and the value."""


def check_prices(table: Mapping[str, Any]) -> dict[str, Any]:
    """The table as stored: ``{"version": str, "currency": str, "models": {name: {kind:
    price per million tokens}}}``; `PriceError` naming what is wrong."""
    if not isinstance(table, Mapping):
        raise PriceError("a price table must be a JSON object")
    version = table.get("version")
    if not isinstance(version, str) or not version:
        raise PriceError("a price table needs a non-empty string version")
    models = table.get("models")
    if not isinstance(models, Mapping) or not models:
        raise PriceError("a price table needs models: an object of model name to prices")
    out: dict[str, dict[str, float]] = {}
    for name, prices in models.items():
        if not isinstance(prices, Mapping):
            raise PriceError(f"prices of model {name!r} must be an object")
        row: dict[str, float] = {}
        for kind, value in prices.items():
            if kind not in PRICE_KINDS:
                raise PriceError(
                    f"model {name!r}: unknown price {kind!r} ({', '.join(PRICE_KINDS)})"
                )
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not 0 <= value < 1e12
            ):
                raise PriceError(
                    f"model {name!r}: {kind} must be a non-negative number, got {value!r}"
                )
            row[kind] = float(value)
        out[str(name)] = row
    currency = table.get("currency", "")
    return {"version": version, "currency": str(currency), "models": out}


def price(usage: Usage, rates: Mapping[str, float]) -> float:
    """What ``usage`` costs under one model's ``rates`` (per million tokens)."""
    inp = rates.get("input", 0.0)
    out = rates.get("output", 0.0)
    cached = usage.cache_read_tokens + usage.cache_write_tokens
    reasoning = min(usage.reasoning_tokens, usage.output_tokens)
    total = (
        max(0, usage.input_tokens - cached) * inp
        + usage.cache_read_tokens * rates.get("cache_read", inp)
        + usage.cache_write_tokens * rates.get("cache_write", inp)
        + (usage.output_tokens - reasoning) * out
        + reasoning * rates.get("reasoning", out)
    )
    return total / 1e6


@attrs.frozen(kw_only=True)
class Spend:
    """The session's spending as its stream says: the price table in force, the cost of
    the turns so far, and the raises of its budget."""

    version: str = ""
    currency: str = ""
    models: Mapping[str, Mapping[str, float]] = attrs.field(factory=dict)
    cost: float = 0.0
    raised: float = 0.0

    @property
    def priced(self) -> bool:
        return bool(self.models)

    def rates(self, model: str) -> Mapping[str, float] | None:
        return self.models.get(model) or self.models.get(ANY_MODEL)

    def charged(self, usage: Usage | None, model: str) -> Spend:
        """With a turn's ``usage`` added (unpriced when the table has no rates for it)."""
        rates = self.rates(model)
        if usage is None or rates is None:
            return self
        return attrs.evolve(self, cost=self.cost + price(usage, rates))

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "currency": self.currency,
            "cost": round(self.cost, 9),
            "raised": self.raised,
        }


def prices_event(table: Mapping[str, Any]) -> Event:
    return Event(kind=Kind.PRICES, extra=dict(table))


def needs_prices(spend: Spend, table: Mapping[str, Any] | None) -> bool:
    """Whether ``table`` (the operator's, given to this incarnation) is not the one in force."""
    if not table:
        return False
    return table.get("version") != spend.version or table.get("models") != spend.models


def folded_prices(spend: Spend, ev: Event) -> Spend:
    x = ev.extra
    models = x.get("models")
    return attrs.evolve(
        spend,
        version=str(x.get("version", "")),
        currency=str(x.get("currency", "")),
        models={str(k): dict(v) for k, v in models.items()} if isinstance(models, Mapping) else {},
    )


def folded_raise(spend: Spend, ev: Event) -> Spend:
    try:
        amount = float(ev.extra.get("amount", 0.0))
    except (TypeError, ValueError):
        return spend
    return attrs.evolve(spend, raised=spend.raised + max(0.0, amount))
