"""The MCP client's pure rules as tables: the operator's configuration, what a call
stores, and tool names on the wire."""

from __future__ import annotations

import base64
import hashlib
from types import SimpleNamespace
from typing import Any

import pytest

from actors.agents.base import AgentError
from actors.agents.factory import ModelFactory, ScriptedFactory, with_mcp
from actors.agents.mcp_config import McpConfig, McpConfigError, check_environment, parse
from actors.agents.mcp_results import MAX_TEXT, hints, idempotency_key, render, scrub
from actors.agents.toolnames import WireNames, wire_name
from actors.agents.wire import Message, ToolCall, ToolSpec
from actors.spec import AgentSpec

GOOD: dict[str, Any] = {
    "servers": {
        "notes": {
            "command": "python3",
            "args": ["-m", "notes"],
            "env": ["NOTES_TOKEN"],
            "timeout": 5,
            "in_doubt": "retry",
            "tools": {"remember": {"approval": True}},
        },
        "search": {
            "url": "https://search.example.com/mcp",
            "headers": {"Authorization": "SEARCH_AUTH"},
            "egress_allow": ["10.0.0.0/8"],
        },
    }
}


def test_a_good_configuration_reads_both_transports_and_the_operators_policy() -> None:
    cfg = parse(GOOD)
    notes, search = cfg.servers["notes"], cfg.servers["search"]
    assert (notes.transport, notes.command, notes.args, notes.env) == (
        "stdio",
        "python3",
        ("-m", "notes"),
        ("NOTES_TOKEN",),
    )
    assert notes.timeout == 5.0
    # Per tool over the server's defaults; the rest take the defaults.
    assert notes.policy("remember").approval and notes.policy("remember").in_doubt == "retry"
    assert not notes.policy("other").approval
    need = notes.policy("remember").requirement()
    assert need.approval and need.capabilities == frozenset({"mcp"}) and need.idempotent
    assert not cfg.servers["search"].policy("x").requirement().idempotent
    assert (search.transport, search.headers, search.egress_allow) == (
        "http",
        {"Authorization": "SEARCH_AUTH"},
        ("10.0.0.0/8",),
    )


@pytest.mark.parametrize(
    ("doc", "names"),
    [
        ({"servers": {"a": {}}}, ["'a'", "command/url"]),
        ({"servers": {"a": {"command": "x", "url": "http://h/"}}}, ["'a'", "command/url"]),
        ({"servers": {"a": {"command": "x", "args": "y"}}}, ["'a'", "args"]),
        ({"servers": {"a": {"command": "x", "env": ["NOT-A-NAME"]}}}, ["'a'", "env"]),
        ({"servers": {"a": {"url": "ftp://h/x"}}}, ["'a'", "url"]),
        ({"servers": {"a": {"url": "https://u:p@h/x"}}}, ["'a'", "url", "credentials"]),
        ({"servers": {"a": {"url": "https://h/", "headers": {"X": 3}}}}, ["'a'", "headers.X"]),
        ({"servers": {"a": {"command": "x", "timeout": 0}}}, ["'a'", "timeout"]),
        ({"servers": {"a": {"command": "x", "trust": "god"}}}, ["'a'", "trust"]),
        ({"servers": {"a": {"command": "x", "in_doubt": "maybe"}}}, ["'a'", "in_doubt"]),
        ({"servers": {"a": {"command": "x", "comand": "y"}}}, ["'a'", "'comand'"]),
        (
            {"servers": {"a": {"command": "x", "tools": {"t": {"approval": "yes"}}}}},
            ["'a'", "tools.t.approval"],
        ),
        ({"servers": {"a.b": {"command": "x"}}}, ["'a.b'"]),
        ({"server": {}}, ["'server'"]),
    ],
)
def test_a_bad_configuration_names_the_server_and_the_field(
    doc: dict[str, Any], names: list[str]
) -> None:
    with pytest.raises(McpConfigError) as exc:
        parse(doc)
    for n in names:
        assert n in str(exc.value), (n, str(exc.value))
    assert "mcp.toml" in str(exc.value)


def test_a_variable_the_daemon_lacks_is_named_at_start() -> None:
    cfg = parse(GOOD)
    with pytest.raises(McpConfigError, match="'notes': env names NOTES_TOKEN"):
        check_environment(cfg, {"SEARCH_AUTH": "x"})
    with pytest.raises(McpConfigError, match=r"'search': headers\.Authorization"):
        check_environment(cfg, {"NOTES_TOKEN": "x"})
    check_environment(cfg, {"NOTES_TOKEN": "x", "SEARCH_AUTH": "y"})


def test_a_session_picks_only_configured_servers() -> None:
    cfg = parse(GOOD)
    assert [s.name for s in cfg.pick(("search", "notes"))] == ["search", "notes"]
    with pytest.raises(McpConfigError, match=r"'nope'.*configured: notes, search"):
        cfg.pick(("notes", "nope"))
    spec = AgentSpec.from_metadata({"mcp.servers": "notes, nope"})
    assert spec.mcp_servers == ("notes", "nope")
    with pytest.raises(AgentError, match="'nope'"):
        ModelFactory(mcp=cfg).build(spec, "s1")
    # No configuration at all: every name is unknown.
    with pytest.raises(AgentError, match="none are configured"):
        ModelFactory().build(AgentSpec(mcp_servers=("notes",)), "s1")


def test_the_operators_servers_join_a_factory_without_changing_the_callers() -> None:
    cfg = parse(GOOD)
    mine = ScriptedFactory()
    joined = with_mcp(mine, cfg)
    assert isinstance(joined, ScriptedFactory) and joined.mcp is cfg and mine.mcp is None
    assert with_mcp(None, cfg).mcp is cfg
    assert with_mcp(mine, None) is mine and with_mcp(mine, McpConfig()) is mine


def test_the_idempotency_key_is_one_per_call_of_a_session() -> None:
    k = idempotency_key("s1", "toolu_1")
    assert k == idempotency_key("s1", "toolu_1") and len(k) == 32
    assert k != idempotency_key("s1", "toolu_2") and k != idempotency_key("s2", "toolu_1")


def _result(content: list[Any], structured: Any = None, is_error: bool = False) -> Any:
    return SimpleNamespace(content=content, structured_content=structured, is_error=is_error)


PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 100


def test_binary_content_is_stored_as_a_typed_reference_never_its_bytes() -> None:
    data = base64.b64encode(PNG).decode()
    text, is_error, record = render(
        _result(
            [
                SimpleNamespace(type="text", text="a dot"),
                SimpleNamespace(type="image", data=data, mime_type="image/png"),
                SimpleNamespace(
                    type="resource",
                    resource=SimpleNamespace(uri="file:///b", mime_type=None, text=None, blob=data),
                ),
            ],
            structured={"result": [{"type": "image", "data": data, "mimeType": "image/png"}]},
        )
    )
    digest = hashlib.sha256(PNG).hexdigest()
    assert not is_error and text.startswith("a dot\n[image image/png, 108 bytes, sha256 ")
    assert record["content"][1] == {
        "type": "image",
        "mimeType": "image/png",
        "size": 108,
        "sha256": digest,
    }
    assert record["content"][2]["type"] == "blob" and record["content"][2]["uri"] == "file:///b"
    assert data not in repr(record) and data not in text
    assert record["structured"]["result"][0]["sha256"] == digest


def test_structured_content_is_kept_and_heard_when_no_text_came() -> None:
    text, _, record = render(_result([], structured={"sum": 3}))
    assert text == '{"sum":3}' and record["structured"] == {"sum": 3}
    big = {"x": "y" * (MAX_TEXT + 10)}
    text, _, record = render(
        _result([SimpleNamespace(type="text", text="z" * (MAX_TEXT + 5))], big)
    )
    assert set(record["structured"]) == {"size", "sha256"}
    assert text.endswith(f"[cut at {MAX_TEXT} bytes of {MAX_TEXT + 5}]")
    assert render(_result([], is_error=True))[:2] == ("(no content)", True)
    assert scrub([{"blob": "YQ==", "uri": "u"}])[0]["size"] == 1


def test_annotations_are_kept_as_the_hints_the_server_set() -> None:
    ann = SimpleNamespace(read_only_hint=True, destructive_hint=None, idempotent_hint=False)
    assert hints(ann) == {"readOnlyHint": True, "idempotentHint": False}
    assert hints(None) == {}


@pytest.mark.parametrize(
    ("name", "wire"),
    [
        ("clock", "clock"),
        ("notes.echo", "notes__echo"),
        ("everything.get-sum", "everything__get-sum"),
        ("a.b/c d", "a__b_c_d"),
    ],
)
def test_tool_names_on_the_wire_take_what_every_format_allows(name: str, wire: str) -> None:
    assert wire_name(name) == wire
    long = wire_name("s." + "x" * 100)
    assert len(long) == 64 and long != wire_name("s." + "x" * 99 + "y")


def test_a_turns_names_go_out_safe_and_come_back_as_configured() -> None:
    names = WireNames.of(["notes.echo", "clock"])
    specs = names.specs([ToolSpec(name="notes.echo", description="", parameters={})])
    assert specs[0].name == "notes__echo"
    msgs = names.messages(
        [
            Message(role="assistant", tool_calls=(ToolCall(id="1", name="notes.echo"),)),
            Message(role="tool", tool_use_id="1", tool_name="notes.echo", text="hi"),
        ]
    )
    assert msgs[0].tool_calls[0].name == "notes__echo" and msgs[1].tool_name == "notes__echo"
    assert names.registry_name("notes__echo") == "notes.echo"
    assert names.registry_name("notes.echo") == "notes.echo"


SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


def test_every_wire_format_carries_the_servers_schema_under_the_safe_name() -> None:
    from actors.agents.providers.anthropic import anthropic_body
    from actors.agents.providers.openai import chat_body
    from actors.agents.providers.responses import responses_body
    from actors.agents.wire import ModelRequest

    names = WireNames.of(["notes.echo"])
    call = ToolCall(id="c1", name="notes.echo", arguments='{"text": "w"}')
    msgs = (
        Message(role="user", text="say w"),
        Message(role="assistant", tool_calls=(call,)),
        Message(role="tool", tool_use_id="c1", tool_name="notes.echo", text="w"),
    )
    req = ModelRequest(
        model="m",
        messages=names.messages(msgs),
        tools=names.specs([ToolSpec(name="notes.echo", description="Echo.", parameters=SCHEMA)]),
    )
    chat, resp, anth = chat_body(req), responses_body(req), anthropic_body(req)
    assert chat["tools"][0]["function"]["name"] == "notes__echo"
    assert chat["tools"][0]["function"]["parameters"] == SCHEMA
    assert resp["tools"][0]["name"] == "notes__echo" and resp["tools"][0]["parameters"] == SCHEMA
    assert anth["tools"][0] == {
        "name": "notes__echo",
        "description": "Echo.",
        "input_schema": SCHEMA,
    }
    for body in (chat, resp, anth):
        assert "notes.echo" not in repr(body)
