"""Spending budgets as tables: the operator's prices recorded as events, each turn priced
as it was then, the gate reserving a call's most before it runs, and a budget that would
be passed pausing the session to ask (raise or stop) instead of failing."""

from __future__ import annotations

from typing import Any

import pytest

from actors.agents.governance import Verdict
from actors.session.rules import commands as c
from actors.session.rules.spend import PriceError, check_prices, price
from actors.session.rules.state import SessionState, fold
from actors.testing import Outcome, SessionKit
from spine import Kind, Usage

MODEL = {"ore.model.name": "scripted"}
#: One unit of money per token in, two per token out (per million: 1e6 and 2e6).
V1 = {"version": "v1", "currency": "EUR", "models": {"*": {"input": 1e6, "output": 2e6}}}
V2 = {"version": "v2", "currency": "EUR", "models": {"*": {"input": 10e6, "output": 20e6}}}


def _kit(prices: dict[str, Any] | None = V1, **md: str) -> SessionKit:
    kit = SessionKit(prices=prices)
    kit.create({**MODEL, **md})
    return kit


def _model_call(kit: SessionKit) -> Outcome:
    run = kit.state.running
    assert run is not None
    return kit.run(c.Govern(turn=run.turn, action="model", now=1.0))


def _turn(kit: SessionKit, text: str, usage: Usage) -> None:
    kit.send(text)
    assert _model_call(kit).kinds == ["action.admitted"]
    kit.finish(usage=usage)


def test_prices_per_kind_of_token() -> None:
    rates = {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75, "reasoning": 5.0}
    u = Usage(
        input_tokens=1_000_000,  # of which 200k read from cache, 100k written to it
        cache_read_tokens=200_000,
        cache_write_tokens=100_000,
        output_tokens=500_000,  # of which 100k reasoning
        reasoning_tokens=100_000,
    )
    assert price(u, rates) == pytest.approx(0.7 * 3 + 0.2 * 0.3 + 0.1 * 3.75 + 0.4 * 15 + 0.1 * 5)
    # A kind the table leaves out costs what input (cache) or output (reasoning) costs.
    assert price(u, {"input": 1.0, "output": 2.0}) == pytest.approx(1.0 + 0.5 * 2)


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ({"models": {"*": {"input": 1}}}, "version"),
        ({"version": "v", "models": {}}, "models"),
        ({"version": "v", "models": {"*": {"inputs": 1}}}, "unknown price 'inputs'"),
        ({"version": "v", "models": {"*": {"input": -1}}}, "non-negative"),
        ({"version": "v", "models": {"*": {"input": True}}}, "non-negative"),
    ],
)
def test_a_price_table_that_cannot_be_used_names_the_problem(
    table: dict[str, Any], problem: str
) -> None:
    with pytest.raises(PriceError, match=problem):
        check_prices(table)


def test_the_operators_table_is_recorded_once_and_again_when_it_changes() -> None:
    kit = _kit()
    assert kit.events[-1].kind == Kind.PRICES and kit.events[-1].extra["version"] == "v1"
    assert kit.restart().events == ()  # the same table: nothing new
    kit.prices = V2
    out = kit.restart()
    assert out.kinds == ["budget.prices"] and out.events[0].extra["version"] == "v2"
    kit.prices = None
    assert kit.restart().events == ()  # no table given: the stream's stays in force


def test_each_turn_is_priced_under_the_table_in_force_when_it_ended() -> None:
    kit = _kit()
    _turn(kit, "one", Usage(input_tokens=2, output_tokens=1))  # 2 + 2 = 4 under v1
    kit.prices = V2
    kit.restart()
    _turn(kit, "two", Usage(input_tokens=1, output_tokens=1))  # 10 + 20 = 30 under v2
    assert kit.state.stored.spend.cost == pytest.approx(34.0)
    replayed = fold(SessionState(session_id="s1"), kit.events)
    assert replayed.spend.cost == pytest.approx(34.0) and replayed.spend.version == "v2"


def test_a_model_call_that_would_pass_the_budget_pauses_and_asks() -> None:
    kit = _kit(**{"governance.max_cost": "10"})
    _turn(kit, "one", Usage(input_tokens=4, output_tokens=3))  # spent 10
    kit.send("two")
    out = _model_call(kit)
    assert out.kinds == ["action.pending", "session.paused"]
    pending, paused = out.events
    assert pending.fault == "budget_exceeded" and "cost budget 10" in pending.error
    assert paused.reason == "budget" and paused.call == pending.call
    assert out.effects == ()  # the worker waits: the turn is intact
    assert kit.state.stored.pending_actions[pending.call].action == "model"


def test_a_raise_continues_the_same_turn_and_counts_from_then() -> None:
    kit = _kit(**{"governance.max_cost": "10"})
    _turn(kit, "one", Usage(input_tokens=4, output_tokens=3))
    kit.send("two")
    call = _model_call(kit).events[0].call
    turn = kit.state.running.turn  # type: ignore[union-attr]
    out = kit.run(c.Decide(request_id="d", key="dk", call=call, approve=True, raise_by=5.0))
    assert out.kinds == ["budget.raised", "action.approval", "action.admitted"]
    assert out.events[0].extra["amount"] == 5.0
    (answer,) = out.effects
    assert isinstance(answer, c.AnswerWorker) and answer.verdict == Verdict.ADMIT
    assert answer.turn == turn and kit.state.running.turn == turn  # type: ignore[union-attr]
    kit.finish(usage=Usage(input_tokens=1, output_tokens=1))  # spent 13 of 15
    kit.send("three")
    assert _model_call(kit).kinds == ["action.admitted"]


def test_stopping_a_paused_call_refuses_it() -> None:
    kit = _kit(**{"governance.max_cost": "1"})
    _turn(kit, "one", Usage(input_tokens=1))
    kit.send("two")
    call = _model_call(kit).events[0].call
    out = kit.run(c.Decide(request_id="d", key="dk", call=call, approve=False, note="enough"))
    assert out.kinds == ["action.approval", "action.rejected"]
    assert kit.run(c.Decide(request_id="d", key="dk2", call=call, approve=True, raise_by=-1)).error


def test_the_gate_reserves_the_calls_most_from_its_output_cap() -> None:
    kit = _kit(**{"governance.max_cost": "10", "ore.model.max_output_tokens": "4"})
    _turn(kit, "one", Usage(input_tokens=2))  # spent 2; a call may cost 4 * 2 = 8
    kit.send("two")
    assert _model_call(kit).kinds == ["action.admitted"]  # 2 + 8 = 10: within
    kit.finish(usage=Usage(input_tokens=1))  # spent 3
    kit.send("three")
    assert _model_call(kit).kinds == ["action.pending", "session.paused"]  # 3 + 8 > 10


def test_without_approvals_or_without_operator_prices_a_spent_budget_refuses() -> None:
    kit = _kit(**{"governance.max_cost": "1", "governance.approvals": "off"})
    _turn(kit, "one", Usage(input_tokens=1))
    kit.send("two")
    out = _model_call(kit)
    assert out.kinds == ["action.rejected"] and out.events[0].fault == "budget_exceeded"
    legacy = _kit(
        None,
        **{
            "governance.max_cost": "1",
            "governance.price.input": "1000000",
        },
    )
    legacy.send("one")  # the turn's first call is admitted as the turn starts
    legacy.finish(usage=Usage(input_tokens=1))
    refused = legacy.send("two")
    assert "action.rejected" in refused.kinds and legacy.state.running is None


@pytest.mark.parametrize(
    ("answer", "budget", "decision"),
    [
        ("y", False, (True, 0.0)),
        ("", False, (False, 0.0)),
        ("2.5", True, (True, 2.5)),
        ("y", True, (False, 0.0)),  # a pause asks for an amount: anything else stops
        ("0", True, (False, 0.0)),
        ("-3", True, (False, 0.0)),
        ("inf", True, (False, 0.0)),
    ],
)
def test_the_chats_answer_to_an_approval_or_a_budget_pause(
    answer: str, budget: bool, decision: tuple[bool, float]
) -> None:
    from actors.cli._timer_commands import chat_decision

    assert chat_decision(answer, budget) == decision
