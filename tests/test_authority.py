"""The authority table (`actors.authority`) as pure tables, and the session's decider
holding every write on its behalf to it (`SessionKit`, no processes)."""

from __future__ import annotations

import pytest

from actors.agents.providers import default_servers
from actors.authority import RULES, Authority, Writer, is_loopback_url, refusal, rule_of
from actors.model_servers import ModelServers, server_url
from actors.testing import SessionKit

S, OP = Authority.SESSION, Authority.OPERATOR
PAIRED = {"ore.model.api_key_env": "OPENAI_API_KEY"}
#: What the operator allows sessions to name in the tables below.
LOCAL = "http://127.0.0.1:8080/v1"
SERVERS = default_servers([LOCAL, "http://localhost:11434/v1/", "http://[::1]:8080/v1"])


@pytest.mark.parametrize(
    ("key", "writer"),
    [
        ("governance.trust", Writer.OPERATOR),
        ("governance.price.output", Writer.OPERATOR),
        ("mcp.servers", Writer.OPERATOR),
        ("tenant", Writer.OPERATOR),
        ("goal.depth", Writer.OPERATOR),
        ("goal.parent", Writer.OPERATOR),
        ("ore.model.api_key_env", Writer.OPERATOR),
        ("model.api_key_env", Writer.OPERATOR),
        ("ore.model.api_key", Writer.OPERATOR),
        ("my.service_token", Writer.OPERATOR),
        ("github.key_env", Writer.OPERATOR),
        ("ore.model.base_url", Writer.KEYLESS),
        ("model.base_url", Writer.KEYLESS),
        ("ore.model.provider", Writer.KEYLESS),
        ("ore.model.profile", Writer.SESSION),
        ("ore.model.max_output_tokens", Writer.SESSION),
        ("ore.model.temperature", Writer.SESSION),
        ("session.busy_policy", Writer.SESSION),
        ("goal.finish", Writer.SESSION),
    ],
)
def test_the_table_names_who_writes_each_key(key: str, writer: Writer) -> None:
    rule = rule_of(key)
    assert (rule.writer if rule else Writer.SESSION) == writer


def test_a_free_form_key_is_the_sessions() -> None:
    assert rule_of("colour") is None and refusal({"colour": "blue"}, {}, S) is None


@pytest.mark.parametrize(
    ("changes", "metadata", "refused"),
    [
        ({"governance.trust": "elevated"}, {}, "governance.trust is set by the operator"),
        ({"governance.trust": None}, {"governance.trust": "sandboxed"}, "operator only"),
        ({"ore.model.api_key_env": "HOME"}, {}, "operator only"),
        ({"ore.model.base_url": LOCAL}, {}, None),
        ({"ore.model.base_url": "http://127.0.0.1:8080/v1/"}, {}, None),
        ({"ore.model.base_url": "HTTP://LOCALHOST:11434/v1"}, {}, None),
        ({"ore.model.base_url": "http://[::1]:8080/v1"}, {}, None),
        ({"ore.model.provider": "openai", "ore.model.base_url": LOCAL}, {}, None),
        # Loopback is no longer enough: only what the operator listed.
        ({"ore.model.base_url": "http://127.0.0.1:9/v1"}, {}, "not a model server the operator"),
        ({"ore.model.base_url": "http://localhost:8080/v1"}, {}, "ore.model.base_url: its server"),
        ({"ore.model.base_url": "http://127.0.0.1:8080/v2"}, {}, "allowed: http://127.0.0.1"),
        ({"model.base_url": "http://127.0.0.1:6379"}, {}, "model.base_url: its server"),
        ({"ore.model.base_url": "http://10.0.0.1/v1"}, {}, "--allow-model-url"),
        ({"ore.model.base_url": "https://api.example/v1"}, {}, "not a model server"),
        ({"ore.model.base_url": "http://127.0.0.1:9/v1"}, PAIRED, "paired the key in OPENAI"),
        ({"ore.model.base_url": None}, PAIRED, "paired"),
        ({"ore.model.provider": "anthropic"}, PAIRED, "paired"),
        # A provider with no base URL goes to its vendor's server, which is not listed.
        ({"ore.model.provider": "anthropic"}, {}, "ore.model.provider: its vendor's server"),
        ({"ore.model.provider": "anthropic"}, {"ore.model.base_url": LOCAL}, None),
        ({"ore.model.base_url": None}, {"ore.model.provider": "openai"}, "api.openai.com"),
        ({"ore.model.provider": "scripted"}, {"ore.model.base_url": "http://x:1"}, None),
        ({"ore.model.profile": "work", "ore.model.name": "m"}, PAIRED, None),
        ({"ore.model.profile": "work", "ore.model.provider": "openai"}, {}, None),
    ],
)
def test_what_a_session_may_write(
    changes: dict[str, str | None], metadata: dict[str, str], refused: str | None
) -> None:
    problem = refusal(changes, metadata, S, SERVERS)
    assert (problem is None) if refused is None else (refused in (problem or "")), problem
    assert refusal(changes, metadata, OP) is None


def test_with_no_servers_given_a_session_names_none() -> None:
    assert "allowed: none" in (refusal({"ore.model.base_url": LOCAL}, {}, S) or "")
    assert refusal({"ore.model.base_url": LOCAL}, {}, OP) is None


@pytest.mark.parametrize(
    ("url", "normal"),
    [
        ("http://127.0.0.1:8080/v1/", "http://127.0.0.1:8080/v1"),
        ("HTTP://LocalHost/v1", "http://localhost:80/v1"),
        ("https://api.example", "https://api.example:443"),
        ("http://[::1]:9/v1", "http://[::1]:9/v1"),
    ],
)
def test_servers_compare_in_one_form(url: str, normal: str) -> None:
    assert server_url(url) == normal


@pytest.mark.parametrize(
    "url",
    ["ftp://x/v1", "not a url", "http://u:p@127.0.0.1/v1", "http://127.0.0.1/v1?x=1", "http://:9"],
)
def test_an_operator_url_that_is_no_server_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match=r"model server|not a URL"):
        ModelServers(urls=(url,))
    assert not SERVERS.allows(url)


def test_every_rule_says_why() -> None:
    assert all(r.why for r in RULES)
    assert not is_loopback_url("http://127.0.0.1.example/v1") and not is_loopback_url("::")


def test_the_decider_refuses_a_session_write_and_stores_nothing() -> None:
    kit = SessionKit()
    out = kit.set_metadata({"governance.trust": "elevated", "a": "1"}, authority=S)
    assert out.reply.error == "NotAuthorized" and "governance.trust" in out.reply.message
    assert not out.events and any("governance.trust" in t for *_, t in out.live)
    assert "governance.trust" not in kit.state.stored.metadata
    out = kit.set_metadata({"governance.trust": "elevated"})
    assert kit.state.stored.metadata["governance.trust"] == "elevated"


def test_the_decider_refuses_a_model_server_the_operator_did_not_allow() -> None:
    """A session's write of an unlisted server stores nothing and says why; the operator's
    own write is stored (the model client still checks it when a turn runs)."""
    kit = SessionKit(model_servers=[LOCAL])
    out = kit.set_metadata({"ore.model.base_url": "http://127.0.0.1:6379"}, authority=S)
    assert out.reply.error == "NotAuthorized" and "ore.model.base_url" in out.reply.message
    assert not out.events and "ore.model.base_url" not in kit.state.stored.metadata
    out = kit.send("/provider openai http://127.0.0.1:6379/v1 m")
    assert out.reply.consumed and not out.events
    assert any("not a model server the operator allows" in t for *_, t in out.live), out.live
    out = kit.send(f"/provider openai {LOCAL} m")
    assert kit.state.stored.metadata["ore.model.base_url"] == LOCAL
    kit.set_metadata({"ore.model.base_url": "http://127.0.0.1:6379"})
    assert kit.state.stored.metadata["ore.model.base_url"] == "http://127.0.0.1:6379"


def test_slash_commands_are_the_sessions_surface() -> None:
    kit = SessionKit()
    kit.set_metadata(PAIRED)
    for text in ("/set governance.max_turns 100", "/provider openai http://127.0.0.1:9/v1"):
        out = kit.send(text)
        assert out.reply.consumed and not out.events
        assert any(sev == "error" for _at, _k, sev, _t in out.live), out.live
    assert dict(kit.state.stored.metadata) == PAIRED
