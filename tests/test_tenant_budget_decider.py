"""A tenant's spending caps per period as tables: the operator's table caps a tenant per
day and per month, a turn counts in the periods of its stored time (so a replay agrees), a
model call that would pass a cap (the session's own share, the others' share the shell
read, the call's reserve) pauses and asks, and a raise counts for the tenant's period."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from actors.session.rules import commands as c
from actors.session.rules.spend import PriceError, TenantShare, check_prices, period_keys
from actors.session.rules.state import SessionState, fold
from actors.testing import Outcome, SessionKit
from spine import Event, Kind, Usage

#: One unit of money per token; acme may spend 10 a day, any other tenant 100 a month.
TABLE: dict[str, Any] = {
    "version": "t1",
    "currency": "EUR",
    "models": {"*": {"input": 1e6, "output": 1e6}},
    "tenants": {"acme": {"day": 10}, "*": {"month": 100}},
}
ACME = {"ore.model.name": "scripted", "tenant": "acme"}


def _kit(**md: str) -> SessionKit:
    kit = SessionKit(prices=TABLE)
    kit.create({**ACME, **md})
    return kit


def _now(kit: SessionKit) -> float:
    """The time of the session's last turn end (stamped by the shell), else the clock."""
    ends = [e.time for e in kit.events if e.kind == Kind.TURN_COMPLETED and e.time]
    return ends[-1].timestamp() if ends else time.time()


def _call(kit: SessionKit, others: TenantShare | None = None, now: float | None = None) -> Outcome:
    run = kit.state.running
    assert run is not None
    when = _now(kit) if now is None else now
    return kit.run(
        c.Govern(turn=run.turn, action="model", now=when, others=others or TenantShare())
    )


def _turn(kit: SessionKit, text: str, usage: Usage) -> None:
    kit.send(text)
    assert _call(kit).kinds == ["action.admitted"]
    kit.finish(usage=usage)


def _day(kit: SessionKit) -> str:
    return period_keys(_now(kit))["day"]


@pytest.mark.parametrize(
    ("tenants", "problem"),
    [
        ([], "tenants must be an object"),
        ({"acme": {}}, "caps of tenant 'acme'"),
        ({"acme": {"week": 1}}, "unknown period 'week'"),
        ({"acme": {"day": -1}}, "non-negative"),
        ({"acme": {"month": "5"}}, "non-negative"),
    ],
)
def test_tenant_caps_that_cannot_be_used_name_the_problem(tenants: Any, problem: str) -> None:
    with pytest.raises(PriceError, match=problem):
        check_prices({**TABLE, "tenants": tenants})


@pytest.mark.parametrize(
    ("tenant", "caps"),
    [("acme", {"day": 10.0}), ("beta", {"month": 100.0}), ("", {})],
)
def test_a_tenant_is_capped_by_its_entry_or_the_default(tenant: str, caps: dict) -> None:
    kit = SessionKit(prices=TABLE)
    kit.create({"ore.model.name": "scripted", **({"tenant": tenant} if tenant else {})})
    assert kit.state.stored.spend.caps(tenant) == caps


def test_periods_are_utc_calendar_days_and_months() -> None:
    t = datetime(2026, 12, 31, 23, 30, tzinfo=UTC)
    assert period_keys(t) == {"day": "day:2026-12-31", "month": "month:2026-12"}
    later = t + timedelta(hours=1)
    assert period_keys(later.timestamp()) == {"day": "day:2027-01-01", "month": "month:2027-01"}


@pytest.mark.parametrize(
    ("others", "kinds"),
    [
        (0.0, ["action.admitted"]),  # 4 of 10
        (5.0, ["action.admitted"]),  # 9 of 10
        (6.0, ["action.pending", "session.paused"]),  # 10: spent out
        (50.0, ["action.pending", "session.paused"]),
    ],
)
def test_the_tenants_share_and_the_sessions_own_count_against_the_day(
    others: float, kinds: list[str]
) -> None:
    kit = _kit()
    _turn(kit, "one", Usage(input_tokens=3, output_tokens=1))  # 4, today
    kit.send("two")
    out = _call(kit, TenantShare(cost={_day(kit): others}))
    assert out.kinds == kinds
    if len(kinds) == 2:
        pending, paused = out.events
        assert pending.fault == "budget_exceeded"
        assert "tenant acme day budget 10" in pending.error
        assert paused.reason == "budget" and paused.extra["period"] == _day(kit)
        assert kit.state.stored.spend.paused_for == {pending.call: _day(kit)}


def test_the_calls_reserve_counts_before_it_runs() -> None:
    kit = _kit(**{"ore.model.max_output_tokens": "2"})
    _turn(kit, "one", Usage(input_tokens=4))  # 4, and a call may cost 2
    kit.send("two")
    assert _call(kit, TenantShare(cost={_day(kit): 4.0})).kinds == ["action.admitted"]  # 10
    kit.finish()
    kit.send("three")
    out = _call(kit, TenantShare(cost={_day(kit): 4.5}))
    assert out.kinds == ["action.pending", "session.paused"]


def test_a_turn_counts_in_the_periods_of_its_stored_time_and_a_replay_agrees() -> None:
    yesterday = datetime.now(UTC) - timedelta(days=1)
    history = [
        Event(kind=Kind.LIFECYCLE, phase="created"),
        Event(kind=Kind.PROPERTIES, properties=ACME),
        Event(kind=Kind.PRICES, extra=check_prices(TABLE)),
        Event(kind=Kind.USER_MESSAGE, text="old"),
        Event(kind=Kind.TURN_STARTED, turn=1),
        Event(kind=Kind.TURN_COMPLETED, turn=1, usage=Usage(input_tokens=9), time=yesterday),
    ]
    kit = SessionKit(history, prices=TABLE)
    kit.restart()
    assert kit.state.stored.spend.periods[period_keys(yesterday)["day"]] == 9.0
    _turn(kit, "today", Usage(input_tokens=2))
    spend = kit.state.stored.spend
    assert spend.periods[_day(kit)] == 2.0 and spend.cost == 11.0  # yesterday's 9 not today
    replayed = fold(SessionState(session_id="s1"), kit.events)
    assert replayed.spend.periods == spend.periods


def test_a_raise_counts_for_the_tenants_period_and_the_same_turn_goes_on() -> None:
    kit = _kit()
    _turn(kit, "one", Usage(input_tokens=10))  # spent out today
    kit.send("two")
    call = _call(kit).events[0].call
    turn = kit.state.running.turn  # type: ignore[union-attr]
    out = kit.run(c.Decide(request_id="d", key="dk", call=call, approve=True, raise_by=5.0))
    assert out.kinds == ["budget.raised", "action.approval", "action.admitted"]
    assert out.events[0].extra == {"amount": 5.0, "period": _day(kit)}
    assert kit.state.running.turn == turn  # type: ignore[union-attr]
    st = kit.state.stored
    assert st.spend.period_raised == {_day(kit): 5.0} and st.spend.raised == 0.0
    kit.finish(usage=Usage(input_tokens=2))  # 12 of 15
    kit.send("three")
    assert _call(kit).kinds == ["action.admitted"]
    kit.finish()
    kit.send("four")
    # Another session's share (3) brings it to the raised cap (15).
    assert _call(kit, TenantShare(cost={_day(kit): 3.0})).kinds[-1] == "session.paused"


def test_the_others_raises_count_too() -> None:
    kit = _kit()
    _turn(kit, "one", Usage(input_tokens=10))
    kit.send("two")
    share = TenantShare(cost={_day(kit): 1.0}, raised={_day(kit): 2.0})
    assert _call(kit, share).kinds == ["action.admitted"]  # 11 of 12


def test_without_approvals_a_spent_cap_refuses() -> None:
    kit = _kit(**{"governance.approvals": "off"})
    _turn(kit, "one", Usage(input_tokens=10))
    kit.send("two")
    out = _call(kit)
    assert out.kinds == ["action.rejected"] and out.events[0].fault == "budget_exceeded"


def test_a_capped_turn_asks_for_its_first_call_and_others_do_not() -> None:
    capped = _kit()
    assert Kind.ACTION_ADMITTED not in capped.send("hello").kinds  # the worker asks
    free = SessionKit(prices={**TABLE, "tenants": {"acme": {"day": 1}}})
    free.create({"ore.model.name": "scripted", "tenant": "beta"})  # no cap for beta
    assert Kind.ACTION_ADMITTED in free.send("hello").kinds
