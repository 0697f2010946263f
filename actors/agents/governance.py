"""The governance gate (pure): every governed action is admitted, refused, or held for a
human's approval, from the session's policy, the action's requirements and the budgets
spent so far.

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

from ..spec import per_metadata

__all__ = [
    "GOV_APPROVALS",
    "GOV_CAPABILITIES",
    "GOV_EGRESS_ALLOW",
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

#: The session's trust level: one of `TRUST_LEVELS`, lowest first (default ``standard``).
GOV_TRUST = "governance.trust"
#: Capabilities the session grants, comma-separated (unset: every capability).
GOV_CAPABILITIES = "governance.capabilities"
#: Budgets: tokens (input + output) over the session, admitted tool calls, turns.
GOV_MAX_TOKENS = "governance.max_tokens"
GOV_MAX_TOOL_CALLS = "governance.max_tool_calls"
GOV_MAX_TURNS = "governance.max_turns"
#: A cost budget in the price table's currency, enforced only with a price table:
#: ``governance.price.input`` and ``governance.price.output``, per million tokens.
GOV_MAX_COST = "governance.max_cost"
GOV_PRICE_INPUT = "governance.price.input"
GOV_PRICE_OUTPUT = "governance.price.output"
#: Fan-out budgets: children a session may spawn, and how deep delegation may go (a
#: session at depth ``max_depth`` spawns nothing; the root is at depth 0).
GOV_MAX_CHILDREN = "governance.max_children"
GOV_MAX_DEPTH = "governance.max_depth"
#: ``on`` (default): an action that needs approval waits for one; ``off``: it is refused.
GOV_APPROVALS = "governance.approvals"
#: Addresses (CIDRs) and host names egress may reach although not public, comma-separated.
GOV_EGRESS_ALLOW = "governance.egress_allow"

TRUST_LEVELS = ("sandboxed", "standard", "elevated")


class PolicyError(ValueError):
    """A governance setting cannot be used; the message names the key and the value."""


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


def _int(md: Mapping[str, str], key: str) -> int | None:
    raw = md.get(key)
    if raw is None or raw == "":
        return None
    text = raw.strip()
    if not text.isdigit():
        raise PolicyError(f"{key} must be a non-negative integer, got {raw!r}")
    return int(text)


def _float(md: Mapping[str, str], key: str) -> float | None:
    raw = md.get(key)
    if raw is None or raw == "":
        return None
    try:
        x = float(raw)
    except ValueError:
        x = -1.0
    if not 0.0 <= x < float("inf"):
        raise PolicyError(f"{key} must be a non-negative number, got {raw!r}")
    return x


def _list(raw: str | None) -> tuple[str, ...]:
    if not raw:
        return ()
    return tuple(x.strip() for x in raw.split(",") if x.strip())


@attrs.frozen(kw_only=True)
class Policy:
    """A session's governance settings, parsed once from its metadata."""

    trust: str = "standard"
    capabilities: frozenset[str] | None = None
    max_tokens: int | None = None
    max_tool_calls: int | None = None
    max_turns: int | None = None
    max_children: int | None = None
    max_depth: int | None = None
    approvals: bool = True
    egress_allow: tuple[str, ...] = ()
    max_cost: float | None = None
    #: Prices per million input and output tokens (both unset: no price table).
    price_input: float | None = None
    price_output: float | None = None

    def cost(self, spent: Spent) -> float | None:
        """What ``spent`` cost under the price table (None without one)."""
        if self.price_input is None and self.price_output is None:
            return None
        return (
            spent.input_tokens * (self.price_input or 0.0)
            + spent.output_tokens * (self.price_output or 0.0)
        ) / 1e6

    @classmethod
    @per_metadata
    def from_metadata(cls, md: Mapping[str, str]) -> Policy:
        trust = md.get(GOV_TRUST) or "standard"
        if trust not in TRUST_LEVELS:
            raise PolicyError(
                f"{GOV_TRUST} must be one of {', '.join(TRUST_LEVELS)}, got {trust!r}"
            )
        approvals = (md.get(GOV_APPROVALS) or "on").strip().lower()
        if approvals not in ("on", "off"):
            raise PolicyError(f"{GOV_APPROVALS} must be on or off, got {approvals!r}")
        caps = md.get(GOV_CAPABILITIES)
        return cls(
            trust=trust,
            capabilities=None if caps is None else frozenset(_list(caps)),
            max_tokens=_int(md, GOV_MAX_TOKENS),
            max_tool_calls=_int(md, GOV_MAX_TOOL_CALLS),
            max_turns=_int(md, GOV_MAX_TURNS),
            max_children=_int(md, GOV_MAX_CHILDREN),
            max_depth=_int(md, GOV_MAX_DEPTH),
            approvals=approvals == "on",
            egress_allow=_list(md.get(GOV_EGRESS_ALLOW)),
            max_cost=_float(md, GOV_MAX_COST),
            price_input=_float(md, GOV_PRICE_INPUT),
            price_output=_float(md, GOV_PRICE_OUTPUT),
        )


@attrs.frozen(kw_only=True)
class Spent:
    """What the session has used so far, folded from its stream."""

    tokens: int = 0
    tool_calls: int = 0
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    #: Children this session has spawned, and its own delegation depth (root: 0).
    children: int = 0
    depth: int = 0


class Verdict(enum.StrEnum):
    ADMIT = "admit"
    PENDING = "pending"
    REJECT = "reject"


def _rank(trust: str) -> int:
    return TRUST_LEVELS.index(trust) if trust in TRUST_LEVELS else len(TRUST_LEVELS)


@attrs.frozen(kw_only=True)
class GoalBudget:
    """A goal run's own budget (``max_turns``, ``max_tokens``, ``max_tool_calls``,
    ``max_seconds``) and what the run has used since it started. ``elapsed`` is the run's
    wall time in seconds, None when its start or the clock is unknown."""

    limits: Mapping[str, int] = attrs.field(factory=dict)
    spent: Spent = Spent()
    elapsed: float | None = None


@attrs.frozen(kw_only=True)
class Ask:
    """Everything a rule may look at: one action (``model``, a tool's name, or ``spawn``),
    what it needs, the session's policy and spending, whether the egress guard refuses
    where it would connect, and the goal run's budget (None outside a goal run)."""

    policy: Policy
    action: str
    need: Requirement = Requirement()
    spent: Spent = Spent()
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
class CostBudget:
    """Nothing runs once the session's spending, priced by its price table, reaches
    ``governance.max_cost`` (no price table: no cost budget)."""

    def check(self, ask: Ask) -> Ruling | None:
        p = ask.policy
        if p.max_cost is None:
            return None
        cost = p.cost(ask.spent)
        return _spent_out() if cost is not None and cost >= p.max_cost else None


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
