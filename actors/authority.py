"""Who may write which session metadata key: the one table (pure).

A session's own surfaces -- a bearer token scoped to it, the slash commands typed into its
chat, the interceptors that see its ingress -- may choose among what the operator allowed:
a provider profile by name, a model, sampling, busy policy, context settings, free-form
keys. Policy is the operator's (the daemon's configuration, the admin token, the `Host`
API): trust, capabilities, budgets, approvals, the egress allowlist and prices
(``governance.*``), MCP servers, the variables that hold secrets, and the lineage of goal
runs. A key naming a secret is only ever paired with its destination by the operator, so a
session may point at a model server of its own only while no key variable is paired with
it, and only at one the operator allows (`actors.model_servers`: a local llama.cpp or
Ollama the operator listed).

`refusal` is the check every writer runs: the gateway and the `Host` before they send, the
session's decider before it stores (the one place every write passes).
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Mapping
from urllib.parse import urlsplit

import attrs

from projections import (
    LEGACY_PREFIX,
    MODEL_API_KEY_ENV,
    MODEL_BASE_URL,
    MODEL_PROFILE,
    MODEL_PROVIDER,
)

from .model_servers import ModelServers

#: No model server of a session's naming is allowed: what a caller that gives none gets.
NO_SERVERS = ModelServers()

__all__ = [
    "MODEL_PROFILE",
    "NO_SERVERS",
    "RULES",
    "Authority",
    "ModelServers",
    "Rule",
    "Writer",
    "is_loopback_url",
    "refusal",
    "rule_of",
]


class Authority(enum.StrEnum):
    """On whose behalf a metadata write comes."""

    #: The daemon's configuration, the admin token, the `Host` API.
    OPERATOR = "operator"
    #: A token scoped to the session, its slash commands, its interceptors.
    SESSION = "session"


class Writer(enum.StrEnum):
    """Who may write a key."""

    #: The session's own surfaces and the operator.
    SESSION = "session"
    #: The session too, while no key variable is paired with its server, and only for a
    #: server the operator allows (`actors.model_servers`).
    KEYLESS = "session, keyless and operator-allowed servers only"
    #: The operator only.
    OPERATOR = "operator"


@attrs.frozen
class Rule:
    """``key`` is one key, or a prefix when it ends with a dot."""

    key: str
    writer: Writer
    why: str

    def matches(self, key: str) -> bool:
        return key.startswith(self.key) if self.key.endswith(".") else key == self.key


#: The table, most specific first; a key no rule names is free-form, the session's.
RULES: tuple[Rule, ...] = (
    Rule(
        "governance.",
        Writer.OPERATOR,
        "policy: trust, capabilities, budgets, approvals, egress allowlist, prices",
    ),
    Rule("mcp.", Writer.OPERATOR, "the MCP servers a session may reach"),
    Rule("tenant", Writer.OPERATOR, "the tenant a session belongs to"),
    Rule("goal.parent", Writer.OPERATOR, "written when a goal run spawns a child"),
    Rule("goal.depth", Writer.OPERATOR, "the delegation depth the fan-out budget counts"),
    Rule(
        "replay.",
        Writer.OPERATOR,
        "which session's stored tool results and approvals a replay serves: another "
        "session's data, and human decisions taken as given",
    ),
    Rule(
        MODEL_API_KEY_ENV,
        Writer.OPERATOR,
        "it names the variable holding a secret; "
        "the operator pairs keys with servers in provider profiles",
    ),
    Rule(MODEL_BASE_URL, Writer.KEYLESS, "where the model requests go"),
    Rule(MODEL_PROVIDER, Writer.KEYLESS, "the wire format, and its vendor's default server"),
    Rule(MODEL_PROFILE, Writer.SESSION, "one of the operator's provider profiles, by name"),
    Rule("ore.model.", Writer.SESSION, "model name, sampling, system prompt, timeouts"),
    Rule("session.", Writer.SESSION, "busy policy"),
    Rule("goal.", Writer.SESSION, "the objective and how a run ends"),
)

#: Words that, in a key's last part, say it names a secret or where one is read from
#: (whole words: ``max_output_tokens`` counts tokens, it holds none).
_SECRET_WORDS = frozenset(
    {"key", "apikey", "token", "secret", "password", "passwd", "credential", "credentials", "env"}
)


def _canonical(key: str) -> str:
    # Streams older than the seed's keys spell them ``model.*``; both spellings are read
    # (`projections.model_value`), so both are one key here.
    if key.startswith(LEGACY_PREFIX):
        return "ore.model." + key.removeprefix(LEGACY_PREFIX)
    return key


def rule_of(key: str) -> Rule | None:
    """The rule that governs ``key`` (None: free-form, the session's)."""
    canon = _canonical(key)
    for rule in RULES:
        if rule.matches(canon):
            if rule.writer is Writer.SESSION and _names_secret(canon):
                break
            return rule
    if _names_secret(canon):
        return Rule(key, Writer.OPERATOR, "it names a secret or the variable holding one")
    return None


def _names_secret(key: str) -> bool:
    last = key.rsplit(".", 1)[-1].lower().replace("-", "_")
    return not _SECRET_WORDS.isdisjoint(last.split("_"))


def is_loopback_url(value: str) -> bool:
    """Whether ``value`` is an http(s) URL whose host is a loopback address or ``localhost``."""
    try:
        host = urlsplit(value.strip()).hostname or ""
    except ValueError:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _paired_key(metadata: Mapping[str, str]) -> str | None:
    return metadata.get(MODEL_API_KEY_ENV) or metadata.get(LEGACY_PREFIX + "api_key_env")


def refusal(
    changes: Mapping[str, str | None],
    metadata: Mapping[str, str],
    authority: str,
    servers: ModelServers = NO_SERVERS,
) -> str | None:
    """Why ``authority`` may not apply ``changes`` to a session whose metadata is
    ``metadata`` (the first key refused, named), or None when it may. ``servers`` are the
    model servers the operator lets sessions name (none unless given)."""
    if authority == Authority.OPERATOR:
        return None
    destination = False
    for key, value in changes.items():
        rule = rule_of(key)
        if rule is None or rule.writer is Writer.SESSION:
            continue
        if rule.writer is Writer.OPERATOR:
            return (
                f"{key} is set by the operator only ({rule.why}); a session's token, slash "
                "commands and interceptors may not change it"
            )
        paired = _paired_key(metadata)
        if paired:
            return (
                f"{key} is set by the operator only for this session: the operator paired "
                f"the key in {paired} with its server (choose a provider profile with "
                f"{MODEL_PROFILE})"
            )
        destination = True
        if _canonical(key) == MODEL_BASE_URL and value is not None and not servers.allows(value):
            # Refused even while the provider is ``scripted``: no URL waits in the metadata
            # for a later write to make it live.
            return servers.problem(key, value)
    if not destination:
        return None
    # Where the requests would go once the changes apply, not each key alone: ``/provider``
    # names the wire format and the server together.
    after = {k: v for k, v in {**metadata, **changes}.items() if v is not None}
    return servers.refusal(after)
