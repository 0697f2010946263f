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
    "TRUST_LEVELS",
    "Fault",
    "Policy",
    "PolicyError",
    "Requirement",
    "Spent",
    "Verdict",
    "gate",
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


def gate(
    policy: Policy,
    action: str,
    need: Requirement,
    spent: Spent,
    *,
    egress_refused: bool = False,
) -> tuple[Verdict, Fault | None]:
    """The verdict on one action: ``model`` (a model call), a tool's name, or ``spawn``.

    Budgets come first (nothing more runs once one is spent), then capabilities, then the
    destination (``egress_refused``: the egress guard refuses where the action would
    connect, so it is refused before any human is asked), then trust and approval: an
    action the session's trust is too low for, or one that always needs a human, waits for
    approval when approvals are on, and is refused when they are off.
    """
    if policy.max_cost is not None:
        cost = policy.cost(spent)
        if cost is not None and cost >= policy.max_cost:
            return Verdict.REJECT, Fault.BUDGET_EXCEEDED
    if action == "model":
        if policy.max_turns is not None and spent.turns > policy.max_turns:
            return Verdict.REJECT, Fault.BUDGET_EXCEEDED
        if policy.max_tokens is not None and spent.tokens >= policy.max_tokens:
            return Verdict.REJECT, Fault.BUDGET_EXCEEDED
        return Verdict.ADMIT, None
    if policy.max_tool_calls is not None and spent.tool_calls >= policy.max_tool_calls:
        return Verdict.REJECT, Fault.BUDGET_EXCEEDED
    if policy.max_tokens is not None and spent.tokens >= policy.max_tokens:
        return Verdict.REJECT, Fault.BUDGET_EXCEEDED
    if action == "spawn":
        if policy.max_children is not None and spent.children >= policy.max_children:
            return Verdict.REJECT, Fault.BUDGET_EXCEEDED
        if policy.max_depth is not None and spent.depth >= policy.max_depth:
            return Verdict.REJECT, Fault.BUDGET_EXCEEDED
    if policy.capabilities is not None and not need.capabilities <= policy.capabilities:
        return Verdict.REJECT, Fault.CAPABILITY_DENIED
    if egress_refused:
        return Verdict.REJECT, Fault.EGRESS_REFUSED
    too_low = _rank(policy.trust) < _rank(need.trust)
    if too_low or need.approval:
        if policy.approvals:
            return Verdict.PENDING, None
        return Verdict.REJECT, Fault.TRUST_TOO_LOW if too_low else Fault.NEEDS_APPROVAL
    return Verdict.ADMIT, None
