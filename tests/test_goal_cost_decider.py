"""A goal run's money budget as tables: ``max_cost`` counted from the run's start, priced
under the operator's table, reserved before every model call; a call that would pass it
pauses the session and asks, a raise grows that run's budget and the same turn goes on, a
refusal stalls the run naming the budget."""

from __future__ import annotations

from typing import Any

import pytest

from actors.agents.governance import Verdict
from actors.session.rules import commands as c
from actors.session.rules.goals import budget_problem
from actors.session.rules.state import SessionState, fold
from actors.testing import Outcome, SessionKit
from spine import Kind, Usage

#: One unit of money per token in, two per token out; a call may put out 1 token (costs 2).
PRICES = {"version": "v1", "currency": "EUR", "models": {"*": {"input": 1e6, "output": 2e6}}}
MODEL = {"ore.model.name": "scripted", "ore.model.max_output_tokens": "1"}


def _kit(prices: dict[str, Any] | None = PRICES, **md: str) -> SessionKit:
    kit = SessionKit(prices=prices)
    kit.create({**MODEL, **md})
    return kit


def _model_call(kit: SessionKit) -> Outcome:
    run = kit.state.running
    assert run is not None
    return kit.run(c.Govern(turn=run.turn, action="model", now=1.0))


def _goal(kit: SessionKit, max_cost: float) -> None:
    """A turn outside the run first (it costs 10, which the run's budget does not count),
    then a run of ``max_cost`` whose first model call is admitted (0 + 2 within)."""
    kit.send("before")
    assert _model_call(kit).kinds == ["action.admitted"]
    kit.finish(usage=Usage(input_tokens=4, output_tokens=3))
    kit.run(c.Submit(request_id="g", key="g", objective="loop", budget={"max_cost": max_cost}))
    assert _model_call(kit).kinds == ["action.admitted"]


def _paused(kit: SessionKit) -> int:
    """A run of 5 whose open turn spends 3, then 4: 3 + 2 is within, 4 + 2 passes 5."""
    _goal(kit, 5.0)
    kit.progress(usage=Usage(input_tokens=1, output_tokens=1))
    assert _model_call(kit).kinds == ["action.admitted"]  # 3 + 2 = 5: within
    kit.progress(usage=Usage(input_tokens=2, output_tokens=1))
    out = _model_call(kit)
    assert out.kinds == ["action.pending", "session.paused"]
    pending, paused = out.events
    assert pending.fault == "budget_exceeded" and "goal cost budget 5" in pending.error
    assert paused.reason == "budget" and paused.goal == "s1" and not paused.extra
    assert out.effects == ()  # the worker waits, its turn intact
    return pending.call


@pytest.mark.parametrize(
    ("budget", "problem"),
    [
        ({"max_cost": 0.25}, ""),
        ({"max_cost": 3}, ""),
        ({"max_cost": 0}, "max_cost must be a positive number"),
        ({"max_cost": -1.0}, "max_cost must be a positive number"),
        ({"max_cost": True}, "max_cost must be a positive number"),
        ({"max_cost": "1"}, "max_cost must be a positive number"),
        ({"max_cost": float("inf")}, "max_cost must be a positive number"),
        ({"max_turns": 1.5}, "max_turns must be a positive integer"),
    ],
)
def test_a_goal_money_budget_is_a_positive_number(budget: dict[str, Any], problem: str) -> None:
    found = budget_problem(budget)
    assert (problem in found) if problem else found == ""


def test_a_model_call_that_would_pass_the_runs_money_budget_pauses_and_asks() -> None:
    kit = _kit()
    _paused(kit)
    # The session's own spending counts all of it: the run's budget only what it spent.
    assert kit.state.stored.spend.raised == 0.0 and kit.state.stored.running_goal is not None


def test_a_raise_grows_the_runs_budget_and_the_same_turn_goes_on() -> None:
    kit = _kit()
    call = _paused(kit)
    turn = kit.state.running.turn  # type: ignore[union-attr]
    out = kit.run(c.Decide(request_id="d", key="dk", call=call, approve=True, raise_by=10.0))
    assert out.kinds == ["budget.raised", "action.approval", "action.admitted"]
    assert out.events[0].extra == {"amount": 10.0} and out.events[0].goal == "s1"
    (answer,) = out.effects
    assert isinstance(answer, c.AnswerWorker) and answer.verdict == Verdict.ADMIT
    assert answer.turn == turn and kit.state.running.turn == turn  # type: ignore[union-attr]
    st = kit.state.stored
    assert st.goal is not None and st.goal.raised == 10.0 and st.spend.raised == 0.0
    kit.progress(usage=Usage(input_tokens=5, output_tokens=2))  # spent 9 of 15
    assert _model_call(kit).kinds == ["action.admitted"]
    # A replay folds the same raise into the same run.
    replayed = fold(SessionState(session_id="s1"), kit.events)
    assert replayed.goal is not None and replayed.goal.raised == 10.0


def test_refusing_a_raise_stalls_the_run_on_its_money_budget() -> None:
    kit = _kit()
    call = _paused(kit)
    out = kit.run(c.Decide(request_id="d", key="dk", call=call, approve=False, note="enough"))
    assert out.kinds == ["action.approval", "action.rejected"]
    assert out.events[-1].fault == "budget_exceeded"
    (answer,) = out.effects
    assert isinstance(answer, c.AnswerWorker) and answer.fault == "approval_rejected"
    end = kit.finish(stop_reason="approval_rejected")
    assert end.kinds[-1] == Kind.STALLED
    assert end.events[-1].error == "budget exceeded: goal cost budget: not raised"
    assert kit.state.running is None  # no further turn of the run starts


def test_without_approvals_a_spent_run_budget_refuses_and_the_run_stalls() -> None:
    kit = _kit(**{"governance.approvals": "off"})
    _goal(kit, 3.0)
    kit.progress(usage=Usage(input_tokens=1, output_tokens=1))  # 3 + 2 passes 3
    out = _model_call(kit)
    assert out.kinds == ["action.rejected"] and "goal cost budget 3" in out.events[0].error
    end = kit.finish(stop_reason="budget_exceeded")
    assert end.kinds[-1] == Kind.STALLED and "goal cost budget 3" in end.events[-1].error


def test_tool_calls_spend_no_money_and_without_prices_there_is_no_money_budget() -> None:
    kit = _kit()
    _goal(kit, 2.0)
    kit.progress(usage=Usage(output_tokens=2))  # spent 4 of 2: only a model call waits
    run = kit.state.running
    assert run is not None
    tool = kit.run(c.Govern(turn=run.turn, action="calculator", tool_use_id="t1", now=1.0))
    assert tool.kinds[0] == "action.admitted"
    unpriced = _kit(None)
    unpriced.run(c.Submit(request_id="g", key="g", objective="x", budget={"max_cost": 0.001}))
    unpriced.progress(usage=Usage(input_tokens=1000, output_tokens=1000))
    assert _model_call(unpriced).kinds == ["action.admitted"]
