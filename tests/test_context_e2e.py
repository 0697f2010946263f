"""Sessions that outgrow their model's context window keep working: real session
processes against a server on loopback that refuses any request over its window with
the real error shape; after a restart, the requests are the ones the log gives, byte for
byte."""

from __future__ import annotations

import hashlib
import json
import pathlib
from collections.abc import Iterator
from typing import Any

import attrs
import orjson
import pytest
from context_server import TOOLS, WindowServer, overflow, replayed
from fake_models import FakeModelServer

from actors.agents import ModelAgent, ModelFactory, ToolRegistry
from actors.agents.http import HttpProvider
from actors.agents.scripted import ScriptedProvider
from actors.host import Host
from actors.session.rules import commands as c
from actors.session.shell.recall import rooted
from actors.session.shell.worker import TurnWorker
from actors.spec import AgentSpec, ContextView, TurnInput
from spine import Event, Kind, SqliteLog
from spine.seal import merkle_root, row_leaf_hash

pytestmark = pytest.mark.timeout(180)

N_CTX = 1024


def _host(path: pathlib.Path, url: str) -> Host:
    """A Host whose operator allows the model server at ``url``."""
    return Host(
        path / "data",
        base="multiprocTCPBase",
        timeout=20,
        factory=ModelFactory(TOOLS, backoff=0.01),
        model_servers=[url],
    )


@pytest.fixture
def server() -> Iterator[WindowServer]:
    s = WindowServer(N_CTX)
    try:
        yield s
    finally:
        s.close()


def _point(h: Host, sid: str, url: str, **extra: str) -> None:
    h.set_metadata(
        sid,
        {
            "ore.model.provider": "openai",
            "ore.model.base_url": url,
            "ore.model.name": "fake-1",
            **extra,
        },
    )


def _say(h: Host, sid: str, text: str) -> Event:
    ack = h.send(sid, text)
    return h.wait_turn(sid, ack.seq, timeout=60)


def _message(i: int) -> str:
    return f"m{i} " + f"line {i} of a conversation that goes on and on. " * 6


def _root(h: Host, sid: str, first: int, last: int) -> str:
    rows = h._log.read(sid, first - 1, last - first + 1)
    assert [r.seq for r in rows] == list(range(first, last + 1))
    return merkle_root([row_leaf_hash(r.payload, r.version) for r in rows]).hex()


def _first_answered(server: WindowServer) -> list[bytes]:
    """The first answered main request of each turn (its last message is the user's)."""
    out = []
    for raw, _, ok, summary in server.log:
        last = orjson.loads(raw)["messages"][-1]
        if ok and not summary and last["role"] == "user":
            out.append(raw)
    return out


def test_a_session_outlives_its_window_and_replays_its_requests_byte_for_byte(
    tmp_path: pathlib.Path, server: WindowServer, no_leftover_processes: None
) -> None:
    h = _host(tmp_path, server.url)
    try:
        sid = h.create()
        _point(h, sid, server.url)
        for i in range(24):
            text = f"!blob 40000 {i}" if i % 8 == 7 else _message(i)
            if i == 9:
                # The model reads a cut result back by its seq.
                blob = next(e for e in h.history(sid) if e.kind == Kind.TOOL_RESULT)
                text = f"!recall {blob.seq}"
            done = _say(h, sid, text)
            assert done.kind == Kind.TURN_COMPLETED and not done.error, done
    finally:
        h.close()
    h = _host(tmp_path, server.url)  # a restart: a new incarnation folds the stored stream
    try:
        for i in range(24, 30):
            done = _say(h, sid, _message(i))
            assert done.kind == Kind.TURN_COMPLETED and not done.error, done
        events = h.history(sid)
        report = h.context(sid)
        roots = {
            e.seq: _root(h, sid, e.extra["fromSeq"], e.extra["toSeq"])
            for e in events
            if e.kind == Kind.CONTEXT_COMPACTED
        }
    finally:
        h.close()
    assert report["window"] == N_CTX and report["windowSource"] == "llama.cpp /props"
    assert 0 < report["estimate"] < N_CTX and report["lastInputTokens"] > 0
    assert report["lastCompaction"]["toSeq"] > report["lastCompaction"]["fromSeq"]
    refused = [t for _, t, ok, _ in server.log if not ok]
    assert refused == [], f"{len(refused)} requests over the window"
    assert max(t for _, t, _, _ in server.log) <= N_CTX
    (window,) = [e for e in events if e.kind == Kind.CONTEXT_WINDOW]
    assert window.extra["tokens"] == N_CTX and window.extra["source"] == "llama.cpp /props"
    compactions = [e for e in events if e.kind == Kind.CONTEXT_COMPACTED]
    assert len(compactions) >= 2 and all(e.text.startswith("summary of") for e in compactions)
    assert all(e.extra["fromSeq"] <= e.extra["toSeq"] for e in compactions)
    # Each names the Merkle root of exactly the stored events it stands for.
    assert all(e.extra["root"] == roots[e.seq] for e in compactions)
    # Never destructive: every message said is still stored, and the whole big results.
    said = [e.text for e in events if e.kind == Kind.USER_MESSAGE]
    assert len(said) == 30 and said[0] == _message(0)
    results = [e for e in events if e.kind == Kind.TOOL_RESULT]
    assert all(len(e.result) == 40000 for e in results if e.tool == "blob")
    (recalled,) = [e for e in results if e.tool == "recall"]
    assert recalled.result.startswith("[event ") and "characters 0 to 500 of 40000" in (
        recalled.result
    )
    assert recalled.result.endswith("\n" + "b" * 500)
    # Live == replay: each turn's request is the one the log gives, byte for byte, on
    # both sides of the restart.
    assert _first_answered(server) == replayed(events, sid)


def test_an_overflow_the_estimate_missed_is_answered_by_one_compaction_and_a_retry(
    tmp_path: pathlib.Path, no_leftover_processes: None
) -> None:
    """The setting claims a window far larger than the server's: the server's refusal
    (OpenAI's context_length_exceeded) compacts and retries; a message too large for any
    view fails its turn with an error saying so, and the session serves on."""
    server = WindowServer(N_CTX, announce=False, style="openai")
    h = _host(tmp_path, server.url)
    try:
        sid = h.create()
        _point(h, sid, server.url, **{"ore.model.context_window": "100000"})
        for i in range(20):
            done = _say(h, sid, _message(i))
            assert done.kind == Kind.TURN_COMPLETED and not done.error, done
        refused = [t for _, t, ok, _ in server.log if not ok]
        assert refused, "the server never refused: the test did not reach the window"
        events = h.history(sid)
        assert any(e.kind == Kind.CONTEXT_COMPACTED for e in events)
        done = _say(h, sid, "huge " + "h" * 8000)
        assert done.kind == Kind.TURN_COMPLETED
        assert "does not fit the model's context window" in done.error, done.error
        done = _say(h, sid, "small again")
        assert done.kind == Kind.TURN_COMPLETED and not done.error, done
    finally:
        h.close()
        server.close()


# -- every wire format's overflow answer, at the tool loop ---------------------------------

_OVERFLOW = {
    "openai": overflow("openai", 9000, 8192),
    "llama": overflow("llama", 9000, 8192),
    "anthropic": {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "prompt is too long: 210000 tokens > 200000 maximum",
        },
    },
    "responses": {
        "error": {
            "message": "Your input exceeds the context window of this model.",
            "type": "invalid_request_error",
            "param": "input",
            "code": "context_length_exceeded",
        }
    },
}


def _whole(fmt: str, text: str) -> dict[str, Any]:
    if fmt == "anthropic":
        return {
            "type": "message",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 50, "output_tokens": 5},
        }
    if fmt == "responses":
        return {
            "object": "response",
            "status": "completed",
            "output": [{"type": "message", "content": [{"type": "output_text", "text": text}]}],
            "usage": {"input_tokens": 50, "output_tokens": 5},
        }
    return {
        "object": "chat.completion",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 50, "completion_tokens": 5},
    }


@pytest.mark.parametrize("style", ["openai", "llama", "anthropic", "responses"])
def test_each_wire_formats_overflow_error_compacts_and_retries_once(style: str) -> None:
    fmt = "openai" if style in ("openai", "llama") else style
    server = FakeModelServer()
    try:
        server.queue(
            [("status", 400, {}, json.dumps(_OVERFLOW[style]))],
            [("status", 200, {}, json.dumps(_whole(fmt, "the summary")))],
            [("status", 200, {}, json.dumps(_whole(fmt, "the answer")))],
        )
        provider = HttpProvider(fmt, base_url=server.url, api_key=None, backoff=0.01)
        agent = ModelAgent(AgentSpec(model="fake", provider=fmt), provider, ToolRegistry())
        history = (("user", "old question"), ("assistant", "old answer"))
        ti = TurnInput(
            session_id="s",
            turn=2,
            text="new question",
            history=history,
            context=ContextView(seqs=(3, 7), window=100_000, window_source="setting"),
        )
        out = _Worker()
        fin = out.run(agent, ti)
        assert fin.stop_reason == "end_turn" and not fin.error, fin.error
        (comp,) = out.events(Kind.CONTEXT_COMPACTED)
        assert comp.text == "the summary" and (comp.extra["fromSeq"], comp.extra["toSeq"]) == (3, 7)
        bodies = [r["body"] for r in server.wait_requests(3)]
        assert b"the summary" in json.dumps(bodies[2]).encode()
        assert b"old question" not in json.dumps(bodies[2]).encode()
    finally:
        server.close()


class _Worker:
    """A turn worker whose hand-backs are kept; the gate admits everything."""

    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.worker = TurnWorker(self._send, 2, 0.02)
        self.calls = 0

    def _send(self, msg: Any) -> None:
        if isinstance(msg, c.Govern):
            self.calls += 1
            self.worker.answer(msg.action, msg.tool_use_id, "admit", self.calls, "")
        else:
            self.sent.append(msg)

    def run(self, agent: ModelAgent, ti: TurnInput) -> c.Finished:
        self.worker.start(agent, ti)
        assert self.worker.done.wait(20)
        fin = self.sent[-1]
        assert isinstance(fin, c.Finished)
        return fin

    def events(self, kind: str) -> list[Event]:
        return [
            e
            for p in self.sent
            if isinstance(p, (c.Progress, c.Finished))
            for e in p.events
            if e.kind == kind
        ]


def test_a_goal_runs_turn_without_new_input_compacts_too_but_not_inside_a_tool_batch() -> None:
    """A turn that continues the conversation (``resume``, no open tool call) compacts
    like any; one that resumes a paused tool batch does not."""
    agent = ModelAgent(AgentSpec(model="m"), ScriptedProvider("m"), ToolRegistry())
    said = tuple(
        ("user" if i % 2 == 0 else "assistant", f"turn {i} " + "w" * 400) for i in range(8)
    )
    ctx = ContextView(seqs=tuple(range(1, 9)), window=1000, keep_recent=1)
    ti = TurnInput(session_id="s", turn=5, text="", history=said, resume=True, context=ctx)
    out = _Worker()
    assert not out.run(agent, ti).error
    (comp,) = out.events(Kind.CONTEXT_COMPACTED)
    assert (comp.extra["fromSeq"], comp.extra["toSeq"]) == (1, 6)
    call = orjson.dumps({"id": "c1", "name": "clock", "input": "{}"}).decode()
    paused = (*said, ("tool.call", call))
    ti = attrs.evolve(ti, history=paused, context=attrs.evolve(ctx, seqs=tuple(range(1, 10))))
    out = _Worker()
    out.run(agent, ti)
    assert out.events(Kind.CONTEXT_COMPACTED) == []


def test_a_forced_compaction_runs_though_none_is_due() -> None:
    agent = ModelAgent(AgentSpec(model="m"), ScriptedProvider("m"), ToolRegistry())
    said = (("user", "q1"), ("assistant", "a1"), ("user", "q2"), ("assistant", "a2"))
    ctx = ContextView(seqs=(2, 4, 8, 10), window=100_000, keep_recent=1, force=True)
    out = _Worker()
    ti = TurnInput(session_id="s", turn=3, text="q3", history=said, context=ctx)
    assert not out.run(agent, ti).error
    (comp,) = out.events(Kind.CONTEXT_COMPACTED)
    assert (comp.extra["fromSeq"], comp.extra["toSeq"]) == (2, 4) and comp.text
    out = _Worker()
    out.run(agent, attrs.evolve(ti, context=attrs.evolve(ctx, force=False)))
    assert out.events(Kind.CONTEXT_COMPACTED) == []


def _orphans(raw: bytes) -> int:
    """Tool calls without their result, or results without their call, in one request."""
    msgs = orjson.loads(raw)["messages"]
    asked = {c["id"] for m in msgs for c in m.get("tool_calls") or []}
    answered = {m["tool_call_id"] for m in msgs if m["role"] == "tool"}
    return len(asked ^ answered)


def test_hundreds_of_turns_stay_under_the_window_and_stay_verifiable(
    tmp_path: pathlib.Path, no_leftover_processes: None
) -> None:
    """The benchmark's case in small (``bench/context_live.py`` runs 10,000 turns): 300
    turns with a 20 KB tool result every tenth, against a 1024-token window, restarted
    half-way. No request passes the window, the session compacts again and again, every
    turn's request is the one its log gives, the status says where the context stands
    without folding the stream, and the whole stream still seals and verifies."""
    server = WindowServer(N_CTX)
    turns = 300
    try:
        h = _host(tmp_path, server.url)
        try:
            sid = h.create()
            _point(h, sid, server.url)
            for n in range(1, turns + 1):
                if n == turns // 2 + 1:
                    h.close()
                    h = _host(tmp_path, server.url)
                text = f"!blob 20000 {n}" if n % 10 == 0 else f"m{n} " + "words " * 8
                done = _say(h, sid, text)
                assert done.kind == Kind.TURN_COMPLETED and not done.error, (n, done)
            events = h.history(sid)
            status = h.status(sid).context
            assert h.seal(sid).seq > 0
            verified = h.verify(sid)
        finally:
            h.close()
    finally:
        server.close()
    assert [t for _, t, ok, _ in server.log if not ok] == []
    assert max(t for _, t, _, _ in server.log) <= N_CTX
    assert [raw for raw, _, _, _ in server.log if _orphans(raw)] == []
    compactions = [e for e in events if e.kind == Kind.CONTEXT_COMPACTED]
    assert len(compactions) >= 10
    assert sum(1 for e in events if e.kind == Kind.USER_MESSAGE) == turns
    assert server.turn_digests == [hashlib.sha256(b).digest() for b in replayed(events, sid)]
    last = compactions[-1].extra
    assert (status.window, status.source) == (N_CTX, "llama.cpp /props")
    assert status.compactions == len(compactions)
    assert status.covered == (last["fromSeq"], last["toSeq"])
    assert 0 < status.used <= N_CTX
    assert verified.ok, verified.summary


def test_a_compactions_root_is_its_spans_whoever_hashed_the_span_before(
    tmp_path: pathlib.Path,
) -> None:
    """Each compaction's root is the Merkle root of exactly the events first..last, though
    only the events since the last one are hashed again; another log whose stream has the
    same id, or a span that starts elsewhere, is hashed whole."""

    def compaction(first: int, last: int) -> Event:
        return Event(kind=Kind.CONTEXT_COMPACTED, extra={"fromSeq": first, "toSeq": last})

    def want(log: SqliteLog, first: int, last: int) -> str:
        rows = log.read("same-id", first - 1, last - first + 1)
        return merkle_root([row_leaf_hash(r.payload, r.version) for r in rows]).hex()

    with SqliteLog(tmp_path / "a.db") as a, SqliteLog(tmp_path / "b.db") as b:
        a.append("same-id", [Event(kind=Kind.ASSISTANT, text=f"a{i}") for i in range(40)])
        b.append("same-id", [Event(kind=Kind.ASSISTANT, text=f"b{i}") for i in range(40)])
        for log, first, last in [(a, 1, 5), (a, 1, 17), (a, 1, 17), (a, 1, 33), (b, 1, 35),
                                 (a, 1, 36), (a, 4, 38), (a, 1, 12), (a, 1, 40)]:  # fmt: skip
            ev = rooted(log, "same-id", compaction(first, last))
            assert ev.extra["root"] == want(log, first, last), (first, last)
            assert ev.extra["count"] == last - first + 1
        assert "root" not in rooted(a, "same-id", compaction(1, 41)).extra
