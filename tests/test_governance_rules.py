"""Governance rules as values: the gate walks one ordered tuple (goal budgets included), the
order is the documented one, and a rule added to the tuple takes part in the session's
decisions."""

from __future__ import annotations

import attrs
import pytest

from actors.agents import governance as g
from actors.agents.governance import (
    Ask,
    Fault,
    GoalBudget,
    Policy,
    Requirement,
    Ruling,
    Spent,
    Verdict,
    rule,
)
from actors.session.rules import commands as c
from actors.testing import SessionKit
from spine import Kind

#: The documented order (docs/architecture.md, "Governance rules").
ORDER = (
    g.GoalWallTime,
    g.GoalTurns,
    g.GoalToolCalls,
    g.GoalTokens,
    g.GoalCost,
    g.CostBudget,
    g.TurnBudget,
    g.ToolCallBudget,
    g.TokenBudget,
    g.ModelCallsStopAtBudgets,
    g.ChildBudget,
    g.DepthBudget,
    g.Capabilities,
    g.EgressGuard,
    g.Trust,
    g.Approval,
)


def test_the_rules_are_frozen_values_in_the_documented_order() -> None:
    """RULES holds one frozen value per rule, in the order the docs give."""
    assert tuple(type(r) for r in g.RULES) == ORDER
    for r in g.RULES:
        assert attrs.has(type(r)) and type(r).__setattr__ is not object.__setattr__


NET = Requirement(capabilities=frozenset({"net"}))
RISKY = Requirement(trust="elevated", approval=True, capabilities=frozenset({"net"}))
OFF = {"approvals": False}
GOAL_SPENT = GoalBudget(
    limits={"max_turns": 1, "max_tokens": 10, "max_tool_calls": 1, "max_seconds": 5},
    spent=Spent(turns=2, tokens=10, tool_calls=1),
    elapsed=6.0,
)


@pytest.mark.parametrize(
    ("policy", "action", "need", "spent", "egress", "goal", "want"),
    [
        # The goal's wall time before its other budgets, and before the session's.
        (
            {"max_tokens": 0},
            "model",
            Requirement(),
            Spent(),
            False,
            GOAL_SPENT,
            Ruling(Verdict.REJECT, Fault.BUDGET_EXCEEDED, "goal wall time of 5s"),
        ),
        # A goal's turns before its tokens (model), its tool calls before its tokens (tools).
        (
            {},
            "model",
            Requirement(),
            Spent(),
            False,
            attrs.evolve(GOAL_SPENT, elapsed=None),
            Ruling(Verdict.REJECT, Fault.BUDGET_EXCEEDED, "goal turns (1)"),
        ),
        (
            {},
            "calculator",
            Requirement(),
            Spent(),
            False,
            attrs.evolve(GOAL_SPENT, elapsed=None),
            Ruling(Verdict.REJECT, Fault.BUDGET_EXCEEDED, "goal tool calls"),
        ),
        # The goal's money before the session's: it pauses a model call (approvals on)...
        (
            {"max_cost": 1.0},
            "model",
            Requirement(),
            Spent(cost=5.0, reserve=2.0),
            False,
            GoalBudget(limits={"max_cost": 4.0}, spent=Spent(cost=3.0, raised=0.5)),
            Ruling(
                Verdict.PENDING,
                Fault.BUDGET_EXCEEDED,
                "goal cost budget 4.5: spent 3, the call may cost 2",
            ),
        ),
        # ... refuses it without approvals, and leaves tool calls to the rules after.
        (
            OFF,
            "model",
            Requirement(),
            Spent(reserve=2.0),
            False,
            GoalBudget(limits={"max_cost": 1.0}, spent=Spent(cost=0.0)),
            Ruling(
                Verdict.REJECT,
                Fault.BUDGET_EXCEEDED,
                "goal cost budget 1: spent 0, the call may cost 2",
            ),
        ),
        (
            {},
            "calculator",
            Requirement(),
            Spent(),
            False,
            GoalBudget(limits={"max_cost": 1.0}, spent=Spent(cost=9.0)),
            Ruling(Verdict.ADMIT),
        ),
        # The session's budgets before capabilities, egress, trust and approval.
        (
            {"max_tool_calls": 0, "capabilities": frozenset()},
            "http_get",
            RISKY,
            Spent(),
            True,
            None,
            Ruling(Verdict.REJECT, Fault.BUDGET_EXCEEDED),
        ),
        # A model call within budgets is admitted whatever it would need.
        (
            {"capabilities": frozenset(), **OFF},
            "model",
            RISKY,
            Spent(),
            True,
            None,
            Ruling(Verdict.ADMIT),
        ),
        # Fan-out budgets before capabilities.
        (
            {"max_depth": 0, "capabilities": frozenset()},
            "spawn",
            NET,
            Spent(),
            False,
            None,
            Ruling(Verdict.REJECT, Fault.BUDGET_EXCEEDED),
        ),
        # Capabilities before the egress guard.
        (
            {"capabilities": frozenset()},
            "http_get",
            NET,
            Spent(),
            True,
            None,
            Ruling(Verdict.REJECT, Fault.CAPABILITY_DENIED),
        ),
        # The egress guard before trust and approval (nobody is asked about a refused fetch).
        (
            {},
            "http_get",
            RISKY,
            Spent(),
            True,
            None,
            Ruling(Verdict.REJECT, Fault.EGRESS_REFUSED),
        ),
        # Trust before approval.
        (
            OFF,
            "http_get",
            RISKY,
            Spent(),
            False,
            None,
            Ruling(Verdict.REJECT, Fault.TRUST_TOO_LOW),
        ),
        (
            OFF,
            "http_get",
            Requirement(approval=True),
            Spent(),
            False,
            None,
            Ruling(Verdict.REJECT, Fault.NEEDS_APPROVAL),
        ),
        ({}, "http_get", RISKY, Spent(), False, None, Ruling(Verdict.PENDING)),
        ({}, "calculator", Requirement(), Spent(), False, None, Ruling(Verdict.ADMIT)),
    ],
)
def test_when_several_rules_would_refuse_the_earliest_in_the_tuple_decides(
    policy: dict[str, object],
    action: str,
    need: Requirement,
    spent: Spent,
    egress: bool,
    goal: GoalBudget | None,
    want: Ruling,
) -> None:
    """Each row sets off two or more rules; the ruling is the one earliest in RULES."""
    ask = Ask(
        policy=Policy(**policy),  # type: ignore[arg-type]
        action=action,
        need=need,
        spent=spent,
        egress_refused=egress,
        goal=goal,
    )
    assert rule(ask) == want


@attrs.frozen
class NoCalculator:
    """A rule of the test's own: the calculator waits for a human."""

    def check(self, ask: Ask) -> Ruling | None:
        return Ruling(Verdict.PENDING) if ask.action == "calculator" else None


def test_a_rule_appended_to_the_tuple_takes_part_in_the_sessions_decisions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a rule value appended to RULES, the session's gate holds the calculator for
    approval (action.pending) where it admitted it before, and admits other tools."""
    kit = SessionKit()
    kit.send("go")
    turn = kit.state.running.turn  # type: ignore[union-attr]
    before = kit.run(c.Govern(turn=turn, action="calculator", tool_use_id="a", input="{}"))
    assert before.kinds == [Kind.ACTION_ADMITTED, Kind.ACTION_STARTED]
    monkeypatch.setattr(g, "RULES", (*g.RULES, NoCalculator()))
    held = kit.run(c.Govern(turn=turn, action="calculator", tool_use_id="b", input="{}"))
    assert held.kinds == [Kind.ACTION_PENDING]
    other = kit.run(c.Govern(turn=turn, action="clock", tool_use_id="c", input="{}"))
    assert other.kinds == [Kind.ACTION_ADMITTED, Kind.ACTION_STARTED]


def test_an_earlier_rule_still_decides_before_an_appended_one() -> None:
    """An appended rule is asked only when every rule before it left the action alone."""
    ask = Ask(policy=Policy(max_tool_calls=0), action="calculator", spent=Spent(tool_calls=1))
    extended = (*g.RULES, NoCalculator())
    assert rule(ask, extended) == Ruling(Verdict.REJECT, Fault.BUDGET_EXCEEDED)
    assert rule(attrs.evolve(ask, policy=Policy()), extended) == Ruling(Verdict.PENDING)
