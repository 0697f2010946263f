"""Real models end to end: sessions on real processes talking to the fake server over
loopback HTTP, with tools, interrupts, crashes and bad settings."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from actor_helpers import model_host
from conftest import wait_for
from fake_models import FakeModelServer, chunk, tool_delta, usage_chunk

from actors.errors import InvalidRequest
from actors.host import Host
from spine import Kind

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    s = FakeModelServer()
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def mp(tmp_path: pathlib.Path, server: FakeModelServer, no_leftover_processes):  # type: ignore[no-untyped-def]
    # The operator allows the fake server: sessions then name it themselves.
    with model_host(tmp_path / "data", [server.url]) as h:
        yield h


def _point(h: Host, sid: str, server: FakeModelServer) -> None:
    """Configure the session the way a user would: slash commands."""
    for cmd in (f"/provider openai {server.url}", "/model fake-1"):
        ack = h.send(sid, cmd)
        assert ack.consumed and ack.notices and ack.notices[0][0] == "success", ack.notices


TWO_ROUNDS: list[list[Any]] = [
    [
        (
            "sse",
            [
                chunk(content="Checking."),
                chunk(tool_calls=[tool_delta(0, "call_a", "calculator", '{"expression": "2+3"}')]),
                chunk(tool_calls=[tool_delta(1, "call_b", "clock", "{}")]),
                chunk(finish="tool_calls"),
                usage_chunk(20, 8, cached=4),
            ],
        ),
        ("done",),
    ],
    [("sse", [chunk(content="It is 5."), chunk(finish="stop"), usage_chunk(40, 3)]), ("done",)],
]


def test_a_two_round_tool_conversation_is_stored_in_order_with_usage(
    mp: Host, server: FakeModelServer
) -> None:
    """/provider and /model point a session at the server; a turn with two tool calls
    stores text, calls, results and the answer in order, and usage in the projection."""
    sid = mp.create()
    _point(mp, sid, server)
    server.queue(*TWO_ROUNDS)
    ack = mp.send(sid, "what is 2+3, and what time is it?")
    done = mp.wait_turn(sid, ack.seq)
    assert done.kind == Kind.TURN_COMPLETED and done.stop_reason == "end_turn", done
    evs = [e for e in mp.history(sid) if e.seq > ack.seq]
    shape = [(e.kind, e.text or e.tool or e.action) for e in evs if e.kind != Kind.LIFECYCLE]
    # Each call's admission, intent, outcome and result in that order, stored as that
    # call ends: the two calls run concurrently, so they may interleave either way.
    middle = shape[7:15]
    for tool in ("calculator", "clock"):
        assert [k for k, t in middle if t == tool] == [
            Kind.ACTION_ADMITTED,
            Kind.ACTION_STARTED,
            Kind.ACTION_COMPLETED,
            Kind.TOOL_RESULT,
        ]
    assert shape[:7] + shape[15:] == [
        (Kind.TURN_STARTED, ""),
        (Kind.ACTION_ADMITTED, "model"),
        # No ore.model.context_window and a server that does not say: the table's answer.
        (Kind.CONTEXT_WINDOW, ""),
        (Kind.ASSISTANT, "Checking."),
        (Kind.ACTION_COMPLETED, "model"),
        (Kind.TOOL_CALL, "calculator"),
        (Kind.TOOL_CALL, "clock"),
        (Kind.ACTION_ADMITTED, "model"),
        (Kind.ASSISTANT, "It is 5."),
        (Kind.ACTION_COMPLETED, "model"),
        (Kind.TURN_COMPLETED, ""),
    ]
    calls = [e.call for e in evs if e.kind == Kind.ACTION_ADMITTED]
    assert calls == [e.seq for e in evs if e.kind == Kind.ACTION_ADMITTED]
    results = {e.tool_use_id: e.result for e in evs if e.kind == Kind.TOOL_RESULT}
    assert results["call_a"] == "5"
    assert done.usage is not None
    assert (done.usage.input_tokens, done.usage.output_tokens) == (60, 11)
    assert done.usage.cache_read_tokens == 4
    assert [u["prompt_tokens"] for u in done.extra["providerUsage"]] == [20, 40]
    status = wait_for(lambda: (s := mp.status(sid)).turns == 1 and s, 10)
    assert status.usage.input_tokens == 60 and status.usage.cache_read_tokens == 4
    # The second model call got both results back, matched by the provider's ids.
    second = server.requests[1]["body"]["messages"]
    assert {m["tool_call_id"]: m["content"] for m in second if m["role"] == "tool"}["call_a"] == "5"


def test_an_interrupt_closes_a_turn_whose_server_went_silent(
    mp: Host, server: FakeModelServer
) -> None:
    """The server sends a few words then nothing: an interrupt closes the turn at once,
    keeping the partial text and usage, and the next message runs normally."""
    sid = mp.create()
    _point(mp, sid, server)
    server.queue(
        # Usage first, as Anthropic's message_start sends it: it rides with the words.
        [("sse", [usage_chunk(7, 2), chunk(content="Thinking about")]), ("stall",)],
        [("sse", [chunk(content="fresh answer"), chunk(finish="stop")]), ("done",)],
    )
    seen: list[str] = []
    got_words = threading.Event()

    def sink(session: str, event: Any, live: Any) -> None:
        if session == sid and live is not None and live[0] == "assistant.delta":
            seen.append(live[2])
            if "".join(seen) == "Thinking about":
                got_words.set()

    mp.add_sink(sink)
    ack = mp.send(sid, "a hard question")
    # The words before the silence reach the session (and conduits) without more chunks.
    assert got_words.wait(20), seen
    t0 = time.perf_counter()
    mp.interrupt(sid, reason="user pressed stop")
    ended = mp.wait_turn(sid, ack.seq)
    elapsed = time.perf_counter() - t0
    assert ended.kind == Kind.TURN_CANCELLED, ended
    assert ended.text == "Thinking about"
    assert ended.usage is not None and ended.usage.output_tokens == 2
    # Far below the 60 s the server would stay silent and the idle timeout.
    assert elapsed < 5, elapsed
    nxt = mp.send(sid, "again")
    done = mp.wait_turn(sid, nxt.seq)
    assert done.kind == Kind.TURN_COMPLETED and done.stop_reason == "end_turn"
    assert [e.text for e in mp.history(sid) if e.kind == Kind.ASSISTANT][-1] == "fresh answer"


def test_a_session_killed_mid_stream_continues_the_same_conversation(
    mp: Host, server: FakeModelServer
) -> None:
    """SIGKILL while the model streams: the restarted session sends the next message with
    the whole conversation so far (messages, tool calls and results) rebuilt from its
    stream."""
    sid = mp.create()
    _point(mp, sid, server)
    server.queue(*TWO_ROUNDS)
    first = mp.send(sid, "what is 2+3?")
    assert mp.wait_turn(sid, first.seq).kind == Kind.TURN_COMPLETED
    server.queue([("sse", [chunk(content="half of an ans")]), ("stall",)])
    cut = mp.send(sid, "tell me a story")
    server.wait_requests(3)
    pid = mp.session_pid(sid)
    os.kill(pid, signal.SIGKILL)
    ended = mp.wait_turn(sid, cut.seq)
    assert ended.kind == Kind.TURN_CANCELLED and ended.reason == "crash"
    server.queue([("sse", [chunk(content="Where was I?"), chunk(finish="stop")]), ("done",)])
    nxt = mp.send(sid, "go on")
    assert mp.wait_turn(sid, nxt.seq).kind == Kind.TURN_COMPLETED
    assert mp.session_pid(sid) != pid
    sent = server.requests[-1]["body"]["messages"]
    users = [m["content"] for m in sent if m["role"] == "user"]
    assert users == ["what is 2+3?", "tell me a story", "go on"]
    assistant = [m for m in sent if m["role"] == "assistant"]
    assert assistant[0]["content"] == "Checking."
    assert [c["id"] for c in assistant[0]["tool_calls"]] == ["call_a", "call_b"]
    assert assistant[1]["content"] == "It is 5."
    assert [m["tool_call_id"] for m in sent if m["role"] == "tool"] == ["call_a", "call_b"]


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"ore.model.provider": "gemini"}, "ore.model.provider must be one of"),
        ({"ore.model.temperature": "warm"}, "ore.model.temperature must be a number"),
        ({"ore.model.provider": "openai", "ore.model.base_url": "OURS"}, "needs a model name"),
        # The operator's own writes too: the model client checks the server every turn.
        ({"ore.model.provider": "openai"}, "its vendor's server https://api.openai.com"),
        (
            {"ore.model.provider": "openai", "ore.model.name": "m", "ore.model.base_url": "URL"},
            "ore.model.base_url: its server http://127.0.0.1:",
        ),
    ],
)
def test_a_bad_setting_fails_the_turn_and_the_next_message_runs(
    mp: Host, server: FakeModelServer, settings: dict[str, str], error: str
) -> None:
    """Unknown provider, non-numeric temperature, no model, a server the operator does not
    allow: the turn closes with turn.completed carrying the error; after fixing it, the
    next turn runs."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    given = {"URL": f"http://127.0.0.1:{port}/v1", "OURS": server.url}
    settings = {k: given.get(v, v) for k, v in settings.items()}
    sid = mp.create()
    mp.set_metadata(sid, settings)
    ack = mp.send(sid, "hello")
    done = mp.wait_turn(sid, ack.seq)
    assert done.kind == Kind.TURN_COMPLETED and done.stop_reason == "error"
    assert error in done.error, done.error
    mp.set_metadata(sid, {k: None for k in settings})
    nxt = mp.send(sid, "hello again")
    ok = mp.wait_turn(sid, nxt.seq)
    assert ok.kind == Kind.TURN_COMPLETED and ok.stop_reason == "end_turn" and not ok.error


def test_a_key_is_never_stored_whichever_way_it_is_written(mp: Host) -> None:
    """A credential in place of a variable name is refused by create, set_metadata and
    /set, and no event holds it."""
    key = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"
    with pytest.raises(InvalidRequest, match="looks like a key"):
        mp.create(metadata={"ore.model.api_key_env": key})
    sid = mp.create()
    with pytest.raises(InvalidRequest, match="looks like a key"):
        mp.set_metadata(sid, {"ore.model.api_key_env": key})
    ack = mp.send(sid, f"/set ore.model.api_key_env {key}")
    assert ack.consumed and ack.notices[0][0] == "error" and "looks like a key" in ack.notices[0][1]
    ack = mp.send(sid, "/set ore.model.api_key_env OPENAI_API_KEY")
    assert ack.notices[0][0] == "error" and "operator only" in ack.notices[0][1]
    mp.set_metadata(sid, {"ore.model.api_key_env": "OPENAI_API_KEY"})
    stored = json.dumps([repr(e) for e in mp.history(sid)])
    assert key not in stored and "sk-proj" not in stored
    assert mp.get(sid).metadata["ore.model.api_key_env"] == "OPENAI_API_KEY"
