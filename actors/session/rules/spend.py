"""What a session has spent, in money (pure): the operator's price table as the session's
stream recorded it, each turn priced under the table in force when it ended, and the raises
a human granted its budget.

The table is the operator's (read by ``vertebra serve --prices``), never the session's own
metadata: a session cannot make itself cheaper. It reaches the stream as a
``budget.prices`` event whenever the table a new incarnation is given differs from the
last one stored, so a replay prices every turn as it was priced then.

The table may also cap what each tenant's sessions spend together per period
(``tenants``: tenant name, or ``*`` for any other, to ``day`` and ``month`` caps). A
turn's cost counts in the periods of the time stored on the event that ended it (UTC), so a
replay places it where the live fold did.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import attrs

from spine import Event, Kind, Usage

#: The kinds of tokens priced, each per million: ``input`` (uncached input), ``output``
#: (output less reasoning), ``cache_read``, ``cache_write``, ``reasoning``. A kind a table
#: leaves out costs what ``input`` (cache) or ``output`` (reasoning) costs.
PRICE_KINDS = ("input", "output", "cache_read", "cache_write", "reasoning")
#: The model entry that prices every model the table does not name (and the tenant entry
#: that caps every tenant the table does not name).
ANY_MODEL = "*"
#: The periods a tenant's spending is capped over, each a calendar span in UTC.
PERIODS = ("day", "month")
#: What `Spend.paused_for` holds for a call paused on its goal run's own ``max_cost``.
GOAL_PAUSE = "goal"


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
    checked = {"version": version, "currency": str(currency), "models": out}
    if table.get("tenants") is not None:
        checked["tenants"] = check_tenant_caps(table["tenants"])
    return checked


def check_tenant_caps(caps: Any) -> dict[str, dict[str, float]]:
    """``{tenant: {period: cap}}`` as stored; `PriceError` naming the entry that is wrong."""
    if not isinstance(caps, Mapping):
        raise PriceError("tenants must be an object of tenant name to {day, month} caps")
    out: dict[str, dict[str, float]] = {}
    for tenant, row in caps.items():
        if not isinstance(row, Mapping) or not row:
            raise PriceError(f"caps of tenant {tenant!r} must be an object of day and/or month")
        for period, value in row.items():
            if period not in PERIODS:
                raise PriceError(f"tenant {tenant!r}: unknown period {period!r} (day, month)")
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise PriceError(
                    f"tenant {tenant!r}: {period} cap must be a non-negative number, got {value!r}"
                )
        out[str(tenant)] = {str(p): float(v) for p, v in row.items()}
    return out


def period_keys(when: datetime | float) -> dict[str, str]:
    """The keys of the periods ``when`` falls in (UTC): ``day:2026-12-02``, ``month:2026-12``."""
    t = datetime.fromtimestamp(when, UTC) if isinstance(when, int | float) else when
    t = t.astimezone(UTC)
    return {"day": f"day:{t:%Y-%m-%d}", "month": f"month:{t:%Y-%m}"}


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


def most(a: Usage | None, b: Usage | None) -> Usage | None:
    """The open turn's usage from its two accounts: ``a``, the sum its model calls'
    ``action.completed`` stored as each ended (every incarnation's), and ``b``, what its
    worker reports (this incarnation's calls, the one still streaming included). Taken per
    kind of token, the larger: each call counts once whether one account or both hold it,
    a call of a crashed incarnation counts from the log, an agent that reports no usage
    per call from its worker."""
    if a is None or a.is_zero():
        return b
    if b is None:
        return a
    return Usage(
        input_tokens=max(a.input_tokens, b.input_tokens),
        output_tokens=max(a.output_tokens, b.output_tokens),
        cache_read_tokens=max(a.cache_read_tokens, b.cache_read_tokens),
        cache_write_tokens=max(a.cache_write_tokens, b.cache_write_tokens),
        reasoning_tokens=max(a.reasoning_tokens, b.reasoning_tokens),
    )


@attrs.frozen(kw_only=True)
class Spend:
    """The session's spending as its stream says: the price table in force, the cost of
    the turns so far, and the raises of its budget; per period (`period_keys`), what its
    ended turns cost and the raises of its tenant's caps granted here."""

    version: str = ""
    currency: str = ""
    models: Mapping[str, Mapping[str, float]] = attrs.field(factory=dict)
    cost: float = 0.0
    raised: float = 0.0
    tenants: Mapping[str, Mapping[str, float]] = attrs.field(factory=dict)
    periods: Mapping[str, float] = attrs.field(factory=dict)
    period_raised: Mapping[str, float] = attrs.field(factory=dict)
    #: Model calls paused for a tenant's cap, by call: the period they wait on (or
    #: `GOAL_PAUSE`: the goal run's own money budget).
    paused_for: Mapping[int, str] = attrs.field(factory=dict)

    @property
    def priced(self) -> bool:
        return bool(self.models)

    def rates(self, model: str) -> Mapping[str, float] | None:
        return self.models.get(model) or self.models.get(ANY_MODEL)

    def caps(self, tenant: str) -> Mapping[str, float]:
        """The caps on ``tenant``'s spending per period (none for a session of no tenant)."""
        if not tenant:
            return {}
        return self.tenants.get(tenant) or self.tenants.get(ANY_MODEL) or {}

    def charged(self, usage: Usage | None, model: str, when: datetime | None = None) -> Spend:
        """With a turn's ``usage`` added (unpriced when the table has no rates for it), in
        the periods of ``when`` too when given."""
        rates = self.rates(model)
        if usage is None or rates is None:
            return self
        cost = price(usage, rates)
        periods = self.periods
        if when is not None:
            periods = dict(periods)
            for key in period_keys(when).values():
                periods[key] = periods.get(key, 0.0) + cost
        return attrs.evolve(self, cost=self.cost + cost, periods=periods)

    def turn_ended(self, ev: Event, model: str, used: Usage | None = None) -> Spend:
        """With the turn ``ev`` ends charged (``used``: the turn's usage as `turn_used`
        takes it; else the one ``ev`` carries), in the periods of the time stored on it
        (the shell stamps it before the append, so the live fold and a replay agree); no
        call of it waits on a cap any more."""
        out = self.charged(used if used is not None else ev.usage, model, ev.time)
        return attrs.evolve(out, paused_for={}) if out.paused_for else out

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "currency": self.currency,
            "cost": round(self.cost, 9),
            "raised": self.raised,
        }


@attrs.frozen(kw_only=True)
class TenantShare:
    """What a tenant's other sessions spent (``cost``) and were granted (``raised``) per
    period key (`period_keys`), as the shell read it for one model call."""

    cost: Mapping[str, float] = attrs.field(factory=dict)
    raised: Mapping[str, float] = attrs.field(factory=dict)


def prices_event(table: Mapping[str, Any]) -> Event:
    return Event(kind=Kind.PRICES, extra=dict(table))


def needs_prices(spend: Spend, table: Mapping[str, Any] | None) -> bool:
    """Whether ``table`` (the operator's, given to this incarnation) is not the one in force."""
    if not table:
        return False
    return (
        table.get("version") != spend.version
        or table.get("models") != spend.models
        or (table.get("tenants") or {}) != spend.tenants
    )


def folded_prices(spend: Spend, ev: Event) -> Spend:
    x = ev.extra
    models, tenants = x.get("models"), x.get("tenants")
    return attrs.evolve(
        spend,
        version=str(x.get("version", "")),
        currency=str(x.get("currency", "")),
        models={str(k): dict(v) for k, v in models.items()} if isinstance(models, Mapping) else {},
        tenants={str(k): dict(v) for k, v in tenants.items()}
        if isinstance(tenants, Mapping)
        else {},
    )


def raised_amount(ev: Event) -> float | None:
    """The amount a ``budget.raised`` grants (None: it does not say a number)."""
    try:
        return max(0.0, float(ev.extra.get("amount", 0.0)))
    except (TypeError, ValueError):
        return None


def folded_raise(spend: Spend, ev: Event) -> Spend:
    amount = raised_amount(ev)
    if amount is None:
        return spend
    period = ev.extra.get("period")
    if isinstance(period, str) and period:
        raised = dict(spend.period_raised)
        raised[period] = raised.get(period, 0.0) + amount
        return attrs.evolve(spend, period_raised=raised)
    return attrs.evolve(spend, raised=spend.raised + amount)


def folded_pause(spend: Spend, ev: Event) -> Spend:
    period = GOAL_PAUSE if ev.goal else ev.extra.get("period")
    if ev.reason != "budget" or not isinstance(period, str) or not period:
        return spend
    return attrs.evolve(spend, paused_for={**spend.paused_for, ev.call: period})
