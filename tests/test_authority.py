"""The authority table (`actors.authority`) as pure tables, and the session's decider
holding every write on its behalf to it (`SessionKit`, no processes)."""

from __future__ import annotations

import pytest

from actors.authority import RULES, Authority, Writer, is_loopback_url, refusal, rule_of
from actors.testing import SessionKit

S, OP = Authority.SESSION, Authority.OPERATOR
PAIRED = {"ore.model.api_key_env": "OPENAI_API_KEY"}


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
        ({"ore.model.base_url": "http://127.0.0.1:8080/v1"}, {}, None),
        ({"ore.model.base_url": "http://localhost:8080/v1"}, {}, None),
        ({"ore.model.base_url": "http://[::1]:8080/v1"}, {}, None),
        ({"ore.model.base_url": "http://10.0.0.1/v1"}, {}, "keyless model server on loopback"),
        ({"ore.model.base_url": "https://api.example/v1"}, {}, "on loopback"),
        ({"ore.model.base_url": "http://127.0.0.1:9/v1"}, PAIRED, "paired the key in OPENAI"),
        ({"ore.model.base_url": None}, PAIRED, "paired"),
        ({"ore.model.provider": "anthropic"}, PAIRED, "paired"),
        ({"ore.model.provider": "anthropic"}, {}, None),
        ({"ore.model.profile": "work", "ore.model.name": "m"}, PAIRED, None),
    ],
)
def test_what_a_session_may_write(
    changes: dict[str, str | None], metadata: dict[str, str], refused: str | None
) -> None:
    problem = refusal(changes, metadata, S)
    assert (problem is None) if refused is None else (refused in (problem or "")), problem
    assert refusal(changes, metadata, OP) is None


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


def test_slash_commands_are_the_sessions_surface() -> None:
    kit = SessionKit()
    kit.set_metadata(PAIRED)
    for text in ("/set governance.max_turns 100", "/provider openai http://127.0.0.1:9/v1"):
        out = kit.send(text)
        assert out.reply.consumed and not out.events
        assert any(sev == "error" for _at, _k, sev, _t in out.live), out.live
    assert dict(kit.state.stored.metadata) == PAIRED
