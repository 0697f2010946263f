"""The tool loop, the tools, the request shapes and the model settings, as tables."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fake_models import FakeModelServer, chunk, tool_delta, usage_chunk

from actors.agents import (
    ModelAgent,
    ModelFactory,
    ScriptedProvider,
    ToolError,
    builtin_tools,
    calculate,
)
from actors.agents.base import AgentError
from actors.agents.formats import anthropic_body, chat_body, conversation, responses_body
from actors.agents.http import HttpProvider
from actors.agents.wire import Message, ModelRequest, ToolCall, ToolSpec
from actors.session.rules.commands import Finished, Govern, Progress
from actors.session.shell.worker import TurnWorker
from actors.spec import AgentSpec, TurnInput
from projections import (
    SettingsError,
    model_settings,
    parse_api_key_env,
    secret_problem,
)
from spine import Kind

# -- the calculator ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "want"),
    [
        ("1+2", 3),
        ("2 * (3 + 4)", 14),
        ("7 / 2", 3.5),
        ("7 // 2", 3),
        ("2 ** 10", 1024),
        ("-3 + +1", -2),
        ("sqrt(16)", 4.0),
        ("max(1, 5, 3)", 5),
        ("round(pi, 2)", 3.14),
        ("10 % 4", 2),
    ],
)
def test_the_calculator_evaluates_arithmetic(expr: str, want: float) -> None:
    """Numbers, operators, parentheses and the listed functions evaluate."""
    assert calculate(expr) == want


@pytest.mark.parametrize(
    ("expr", "why"),
    [
        ("__import__('os').system('true')", "not allowed"),
        ("open('x')", "not allowed"),
        ("(1).__class__", "not allowed"),
        ("x + 1", "not allowed"),
        ("1 / 0", "division by zero"),
        ("9 ** 9 ** 9", "exponent too large"),
        ("10 ** 1000 * 10 ** 1000", "too large"),
        ("1 +", "cannot parse"),
        ("", "non-empty"),
        ("'a' * 3", "not allowed"),
        ("[1, 2]", "not allowed"),
        ("1 if 1 else 2", "not allowed"),
        ("(-8) ** 0.5", "not a real number"),
        ("1" * 600, "longer than"),
    ],
)
def test_the_calculator_refuses_anything_but_arithmetic(expr: str, why: str) -> None:
    """Names, attributes, calls outside the list, huge powers: a ToolError naming it."""
    with pytest.raises(ToolError, match=why):
        calculate(expr)


# -- the conversation and the request shapes ---------------------------------------------


def _call_entry(cid: str, name: str, args: str) -> tuple[str, str]:
    return ("tool.call", json.dumps({"id": cid, "name": name, "input": args}))


def _result_entry(cid: str, name: str, result: str, err: bool = False) -> tuple[str, str]:
    return ("tool.result", json.dumps({"id": cid, "name": name, "result": result, "isError": err}))


HISTORY = (
    ("user", "what is 2+3?"),
    ("assistant", "Let me compute."),
    _call_entry("c1", "calculator", '{"expression": "2+3"}'),
    _call_entry("c2", "clock", "{}"),
    _result_entry("c1", "calculator", "5"),
    _result_entry("c2", "clock", "2026-11-30T00:00:00+00:00"),
    ("assistant", "It is 5."),
    ("user", "and a call cut off by a crash?"),
    _call_entry("c3", "calculator", '{"expression": "1"}'),
)


def test_the_conversation_is_rebuilt_with_calls_matched_to_results() -> None:
    """Text before calls and the calls form one assistant message; a dangling call is dropped."""
    msgs = conversation(HISTORY, "next")
    assert [m.role for m in msgs] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "user",
        "user",
    ]
    assert msgs[1].text == "Let me compute."
    assert [c.id for c in msgs[1].tool_calls] == ["c1", "c2"]
    assert (msgs[2].tool_use_id, msgs[2].text) == ("c1", "5")
    assert msgs[-1] == Message(role="user", text="next")
    assert all("c3" not in [c.id for c in m.tool_calls] for m in msgs)


def test_messages_made_for_one_call_are_kept_for_the_next_within_a_bound() -> None:
    """Each model call rebuilds the conversation from the kept history: what was said is
    made into a message once, and the kept messages never grow past their bound."""
    from actors.agents import formats

    first = conversation(HISTORY, "next")
    again = conversation((*HISTORY, ("assistant", "sure")), "then")
    assert again[0] is first[0] and again[-1] == Message(role="user", text="then")
    for i in range(formats._SAID_LIMIT + 10):
        conversation((), f"message {i}")
    assert 0 < len(formats._SAID) <= formats._SAID_LIMIT
    assert conversation((("user", "a"),), "b") == (
        Message(role="user", text="a"),
        Message(role="user", text="b"),
    )
    # Made from kept messages or made anew, with tool entries or without: the same.
    said = (("user", "q"), ("assistant", "a"), ("user", "q2"), ("assistant", "a2"))
    for history in (said, (*said, *HISTORY), HISTORY):
        formats._SAID.clear()
        fresh = conversation(history, "next")
        assert conversation(history, "next") == fresh
        assert fresh == formats._paired(
            [*formats._messages(history), Message(role="user", text="next")]
        )


def test_a_result_whose_call_fell_out_of_history_is_dropped() -> None:
    """The kept history may start after a call: its orphan result is not sent."""
    msgs = conversation((_result_entry("old", "clock", "t"), ("assistant", "ok")), "hi")
    assert [m.role for m in msgs] == ["assistant", "user"]


def _req() -> ModelRequest:
    return ModelRequest(
        model="m",
        messages=conversation(HISTORY, "next"),
        tools=(ToolSpec(name="clock", description="time", parameters={"type": "object"}),),
        system="be brief",
        temperature=0.5,
        max_output_tokens=100,
    )


def test_chat_completions_requests_carry_tool_calls_and_tool_messages() -> None:
    """The chat shape: system first, assistant tool_calls, tool messages by tool_call_id."""
    body = chat_body(_req())
    msgs = body["messages"]
    assert msgs[0] == {"role": "system", "content": "be brief"}
    assert msgs[2]["tool_calls"][0] == {
        "id": "c1",
        "type": "function",
        "function": {"name": "calculator", "arguments": '{"expression": "2+3"}'},
    }
    assert msgs[3] == {"role": "tool", "tool_call_id": "c1", "content": "5"}
    assert body["tools"][0]["function"]["name"] == "clock"
    assert body["stream_options"] == {"include_usage": True}
    assert (body["temperature"], body["max_tokens"]) == (0.5, 100)
    no_usage = chat_body(ModelRequest(model="m", messages=(), include_usage=False))
    assert "stream_options" not in no_usage


def test_anthropic_requests_merge_tool_results_into_one_user_turn() -> None:
    """Both results travel in one user turn; tool_use inputs are objects; system is apart."""
    body = anthropic_body(_req())
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user"]
    assistant = body["messages"][1]["content"]
    assert assistant[0] == {"type": "text", "text": "Let me compute."}
    assert assistant[1] == {
        "type": "tool_use",
        "id": "c1",
        "name": "calculator",
        "input": {"expression": "2+3"},
    }
    results = body["messages"][2]["content"]
    assert [b["tool_use_id"] for b in results] == ["c1", "c2"]
    assert body["system"] == "be brief" and body["max_tokens"] == 100
    assert body["tools"][0]["input_schema"] == {"type": "object"}


def test_anthropic_thinking_sets_a_budget_below_max_tokens() -> None:
    """A thinking level becomes a budget, with max_tokens above it and no temperature."""
    req = ModelRequest(model="m", messages=(), thinking_level="medium", temperature=0.2)
    body = anthropic_body(req)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 4096}
    assert body["max_tokens"] > 4096 and "temperature" not in body


def test_responses_requests_carry_function_calls_and_outputs() -> None:
    """The Responses shape: function_call and function_call_output items by call_id."""
    body = responses_body(_req())
    items = body["input"]
    assert {"type": "function_call", "call_id": "c1", "name": "calculator",
            "arguments": '{"expression": "2+3"}'} in items  # fmt: skip
    assert {"type": "function_call_output", "call_id": "c2",
            "output": "2026-11-30T00:00:00+00:00"} in items  # fmt: skip
    assert body["instructions"] == "be brief" and body["max_output_tokens"] == 100
    assert body["tools"][0] == {
        "type": "function",
        "name": "clock",
        "description": "time",
        "parameters": {"type": "object"},
    }


# -- the loop ----------------------------------------------------------------------------


class Recorder:
    """A turn worker whose hand-backs are kept in a list; the gate admits everything."""

    def __init__(self, turn: int = 1) -> None:
        self.sent: list[Any] = []
        self.worker = TurnWorker(self._send, turn, 0.02)
        self.calls = 0

    def _send(self, msg: Any) -> None:
        if isinstance(msg, Govern):
            self.calls += 1
            self.worker.answer(msg.action, msg.tool_use_id, "admit", self.calls, "")
        else:
            self.sent.append(msg)

    def run(self, agent: ModelAgent, text: str, history: tuple[Any, ...] = ()) -> Finished:
        self.worker.start(agent, TurnInput(session_id="s", turn=1, text=text, history=history))
        assert self.worker.done.wait(20)
        fin = self.sent[-1]
        assert isinstance(fin, Finished)
        return fin

    def text(self) -> str:
        return "".join(p.text for p in self.sent if isinstance(p, (Progress, Finished)))

    def events(self, kinds: tuple[str, ...] = (Kind.TOOL_CALL, Kind.TOOL_RESULT)) -> list[Any]:
        return [
            e
            for p in self.sent
            if isinstance(p, (Progress, Finished))
            for e in p.events
            if e.kind in kinds
        ]


def _scripted(rounds: int = 8) -> ModelAgent:
    spec = AgentSpec(model="m", max_tool_rounds=rounds)
    return ModelAgent(spec, ScriptedProvider("m"), builtin_tools())


def test_a_scripted_tool_call_really_runs_the_tool() -> None:
    """!tool calculator runs the calculator; its result goes back; the model answers."""
    r = Recorder()
    fin = r.run(_scripted(), '!tool calculator {"expression": "6*7"}')
    kinds = [(e.kind, e.tool, e.result) for e in r.events()]
    assert kinds == [(Kind.TOOL_CALL, "calculator", ""), (Kind.TOOL_RESULT, "calculator", "42")]
    assert fin.stop_reason == "end_turn" and r.text() == "calculator returned 42"


def test_each_model_call_and_tool_call_is_reported_complete_under_its_call_id() -> None:
    """The gate's call ids come back on action.completed: model, tool, model."""
    r = Recorder()
    r.run(_scripted(), '!tool calculator {"expression": "1"}')
    done = [(e.action, e.call, e.fault) for e in r.events((Kind.ACTION_COMPLETED,))]
    assert done == [("model", 1, ""), ("calculator", 2, ""), ("model", 3, "")]


def test_parallel_calls_each_get_their_own_id_and_result() -> None:
    """Two calls in one response: two tool.call, two tool.result, matched by id."""
    r = Recorder()
    r.run(
        _scripted(),
        '!tool calculator {"expression": "1+1"}\n!tool calculator {"expression": "2+2"}',
    )
    calls = [e for e in r.events() if e.kind == Kind.TOOL_CALL]
    results = {e.tool_use_id: e.result for e in r.events() if e.kind == Kind.TOOL_RESULT}
    assert len({c.tool_use_id for c in calls}) == 2
    assert sorted(results.values()) == ["2", "4"]
    assert set(results) == {c.tool_use_id for c in calls}


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("!tool nosuch {}", "unknown tool 'nosuch'"),
        ('!tool calculator {"expression": "1/0"}', "division by zero"),
        ("!tool calculator [1, 2]", "must be a JSON object"),
    ],
)
def test_a_failing_tool_call_answers_the_model_with_an_error_result(text: str, error: str) -> None:
    """Unknown tools, tool errors and bad arguments become error results, not a failed turn."""
    r = Recorder()
    fin = r.run(_scripted(), text)
    (res,) = [e for e in r.events() if e.kind == Kind.TOOL_RESULT]
    assert res.is_error and error in res.result
    assert fin.stop_reason == "end_turn" and not fin.error


def test_the_tool_round_limit_ends_the_turn_without_running_more() -> None:
    """A model that keeps asking is stopped after max_tool_rounds; the extra call is not run."""
    r = Recorder()
    fin = r.run(_scripted(rounds=2), "!loop clock {}")
    results = [e for e in r.events() if e.kind == Kind.TOOL_RESULT]
    assert len(results) == 3
    assert [x.is_error for x in results] == [False, False, True]
    assert "max_tool_rounds" in results[-1].result
    assert fin.stop_reason == "max_tool_rounds"


def test_a_scripted_failure_fails_the_turn_with_its_message() -> None:
    """!fail ends the turn with stop reason error and the message."""
    r = Recorder()
    fin = r.run(_scripted(), "!fail the model fell over")
    assert fin.stop_reason == "error" and fin.error == "AgentError: the model fell over"


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    s = FakeModelServer()
    try:
        yield s
    finally:
        s.close()


def _http_agent(server: FakeModelServer, **spec: Any) -> ModelAgent:
    provider = HttpProvider("openai", base_url=server.url, api_key=None, backoff=0.01)
    return ModelAgent(AgentSpec(model="fake", **spec), provider, builtin_tools())


def test_a_two_round_tool_conversation_against_a_server() -> None:
    """Model asks for two tools, gets both results by id, answers; usage sums both calls."""
    server = FakeModelServer()
    try:
        server.queue(
            [
                (
                    "sse",
                    [
                        chunk(content="Checking."),
                        chunk(
                            tool_calls=[
                                tool_delta(0, "call_a", "calculator", '{"expression": "2+3"}')
                            ]
                        ),
                        chunk(tool_calls=[tool_delta(1, "call_b", "clock", "{}")]),
                        chunk(finish="tool_calls"),
                        usage_chunk(20, 8, cached=4),
                    ],
                ),
                ("done",),
            ],
            [
                ("sse", [chunk(content="It is 5."), chunk(finish="stop"), usage_chunk(40, 3)]),
                ("done",),
            ],
        )
        r = Recorder()
        fin = r.run(_http_agent(server, system="sys"), "what is 2+3?")
        assert fin.stop_reason == "end_turn"
        assert fin.usage is not None and fin.usage.input_tokens == 60
        assert fin.usage.output_tokens == 11 and fin.usage.cache_read_tokens == 4
        assert len(fin.provider_usage) == 2
        second = server.requests[1]["body"]["messages"]
        assert second[0] == {"role": "system", "content": "sys"}
        tools = [m for m in second if m["role"] == "tool"]
        assert {(m["tool_call_id"], m["content"]) for m in tools} >= {("call_a", "5")}
        assert {m["tool_call_id"] for m in tools} == {"call_a", "call_b"}
        assert [c["id"] for c in second[2]["tool_calls"]] == ["call_a", "call_b"]
        text = "".join(p.text for p in r.sent if isinstance(p, Progress)) + fin.text
        assert text == "Checking.It is 5."
    finally:
        server.close()


def test_an_interrupt_cancels_a_request_the_server_never_answers(server: FakeModelServer) -> None:
    """The worker's cancel ends a turn whose server is silent; the agent returns cancelled."""
    server.queue([("sse", [chunk(content="partial")]), ("stall",)])
    r = Recorder()
    r.worker.start(_http_agent(server), TurnInput(session_id="s", turn=1, text="hi"))
    deadline = threading.Event()
    for _ in range(400):
        if any(isinstance(p, Progress) and p.text for p in r.sent):
            break
        deadline.wait(0.01)
    # The few words before the silence were handed over without waiting for more.
    assert "".join(p.text for p in r.sent if isinstance(p, Progress)) == "partial"
    r.worker.cancel()
    assert r.worker.done.wait(5)
    assert r.sent[-1].stop_reason == "cancelled"


# -- settings ----------------------------------------------------------------------------


def test_model_settings_read_every_key() -> None:
    """Every ore.model.* key parses into the settings the factory uses."""
    s = model_settings(
        {
            "ore.model.provider": "openai",
            "ore.model.base_url": "http://127.0.0.1:11434/v1/",
            "ore.model.api_key_env": "OPENAI_API_KEY",
            "ore.model.include_usage": "false",
            "ore.model.timeout": "2.5",
            "ore.model.system": "be kind",
            "ore.model.max_tool_rounds": "3",
        }
    ).check()
    assert (s.provider, s.base_url, s.api_key_env) == (
        "openai",
        "http://127.0.0.1:11434/v1",
        "OPENAI_API_KEY",
    )
    assert (s.include_usage, s.timeout, s.system, s.max_tool_rounds) == (False, 2.5, "be kind", 3)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("ore.model.base_url", "ftp://x"),
        ("ore.model.base_url", "not a url"),
        ("ore.model.include_usage", "maybe"),
        ("ore.model.timeout", "0"),
        ("ore.model.timeout", "soon"),
        ("ore.model.max_tool_rounds", "0"),
        ("ore.model.api_key_env", "has space"),
    ],
)
def test_a_bad_setting_is_named(key: str, value: str) -> None:
    """A value that does not parse is named with its key."""
    with pytest.raises(SettingsError, match=key):
        model_settings({key: value}).check()


@pytest.mark.parametrize(
    "value",
    [
        "sk-proj-abcdefghijklmnop1234567890",
        "sk-ant-api03-xyz",
        "AKIAIOSFODNN7EXAMPLE",
        "AIzaSyA1234567890abcdefghijklmnopqrs",
        "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
        "abcdef0123456789abcdef0123456789",
    ],
)
def test_a_key_where_a_variable_name_belongs_is_refused(value: str) -> None:
    """Values that look like credentials are refused for ore.model.api_key_env."""
    with pytest.raises(SettingsError, match="looks like a key"):
        parse_api_key_env(value)
    assert secret_problem({"ore.model.api_key_env": value})


@pytest.mark.parametrize("value", ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "MY_LLAMA_TOKEN"])
def test_variable_names_are_accepted(value: str) -> None:
    """Ordinary variable names pass."""
    assert parse_api_key_env(value) == value
    assert secret_problem({"ore.model.api_key_env": value}) is None


def test_a_metadata_key_that_would_hold_a_credential_is_refused() -> None:
    """ore.model.api_key itself is refused whatever its value."""
    assert "environment variable" in (secret_problem({"ore.model.api_key": "x"}) or "")


def test_the_factory_names_a_missing_model_name_and_an_unset_key_variable() -> None:
    """A real provider without a model, or with an unset key variable, fails the turn."""
    from actors.agents.providers import default_servers

    f = ModelFactory(model_servers=default_servers(["https://api.openai.com/v1"]))
    with pytest.raises(AgentError, match="needs a model name"):
        f.build(AgentSpec(provider="openai"), "s")
    with pytest.raises(AgentError, match="VERTEBRA_TEST_UNSET_KEY"):
        f.build(AgentSpec(provider="openai", model="m", api_key_env="VERTEBRA_TEST_UNSET_KEY"), "s")


def test_tool_calls_keep_their_provider_id() -> None:
    """A ToolCall is a value: id, name and raw arguments as the model sent them."""
    assert ToolCall(id="a", name="b") == ToolCall(id="a", name="b", arguments="{}")


# -- the session's side: decisions about a model's output (pure) -------------------------


def _tool_events(cid: str) -> list[Any]:
    from spine import Event

    return [
        Event(kind=Kind.TOOL_CALL, tool="calculator", tool_use_id=cid, input='{"expression": "1"}'),
    ]


def test_text_before_tool_calls_is_stored_ahead_of_them_as_its_own_message() -> None:
    """Given a turn that said something, when its worker hands over a tool call, then the
    text is stored first as an assistant message, and the final answer holds only the rest."""
    from actors.testing import SessionKit

    kit = SessionKit()
    kit.send("what is 1?")
    kit.progress(text="Let me check.")
    out = kit.progress(events=_tool_events("c1"))
    assert [(e.kind, e.text or e.tool) for e in out.events] == [
        (Kind.ASSISTANT, "Let me check."),
        (Kind.TOOL_CALL, "calculator"),
    ]
    out = kit.finish(text="It is 1.")
    assert [e.text for e in out.events if e.kind == Kind.ASSISTANT] == ["It is 1."]
    # The history an agent gets next has the calls in place.
    roles = [r for r, _t, _s in kit.state.stored.history]
    assert roles == ["user", "assistant", "tool.call", "assistant"]


def test_a_cancelled_turn_keeps_only_the_text_not_yet_stored() -> None:
    """Text stored before the tool call is not repeated in turn.cancelled."""
    from actors.testing import SessionKit

    kit = SessionKit()
    kit.send("go")
    kit.progress(text="First part.", events=_tool_events("c1"))
    kit.progress(text=" Second")
    out = kit.interrupt()
    (cancelled,) = [e for e in out.events if e.kind == Kind.TURN_CANCELLED]
    assert cancelled.text == " Second"


def test_provider_usage_is_kept_beside_the_usage_on_turn_completed() -> None:
    """Each model call's raw report lands on turn.completed as providerUsage."""
    from actors.session.rules.commands import Finished as Fin
    from actors.testing import SessionKit

    kit = SessionKit()
    kit.send("go")
    raw = ({"prompt_tokens": 3, "completion_tokens": 1},)
    out = kit.run(Fin(turn=1, stop_reason="end_turn", text="ok", provider_usage=raw))
    (done,) = [e for e in out.events if e.kind == Kind.TURN_COMPLETED]
    assert done.extra["providerUsage"] == [{"prompt_tokens": 3, "completion_tokens": 1}]


@pytest.mark.parametrize(
    ("command", "metadata", "notice"),
    [
        ("/provider openai", {"ore.model.provider": "openai"}, "provider set to openai"),
        (
            "/provider openai http://127.0.0.1:11434/v1/",
            {"ore.model.provider": "openai", "ore.model.base_url": "http://127.0.0.1:11434/v1"},
            "at http://127.0.0.1:11434/v1",
        ),
        (
            "/provider anthropic http://127.0.0.1:9/v1 claude-x",
            {
                "ore.model.provider": "anthropic",
                "ore.model.base_url": "http://127.0.0.1:9/v1",
                "ore.model.name": "claude-x",
            },
            "model claude-x",
        ),
        ("/provider openai http://127.0.0.1:6379", {}, "not a model server the operator"),
        ("/set ore.model.base_url http://127.0.0.1:6379", {}, "--allow-model-url"),
        ("/provider gemini", {}, "usage: /provider"),
        ("/provider openai ftp://x", {}, "must be an http"),
        ("/set ore.model.timeout soon", {}, "ore.model.timeout must be"),
        ("/set ore.model.api_key sk-1", {}, "would store a credential"),
        ("/set ore.model.max_tool_rounds 4", {"ore.model.max_tool_rounds": "4"}, "set"),
    ],
)
def test_slash_commands_write_the_model_keys_or_refuse(
    command: str, metadata: dict[str, str], notice: str
) -> None:
    """/provider and /set write valid values and refuse bad ones, and servers the operator
    does not allow, with nothing stored."""
    from actors.testing import SessionKit

    allowed = ["https://api.openai.com/v1", "http://127.0.0.1:11434/v1", "http://127.0.0.1:9/v1"]
    kit = SessionKit(model_servers=allowed)
    out = kit.send(command)
    assert out.reply.consumed
    assert any(notice in text for _at, _kind, _sev, text in out.live), out.live
    assert dict(kit.state.stored.metadata) == metadata
