"""The governance settings (pure): a session's `Policy`, parsed once from the
``governance.*`` keys of its metadata, and what it has `Spent` so far. The gate that
judges actions by them is `governance`."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from ..spec import per_metadata

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
    "TRUST_LEVELS",
    "Policy",
    "PolicyError",
    "Spent",
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
#: What recovery does with a call whose outcome is unknown (started, no result stored)
#: and whose tool is not idempotent: ``ask`` (a human re-runs it or marks it failed) or
#: ``fail`` (the model gets an error result saying the outcome is unknown). Unset: ``ask``
#: where approvals are on, else ``fail`` (there is no one to ask).
GOV_IN_DOUBT = "governance.in_doubt"
IN_DOUBT_CHOICES = ("ask", "fail")
#: Addresses (CIDRs) and host names egress may reach although not public, comma-separated.
GOV_EGRESS_ALLOW = "governance.egress_allow"

TRUST_LEVELS = ("sandboxed", "standard", "elevated")


class PolicyError(ValueError):
    """A governance setting cannot be used; the message names the key and the value."""


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
    #: ``ask`` or ``fail`` (`GOV_IN_DOUBT`).
    in_doubt: str = "ask"
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
        in_doubt = (md.get(GOV_IN_DOUBT) or ("ask" if approvals == "on" else "fail")).strip()
        if in_doubt not in IN_DOUBT_CHOICES:
            raise PolicyError(f"{GOV_IN_DOUBT} must be ask or fail, got {in_doubt!r}")
        return cls(
            trust=trust,
            capabilities=None if caps is None else frozenset(_list(caps)),
            max_tokens=_int(md, GOV_MAX_TOKENS),
            max_tool_calls=_int(md, GOV_MAX_TOOL_CALLS),
            max_turns=_int(md, GOV_MAX_TURNS),
            max_children=_int(md, GOV_MAX_CHILDREN),
            max_depth=_int(md, GOV_MAX_DEPTH),
            approvals=approvals == "on",
            in_doubt=in_doubt,
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
    #: Money spent under the operator's price table (None: no table), the raises of the
    #: cost budget a human granted, and what the action asked about may cost at most (a
    #: model call: its output cap at the output price), reserved before it runs.
    cost: float | None = None
    raised: float = 0.0
    reserve: float = 0.0
