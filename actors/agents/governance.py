"""The governance gate (pure): every governed action is admitted, refused, or held for a
human's approval, from the session's policy, the action's requirements and the budgets
spent so far (`Policy` and `Spent` live in `governance_policy`).

The session's decider calls `gate`; the turn worker only reports what an action needs
(its `Requirement`, read off the tool registry) and waits for the verdict. The policy
lives in session metadata under ``governance.*``, so a replay shows what every decision
was made under.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Protocol

import attrs

from .governance_policy import (
    GOV_APPROVALS,
    GOV_CAPABILITIES,
    GOV_EGRESS_ALLOW,
    GOV_IN_DOUBT,
    GOV_MAX_CHILDREN,
    GOV_MAX_COST,
    GOV_MAX_DEPTH,
    GOV_MAX_TOKENS,
    GOV_MAX_TOOL_CALLS,
    GOV_MAX_TURNS,
    GOV_PRICE_INPUT,
    GOV_PRICE_OUTPUT,
    GOV_TRUST,
    TRUST_LEVELS,
    Policy,
    PolicyError,
    Spent,
)

__all__ = [
    "GOV_APPROVALS",
    "GOV_CAPABILITIES",
    "GOV_EGRESS_ALLOW",
    "GOV_IN_DOUBT",
    "GOV_MAX_CHILDREN",
    "GOV_MAX_COST",
    "GOV_MAX_DEPTH",
    "GOV_MAX_TOKENS",
    "GOV_MAX_TOOL_CALLS",
    "GOV_MAX_TURNS",
    "GOV_PRICE_INPUT",
    "GOV_PRICE_OUTPUT",
    "GOV_TRUST",
    "RULES",
    "TRUST_LEVELS",
    "Approval",
    "Ask",
    "Capabilities",
    "ChildBudget",
    "CostBudget",
    "DepthBudget",
    "EgressGuard",
    "Fault",
    "GoalBudget",
    "GoalCost",
    "GoalTokens",
    "GoalToolCalls",
    "GoalTurns",
    "GoalWallTime",
    "ModelCallsStopAtBudgets",
    "Policy",
    "PolicyError",
    "Requirement",
    "Rule",
    "Ruling",
    "Spent",
    "TokenBudget",
    "ToolCallBudget",
    "Trust",
    "TurnBudget",
    "Verdict",
    "gate",
    "rule",
]


class Fault(enum.StrEnum):
    """Why an action was refused (``fault`` on ``action.rejected``)."""

    CAPABILITY_DENIED = "capability_denied"
    BUDGET_EXCEEDED = "budget_exceeded"
    NEEDS_APPROVAL = "needs_approval"
    APPROVAL_REJECTED = "approval_rejected"
    TRUST_TOO_LOW = "trust_too_low"
    CANCELLED = "cancelled"
    #: The egress guard refuses the destination the action would reach.
    EGRESS_REFUSED = "egress_refused"
    #: The call ran before and its outcome is unknown (or it ran and its result is not
    #: stored): it is not run again.
    IN_DOUBT = "in_doubt"
    #: A human gave the in-doubt call's result by hand: it is not run, the result stands.
    RESOLVED = "resolved"
    #: The call asks to run with other arguments than those a human approved.
    APPROVAL_MISMATCH = "approval_mismatch"


@attrs.frozen(kw_only=True)
class Requirement:
    """What an action needs: the lowest trust it may run under, the capabilities it uses,
    whether a human must approve every call, and ``egress``: the argument that holds the
    URL the action connects to (the gate checks that destination with the egress guard
    before anything else, so nobody is asked about a fetch the guard would refuse)."""

    trust: str = "sandboxed"
    capabilities: frozenset[str] = frozenset()
    approval: bool = False
    egress: str = ""
    #: Declared by the tool: running it twice under one idempotency key has the effect of
    #: running it once, so a call in doubt after a crash is run again with the same key.
    idempotent: bool = False


class Verdict(enum.StrEnum):
    ADMIT = "admit"
    PENDING = "pending"
    REJECT = "reject"


def _rank(trust: str) -> int:
    return TRUST_LEVELS.index(trust) if trust in TRUST_LEVELS else len(TRUST_LEVELS)


@attrs.frozen(kw_only=True)
class GoalBudget:
    """A goal run's own budget (``max_turns``, ``max_tokens``, ``max_tool_calls``,
    ``max_seconds``, ``max_cost``) and what the run has used since it started (``spent``:
    its ``cost`` and the ``raised`` granted to its ``max_cost``). ``elapsed`` is the run's
    wall time in seconds, None when its start or the clock is unknown."""

    limits: Mapping[str, float] = attrs.field(factory=dict)
    spent: Spent = attrs.field(factory=Spent)
    elapsed: float | None = None


@attrs.frozen(kw_only=True)
class Ask:
    """Everything a rule may look at: one action (``model``, a tool's name, or ``spawn``),
    what it needs, the session's policy and spending, whether the egress guard refuses
    where it would connect, and the goal run's budget (None outside a goal run)."""

    policy: Policy
    action: str
    need: Requirement = Requirement()
    spent: Spent = attrs.field(factory=Spent)
    egress_refused: bool = False
    goal: GoalBudget | None = None


@attrs.frozen
class Ruling:
    """A rule's verdict; ``error`` names the budget that ran out when the rule knows it."""

    verdict: Verdict
    fault: Fault | None = None
    error: str = ""


class Rule(Protocol):
    """One governance rule: a ruling on the action, or None to leave it to the next."""

    def check(self, ask: Ask) -> Ruling | None: ...


def _spent_out(error: str = "") -> Ruling:
    return Ruling(Verdict.REJECT, Fault.BUDGET_EXCEEDED, error)


@attrs.frozen
class GoalWallTime:
    """A goal run refuses everything once it has run longer than ``max_seconds``."""

    def check(self, ask: Ask) -> Ruling | None:
        g = ask.goal
        limit = None if g is None else g.limits.get("max_seconds")
        if g is None or limit is None or g.elapsed is None or g.elapsed <= limit:
            return None
        return _spent_out(f"goal wall time of {limit}s")


@attrs.frozen
class GoalTurns:
    """A goal run's model calls stop after its ``max_turns``-th turn."""

    def check(self, ask: Ask) -> Ruling | None:
        g = ask.goal
        limit = None if g is None else g.limits.get("max_turns")
        if g is None or limit is None or ask.action != "model" or g.spent.turns <= limit:
            return None
        return _spent_out(f"goal turns ({limit})")


@attrs.frozen
class GoalToolCalls:
    """A goal run admits at most ``max_tool_calls`` tool calls (a model call is not one)."""

    def check(self, ask: Ask) -> Ruling | None:
        g = ask.goal
        limit = None if g is None else g.limits.get("max_tool_calls")
        if g is None or limit is None or ask.action == "model" or g.spent.tool_calls < limit:
            return None
        return _spent_out("goal tool calls")


@attrs.frozen
class GoalTokens:
    """A goal run refuses every action once it has used ``max_tokens``."""

    def check(self, ask: Ask) -> Ruling | None:
        g = ask.goal
        limit = None if g is None else g.limits.get("max_tokens")
        if g is None or limit is None or g.spent.tokens < limit:
            return None
        return _spent_out("goal tokens")


@attrs.frozen
class GoalCost:
    """A goal run's model call waits for a human (approvals on; else it is refused) when
    the run's spending since its start, with the call's reserved cost, would pass its
    ``max_cost`` plus the raises granted to it (no price table: no money budget). Only
    model calls spend money: a tool call is left to the rules after."""

    def check(self, ask: Ask) -> Ruling | None:
        g = ask.goal
        limit = None if g is None else g.limits.get("max_cost")
        if g is None or limit is None or g.spent.cost is None or ask.action != "model":
            return None
        cost, reserve, limit = g.spent.cost, ask.spent.reserve, limit + g.spent.raised
        if cost < limit and cost + reserve <= limit:
            return None
        why = f"goal cost budget {limit:g}: spent {cost:.6g}, the call may cost {reserve:.6g}"
        if ask.policy.approvals:
            return Ruling(Verdict.PENDING, Fault.BUDGET_EXCEEDED, why)
        return _spent_out(why)


@attrs.frozen
class CostBudget:
    """Nothing runs once the session's spending reaches ``governance.max_cost`` (plus the
    raises granted), or would pass it with the action's reserved cost (no price table: no
    cost budget).

    Priced by the operator's table, a model call over the budget waits for a human
    (approvals on): the session pauses and asks to raise the budget or stop. Priced by the
    session's own ``governance.price.*`` keys, it is refused."""

    def check(self, ask: Ask) -> Ruling | None:
        p, s = ask.policy, ask.spent
        if p.max_cost is None:
            return None
        cost = s.cost if s.cost is not None else p.cost(s)
        limit = p.max_cost + s.raised
        if cost is None or (cost < limit and (s.reserve <= 0 or cost + s.reserve <= limit)):
            return None
        why = f"cost budget {limit:g}: spent {cost:.6g}, the call may cost {s.reserve:.6g}"
        if s.cost is not None and ask.action == "model" and p.approvals:
            return Ruling(Verdict.PENDING, Fault.BUDGET_EXCEEDED, why)
        return _spent_out(why if s.cost is not None else "")


@attrs.frozen
class TurnBudget:
    """A model call is refused in a turn past ``governance.max_turns``."""

    def check(self, ask: Ask) -> Ruling | None:
        p = ask.policy
        if ask.action != "model" or p.max_turns is None or ask.spent.turns <= p.max_turns:
            return None
        return _spent_out()


@attrs.frozen
class ToolCallBudget:
    """A tool call (or a spawn) is refused once ``governance.max_tool_calls`` were admitted."""

    def check(self, ask: Ask) -> Ruling | None:
        p = ask.policy
        if ask.action == "model" or p.max_tool_calls is None:
            return None
        return _spent_out() if ask.spent.tool_calls >= p.max_tool_calls else None


@attrs.frozen
class TokenBudget:
    """Every action is refused once the session has used ``governance.max_tokens``."""

    def check(self, ask: Ask) -> Ruling | None:
        p = ask.policy
        if p.max_tokens is None or ask.spent.tokens < p.max_tokens:
            return None
        return _spent_out()


@attrs.frozen
class ModelCallsStopAtBudgets:
    """A model call within its budgets is admitted: the rules after this one (fan-out,
    capabilities, destination, trust, approval) govern tools and spawns only."""

    def check(self, ask: Ask) -> Ruling | None:
        return Ruling(Verdict.ADMIT) if ask.action == "model" else None


@attrs.frozen
class ChildBudget:
    """A spawn is refused once the session has spawned ``governance.max_children``."""

    def check(self, ask: Ask) -> Ruling | None:
        p = ask.policy
        if ask.action != "spawn" or p.max_children is None:
            return None
        return _spent_out() if ask.spent.children >= p.max_children else None


@attrs.frozen
class DepthBudget:
    """A session at delegation depth ``governance.max_depth`` spawns nothing."""

    def check(self, ask: Ask) -> Ruling | None:
        p = ask.policy
        if ask.action != "spawn" or p.max_depth is None:
            return None
        return _spent_out() if ask.spent.depth >= p.max_depth else None


@attrs.frozen
class Capabilities:
    """An action using a capability the session does not grant is refused."""

    def check(self, ask: Ask) -> Ruling | None:
        granted = ask.policy.capabilities
        if granted is None or ask.need.capabilities <= granted:
            return None
        return Ruling(Verdict.REJECT, Fault.CAPABILITY_DENIED)


@attrs.frozen
class EgressGuard:
    """A destination the egress guard refuses is refused before any human is asked."""

    def check(self, ask: Ask) -> Ruling | None:
        return Ruling(Verdict.REJECT, Fault.EGRESS_REFUSED) if ask.egress_refused else None


@attrs.frozen
class Trust:
    """An action needing more trust than the session has waits for a human (approvals
    on) or is refused (approvals off)."""

    def check(self, ask: Ask) -> Ruling | None:
        if _rank(ask.policy.trust) >= _rank(ask.need.trust):
            return None
        if ask.policy.approvals:
            return Ruling(Verdict.PENDING)
        return Ruling(Verdict.REJECT, Fault.TRUST_TOO_LOW)


@attrs.frozen
class Approval:
    """An action that always needs a human waits for one (approvals on) or is refused
    (approvals off)."""

    def check(self, ask: Ask) -> Ruling | None:
        if not ask.need.approval:
            return None
        if ask.policy.approvals:
            return Ruling(Verdict.PENDING)
        return Ruling(Verdict.REJECT, Fault.NEEDS_APPROVAL)


#: The rules in the order they are asked; the first ruling decides, and an action no rule
#: rules on is admitted. A goal run's own budget comes first (it counts from the run's
#: start), then the session's budgets (nothing more runs once one is spent), then a model
#: call is admitted; for tools and spawns the fan-out budgets, capabilities, the egress
#: guard (before any human is asked about a destination it would refuse), trust, approval.
RULES: tuple[Rule, ...] = (
    GoalWallTime(),
    GoalTurns(),
    GoalToolCalls(),
    GoalTokens(),
    GoalCost(),
    CostBudget(),
    TurnBudget(),
    ToolCallBudget(),
    TokenBudget(),
    ModelCallsStopAtBudgets(),
    ChildBudget(),
    DepthBudget(),
    Capabilities(),
    EgressGuard(),
    Trust(),
    Approval(),
)


def rule(ask: Ask, rules: tuple[Rule, ...] | None = None) -> Ruling:
    """The first ruling of ``rules`` (default: `RULES`, read at each call) on ``ask``;
    admit when none rules."""
    for r in RULES if rules is None else rules:
        ruling = r.check(ask)
        if ruling is not None:
            return ruling
    return Ruling(Verdict.ADMIT)


def gate(
    policy: Policy,
    action: str,
    need: Requirement,
    spent: Spent,
    *,
    egress_refused: bool = False,
) -> tuple[Verdict, Fault | None]:
    """The verdict of `RULES` on one action outside a goal run (see `rule`)."""
    r = rule(
        Ask(policy=policy, action=action, need=need, spent=spent, egress_refused=egress_refused)
    )
    return r.verdict, r.fault
