"""Money at the gate (pure): what the budget rules read of a session's spending
(`spent_of`), and a tenant's spending caps per period, checked before a model call.

The operator's price table may cap what all of a tenant's sessions spend per day and per
month (`spend.check_tenant_caps`). One session's stream holds only its own share, so the
shell hands the decider what the tenant's other sessions have spent and been granted in the
current periods (`Govern.others`, read from the tenant ledger, which lags the log by at
most what was appended since it last caught up); the session's own share is its fold,
exact. A call that would pass a cap pauses the session and asks, like its own budget does;
a raise granted then counts for the whole tenant in that period.
"""

from __future__ import annotations

import attrs

from projections import MODEL_MAX_OUTPUT_TOKENS, MODEL_NAME
from spine import Usage

from ...agents.governance import Fault, Policy, PolicyError, Spent, Verdict
from .commands import Running
from .spend import PERIODS, TenantShare, most, period_keys, price
from .state import SessionState, depth_of

__all__ = [
    "TENANT_KEY",
    "Over",
    "TenantShare",
    "capped",
    "hold_of",
    "over_cap",
    "reserve_of",
    "spent_of",
    "tenant_of",
]

#: The metadata key naming a session's tenant (the operator's).
TENANT_KEY = "tenant"


@attrs.frozen(kw_only=True)
class Over:
    """A cap a model call would pass: the verdict (pending: ask a human; reject: approvals
    are off), the period it is over in, and why."""

    verdict: Verdict
    fault: Fault
    period: str
    why: str


def reserve_of(st: SessionState) -> float:
    """The most a model call may cost: its output cap at the output price (0 unknown)."""
    rates = st.spend.rates(st.metadata.get(MODEL_NAME, ""))
    cap = st.metadata.get(MODEL_MAX_OUTPUT_TOKENS, "")
    if rates is None or not cap.isdigit():
        return 0.0
    return price(Usage(output_tokens=int(cap)), rates)


def hold_of(st: SessionState) -> float:
    """What a model call of ``st``'s open turn holds of its tenant's caps until the turn
    ends: what the turn's calls spent so far and the call's reserve."""
    ot = st.open_turn
    rates = st.spend.rates(st.metadata.get(MODEL_NAME, ""))
    spent = price(ot.usage, rates) if ot is not None and ot.usage is not None and rates else 0.0
    return spent + reserve_of(st)


def open_usage(st: SessionState, run: Running) -> Usage | None:
    """The open turn's usage so far: its calls' stored usage and its worker's (`most`)."""
    return most(st.open_turn.usage if st.open_turn is not None else None, run.usage)


def spent_of(st: SessionState, run: Running, action: str) -> Spent:
    """What the session has spent with ``run``'s turn so far, as the budget rules read it
    (a model call's reserve included)."""
    turn = open_usage(st, run)
    used = st.usage + turn if turn is not None else st.usage
    spend = st.spend.charged(turn, st.metadata.get(MODEL_NAME, ""))
    return Spent(
        cost=spend.cost if spend.priced else None,
        raised=spend.raised,
        reserve=reserve_of(st) if action == "model" else 0.0,
        tokens=used.input_tokens + used.output_tokens,
        tool_calls=st.tool_calls,
        turns=run.turn,
        input_tokens=used.input_tokens,
        output_tokens=used.output_tokens,
        children=len(st.children),
        depth=depth_of(st.metadata),
    )


def tenant_of(st: SessionState) -> str:
    return st.metadata.get(TENANT_KEY, "")


def capped(st: SessionState) -> bool:
    """Whether the session's tenant has a cap on its spending in the operator's table."""
    return bool(st.spend.priced and st.spend.caps(tenant_of(st)))


def over_cap(st: SessionState, run: Running, others: TenantShare, now: float) -> Over | None:
    """The first of the tenant's caps a model call at ``now`` would pass (what the tenant
    spent in the period, this session's open turn included, plus the call's reserve), or
    None when it stays within every one."""
    tenant = tenant_of(st)
    caps = st.spend.caps(tenant)
    if not caps or not st.spend.priced:
        return None
    model = st.metadata.get(MODEL_NAME, "")
    open_turn = st.spend.charged(open_usage(st, run), model).cost - st.spend.cost
    reserve = reserve_of(st)
    keys = period_keys(now)
    for period in PERIODS:
        cap = caps.get(period)
        if cap is None:
            continue
        key = keys[period]
        spent = st.spend.periods.get(key, 0.0) + open_turn + others.cost.get(key, 0.0)
        limit = cap + st.spend.period_raised.get(key, 0.0) + others.raised.get(key, 0.0)
        if spent < limit and spent + reserve <= limit:
            continue
        why = (
            f"tenant {tenant} {period} budget {limit:g} ({key.split(':', 1)[1]}): "
            f"spent {spent:.6g}, the call may cost {reserve:.6g}"
        )
        return Over(verdict=_verdict(st), fault=Fault.BUDGET_EXCEEDED, period=key, why=why)
    return None


def _verdict(st: SessionState) -> Verdict:
    try:
        approvals = Policy.from_metadata(st.metadata).approvals
    except PolicyError:
        approvals = False
    return Verdict.PENDING if approvals else Verdict.REJECT
