"""Spend counted per model call, as tables: each call's usage is stored on its
``action.completed`` as the call ends and counts in its open turn, so a crash before the
turn's end loses none of it, and a turn's end that carries the totals too counts each call
once (live, on replay, and after a restart that resumes the turn)."""

from __future__ import annotations

from typing import Any

import pytest

from actors.agents.model_call import completed
from actors.session.rules import commands as c
from actors.session.rules.spend import most
from actors.session.rules.state import SessionState, fold
from actors.testing import SessionKit
from spine import Usage

MODEL = {"ore.model.name": "scripted"}
#: One unit of money per token in, two per token out.
V1 = {"version": "v1", "currency": "EUR", "models": {"*": {"input": 1e6, "output": 2e6}}}
U1 = Usage(input_tokens=4, output_tokens=2)  # costs 8
U2 = Usage(input_tokens=1, output_tokens=1)  # costs 3


def _kit(**md: str) -> SessionKit:
    kit = SessionKit(prices=V1)
    kit.create({**MODEL, **md})
    return kit


def _call(kit: SessionKit, used: Usage, so_far: Usage) -> None:
    """One model call admitted, then ended with ``used`` stored on its completion."""
    run = kit.state.running
    assert run is not None
    out = kit.run(c.Govern(turn=run.turn, action="model", now=1.0))
    assert out.kinds == ["action.admitted"], out.kinds
    kit.progress(events=[completed(out.events[0].call, "model", "", "", usage=used)], usage=so_far)


def _cost(kit: SessionKit) -> float:
    return kit.state.stored.spend.cost


def _replayed(kit: SessionKit) -> float:
    return fold(SessionState(session_id=kit.state.session_id), kit.events).spend.cost


@pytest.mark.parametrize(
    ("a", "b", "want"),
    [
        (None, None, None),
        (None, U1, U1),
        (Usage(), U1, U1),
        (U1, None, U1),
        (U1 + U2, U1, U1 + U2),  # the worker reports less: a crashed incarnation's calls
        (U1, U1 + U2, U1 + U2),  # the worker reports more: a call still streaming
        (U1, U1, U1),  # both accounts hold the same calls: counted once
    ],
)
def test_the_open_turns_usage_from_its_two_accounts(a: Any, b: Any, want: Any) -> None:
    assert most(a, b) == want


def test_each_call_counts_once_when_the_turns_end_carries_the_totals() -> None:
    kit = _kit()
    kit.send("go")
    _call(kit, U1, U1)
    _call(kit, U2, U1 + U2)
    assert kit.state.stored.open_turn.usage == U1 + U2  # type: ignore[union-attr]
    assert _cost(kit) == 0.0  # priced at the turn's end, in its period
    kit.finish(usage=U1 + U2)
    assert _cost(kit) == pytest.approx(11.0) and _replayed(kit) == pytest.approx(11.0)
    assert kit.state.stored.usage == U1 + U2


def test_a_crash_mid_turn_still_counts_the_calls_that_ended() -> None:
    """The turn the crash left open is closed on restart with what its calls stored."""
    kit = _kit()
    kit.send("go")
    _call(kit, U1, U1)
    _call(kit, U2, U1 + U2)
    assert kit.restart().kinds == ["turn.cancelled", "session.lifecycle"]
    assert kit.events[-2].usage == U1 + U2  # the worker's tally died with the process
    assert _cost(kit) == pytest.approx(11.0) and _replayed(kit) == pytest.approx(11.0)


def test_a_stream_stored_before_calls_carried_usage_is_priced_by_its_turns_end() -> None:
    kit = _kit()
    kit.send("go")
    _call(kit, Usage(), U1)  # no usage on the call's completion
    kit.finish(usage=U1)
    assert _cost(kit) == pytest.approx(8.0) and _replayed(kit) == pytest.approx(8.0)


def _paused_then_crashed() -> tuple[SessionKit, int]:
    """A first call that spent 11 of a budget of 10, the second paused to ask, then a
    crash: the paused turn stays open, its first call's usage in the log only."""
    kit = _kit(**{"governance.max_cost": "10"})
    kit.send("go")
    _call(kit, U1 + U2, U1 + U2)
    run = kit.state.running
    assert run is not None
    out = kit.run(c.Govern(turn=run.turn, action="model", now=1.0))
    assert out.kinds == ["action.pending", "session.paused"]
    assert kit.restart().events == ()  # waiting for a human: nothing closed
    return kit, out.events[0].call


def test_a_crash_during_a_budget_pause_keeps_the_turns_spend() -> None:
    """Raised after the crash, the same turn goes on with a new worker that knows only
    its own call: the turn's end counts the first call from the log, each call once."""
    kit, call = _paused_then_crashed()
    out = kit.run(c.Decide(request_id="d", key="dk", call=call, approve=True, raise_by=10.0))
    assert out.kinds == ["budget.raised", "action.approval", "action.admitted"]
    kit.progress(events=[completed(call, "model", "", "", usage=U2)], usage=U2)
    kit.finish(usage=U2)
    assert _cost(kit) == pytest.approx(14.0) and _replayed(kit) == pytest.approx(14.0)
    assert kit.state.stored.usage == U1 + U2 + U2


def test_after_a_crash_the_gate_counts_the_open_turns_calls() -> None:
    """The resumed turn's next model call is weighed with the first call's spend, not on
    the new worker's empty tally: past the budget plus the raise, it pauses again."""
    kit, call = _paused_then_crashed()
    kit.run(c.Decide(request_id="d", key="dk", call=call, approve=True, raise_by=0.5))
    kit.progress(events=[completed(call, "model", "", "", usage=Usage())], usage=Usage())
    run = kit.state.running
    assert run is not None
    out = kit.run(c.Govern(turn=run.turn, action="model", now=1.0))
    assert out.kinds == ["action.pending", "session.paused"]
    assert out.events[0].fault == "budget_exceeded"
