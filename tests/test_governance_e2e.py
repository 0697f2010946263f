"""Governance end to end on real processes: every gate outcome, an approval that outlives
a SIGKILL, egress refused and allowed, and the status projection that folds them."""

from __future__ import annotations

import http.server
import json
import os
import pathlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from actor_helpers import governed_tools
from conftest import wait_for
from fake_models import FakeModelServer, chunk, tool_delta

from actors.agents import ModelFactory
from actors.errors import InvalidRequest
from actors.host import Host
from projections import project
from spine import Kind

pytestmark = pytest.mark.timeout(120)


class _Hello(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = b"hello"
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def web() -> Iterator[str]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02})
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/"
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    s = FakeModelServer()
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def mp(tmp_path: pathlib.Path, server: FakeModelServer, no_leftover_processes):  # type: ignore[no-untyped-def]
    h = Host(
        tmp_path / "data",
        base="multiprocTCPBase",
        timeout=20,
        factory=ModelFactory(tools=governed_tools(), backoff=0.01),
        model_servers=[server.url],
    )
    try:
        yield h
    finally:
        h.close()


def _turn(h: Host, sid: str, text: str) -> list[Any]:
    ack = h.send(sid, text)
    done = h.wait_turn(sid, ack.seq)
    assert done.kind == Kind.TURN_COMPLETED, done
    return [e for e in h.history(sid) if ack.seq < e.seq <= done.seq]


def _results(evs: list[Any]) -> list[tuple[str, bool]]:
    return [(e.result, e.is_error) for e in evs if e.kind == Kind.TOOL_RESULT]


def _wait_pending(h: Host, sid: str) -> Any:
    return wait_for(lambda: h.pending(sid), 20)[0]


def test_every_gate_outcome_on_real_processes(mp: Host, web: str, tmp_path: pathlib.Path) -> None:
    """An admitted call, a capability denied, egress blocked then allowed, an approval
    granted after a SIGKILL of the waiting session (the tool runs once), an approval
    rejected, a budget exhausted mid-turn; the projection matches a fold of the stream."""
    log = tmp_path / "deploys.txt"
    sid = mp.create(metadata={"governance.capabilities": "net,clock"})

    evs = _turn(mp, sid, '!tool calculator {"expression": "2+2"}')
    assert _results(evs) == [("4", False)]

    evs = _turn(mp, sid, '!tool shell {"log": "x"}')
    (rej,) = [e for e in evs if e.kind == Kind.ACTION_REJECTED]
    assert (rej.action, rej.fault) == ("shell", "capability_denied")
    assert "refused by governance (capability_denied)" in _results(evs)[0][0]

    evs = _turn(mp, sid, "!tool http_get " + json.dumps({"url": web}))
    (eg,) = [e for e in evs if e.kind == Kind.EGRESS]
    assert (eg.host, eg.allowed, eg.reason) == ("127.0.0.1", False, "loopback")
    # Refused by the gate before the tool runs; the rejection names the destination.
    assert _results(evs)[0] == ("not run: refused by governance (egress_refused)", True)
    (rej,) = [e for e in evs if e.kind == Kind.ACTION_REJECTED]
    assert rej.error == "egress to 127.0.0.1 refused: loopback"

    mp.set_metadata(sid, {"governance.egress_allow": "127.0.0.1/32"})
    evs = _turn(mp, sid, "!tool http_get " + json.dumps({"url": web}))
    (eg,) = [e for e in evs if e.kind == Kind.EGRESS]
    assert (eg.allowed, eg.reason) == (True, "allowlisted")
    assert _results(evs) == [("HTTP 200\nhello", False)]

    # An action that needs a human: the session is killed while it waits.
    args = json.dumps({"log": str(log), "target": "a"})
    ack = mp.send(sid, f"!tool deploy {args}")
    waiting = _wait_pending(mp, sid)
    assert waiting.action == "deploy" and json.loads(waiting.input)["target"] == "a"
    assert [x.call for x in wait_for(lambda: mp.status(sid).pending, 20)] == [waiting.call]
    pid = mp.session_pid(sid)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: mp.session_pid(sid) != pid, 20)
    assert mp.pending(sid)[0].call == waiting.call  # still waiting after the restart
    assert not log.exists()
    mp.approve(sid, waiting.call, note="go ahead")
    done = mp.wait_turn(sid, ack.seq)
    assert done.kind == Kind.TURN_COMPLETED, done
    assert log.read_text() == "deploy a\n"
    again = mp.approve(sid, waiting.call)
    assert again.duplicate
    evs = [e for e in mp.history(sid) if e.seq > ack.seq]
    assert [e.text for e in evs if e.kind == Kind.ASSISTANT] == ["deploy returned deployed a"]
    assert not [e for e in mp.history(sid) if e.kind == Kind.TURN_CANCELLED]

    args = json.dumps({"log": str(log), "target": "b"})
    ack = mp.send(sid, f"!tool deploy {args}")
    waiting = _wait_pending(mp, sid)
    mp.reject(sid, waiting.call, reason="not today")
    done = mp.wait_turn(sid, ack.seq)
    evs = [e for e in mp.history(sid) if ack.seq < e.seq <= done.seq]
    (rej,) = [e for e in evs if e.kind == Kind.ACTION_REJECTED]
    assert rej.fault == "approval_rejected"
    assert log.read_text() == "deploy a\n"  # b never ran
    with pytest.raises(InvalidRequest, match="already rejected"):
        mp.approve(sid, waiting.call)
    with pytest.raises(InvalidRequest, match="no action 9999"):
        mp.approve(sid, 9999)

    admitted = mp.status(sid).admitted
    tools_so_far = sum(
        1 for e in mp.history(sid) if e.kind == Kind.ACTION_ADMITTED and e.action != "model"
    )
    mp.set_metadata(sid, {"governance.max_tool_calls": str(tools_so_far + 1)})
    evs = _turn(
        mp,
        sid,
        '!tool calculator {"expression": "1+1"}\n!tool calculator {"expression": "2+2"}',
    )
    faults = [e.fault for e in evs if e.kind == Kind.ACTION_REJECTED]
    assert faults == ["budget_exceeded"]
    assert sorted(r for r, _ in _results(evs)) == [
        "2",
        "not run: refused by governance (budget_exceeded)",
    ]

    history = mp.history(sid)
    status = wait_for(lambda: (s := mp.status(sid)).turns == project(history).turns and s, 20)
    folded = project(history)
    assert status == folded
    assert status.admitted > admitted
    assert (status.egress_allowed, status.egress_blocked) == (1, 1)
    assert [(x.host, x.allowed, x.reason) for x in status.egress] == [
        ("127.0.0.1", False, "loopback"),
        ("127.0.0.1", True, "allowlisted"),
    ]
    assert status.rejected == 4 and status.containment == "standard"
    assert status.pending == ()
    blocked = [(a.action, a.fault) for a in status.actions if str(a.state) == "blocked"]
    assert blocked == [
        ("shell", "capability_denied"),
        ("http_get", "egress_refused"),
        ("deploy", "approval_rejected"),
        ("calculator", "budget_exceeded"),
    ]


def test_a_model_server_conversation_is_governed_the_same_way(
    mp: Host, server: FakeModelServer
) -> None:
    """Against the fake OpenAI-compatible server: one call admitted, one refused for a
    capability; the model gets the refusal as the tool's result."""
    sid = mp.create(
        metadata={
            "ore.model.provider": "openai",
            "ore.model.base_url": server.url,
            "ore.model.name": "fake",
            "governance.capabilities": "clock",
        }
    )
    server.queue(
        [
            (
                "sse",
                [
                    chunk(tool_calls=[tool_delta(0, "c1", "clock", "{}")]),
                    chunk(tool_calls=[tool_delta(1, "c2", "http_get", '{"url": "http://x/"}')]),
                    chunk(finish="tool_calls"),
                ],
            ),
            ("done",),
        ],
        [("sse", [chunk(content="done"), chunk(finish="stop")]), ("done",)],
    )
    evs = _turn(mp, sid, "what time is it, and fetch x")
    acts = [(e.kind, e.action, e.fault) for e in evs if e.kind.startswith("action.")]
    assert (Kind.ACTION_ADMITTED, "clock", "") in acts
    assert (Kind.ACTION_REJECTED, "http_get", "capability_denied") in acts
    sent = {
        m.get("tool_call_id"): m["content"]
        for m in server.requests[1]["body"]["messages"]
        if m["role"] == "tool"
    }
    assert "capability_denied" in sent["c2"]
    assert not [e for e in evs if e.kind == Kind.EGRESS]  # refused before any dial


def _calls(*calls: tuple[str, str, dict[str, Any]]) -> list[Any]:
    """A model response asking for ``calls`` (id, tool, arguments) in one go."""
    chunks = [
        chunk(tool_calls=[tool_delta(i, cid, name, json.dumps(args))])
        for i, (cid, name, args) in enumerate(calls)
    ]
    return [("sse", [*chunks, chunk(finish="tool_calls")]), ("done",)]


def test_every_gate_outcome_against_a_model_server(
    mp: Host, web: str, tmp_path: pathlib.Path, server: FakeModelServer
) -> None:
    """The same outcomes with the model on the fake OpenAI-compatible server (its answers
    after the tools are the server's default echo): admitted, capability denied, egress
    blocked then allowed, approval after a SIGKILL, approval rejected, budget exhausted."""
    log = tmp_path / "deploys.txt"
    sid = mp.create(
        metadata={
            "ore.model.provider": "openai",
            "ore.model.base_url": server.url,
            "ore.model.name": "fake",
            "governance.capabilities": "net,clock",
        }
    )
    server.queue(_calls(("a1", "calculator", {"expression": "3*3"}), ("a2", "shell", {})))
    evs = _turn(mp, sid, "compute, then run a shell")
    assert ("9", False) in _results(evs)
    assert [e.fault for e in evs if e.kind == Kind.ACTION_REJECTED] == ["capability_denied"]

    server.queue(_calls(("b1", "http_get", {"url": web})))
    evs = _turn(mp, sid, "fetch it")
    assert [(e.allowed, e.reason) for e in evs if e.kind == Kind.EGRESS] == [(False, "loopback")]
    mp.set_metadata(sid, {"governance.egress_allow": "127.0.0.1"})
    server.queue(_calls(("c1", "http_get", {"url": web})))
    evs = _turn(mp, sid, "fetch it again")
    assert [(e.allowed, e.reason) for e in evs if e.kind == Kind.EGRESS] == [(True, "allowlisted")]

    server.queue(_calls(("d1", "deploy", {"log": str(log), "target": "a"})))
    ack = mp.send(sid, "deploy a")
    waiting = _wait_pending(mp, sid)
    pid = mp.session_pid(sid)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: mp.session_pid(sid) != pid, 20)
    mp.approve(sid, waiting.call)
    assert mp.wait_turn(sid, ack.seq).kind == Kind.TURN_COMPLETED
    assert log.read_text() == "deploy a\n"
    # The resumed turn sent the tool's result back under the server's own call id.
    last = server.requests[-1]["body"]["messages"]
    assert {m.get("tool_call_id"): m["content"] for m in last if m["role"] == "tool"}[
        "d1"
    ] == "deployed a"

    server.queue(_calls(("e1", "deploy", {"log": str(log), "target": "b"})))
    ack = mp.send(sid, "deploy b")
    mp.reject(sid, _wait_pending(mp, sid).call, reason="no")
    assert mp.wait_turn(sid, ack.seq).kind == Kind.TURN_COMPLETED
    assert log.read_text() == "deploy a\n"

    used = sum(1 for e in mp.history(sid) if e.kind == Kind.ACTION_ADMITTED and e.action != "model")
    mp.set_metadata(sid, {"governance.max_tool_calls": str(used + 1)})
    server.queue(
        _calls(("f1", "calculator", {"expression": "1"}), ("f2", "calculator", {"expression": "2"}))
    )
    evs = _turn(mp, sid, "two sums")
    assert [e.fault for e in evs if e.kind == Kind.ACTION_REJECTED] == ["budget_exceeded"]

    history = mp.history(sid)
    status = wait_for(lambda: (s := mp.status(sid)) == project(history) and s, 20)
    assert (status.egress_allowed, status.egress_blocked, status.rejected) == (1, 1, 4)
    assert status.pending == ()


def test_a_fetch_the_egress_guard_refuses_is_rejected_before_anyone_is_asked(mp: Host) -> None:
    """A sandboxed session fetches the cloud metadata address and a name that resolves to
    loopback: both are refused by the gate (fault egress_refused, the guard's decision in
    the egress ledger) and the turn ends without an approval request."""
    sid = mp.create(metadata={"governance.trust": "sandboxed"})
    fetches = [
        "!tool http_get " + json.dumps({"url": "http://169.254.169.254/latest/meta-data/"}),
        "!tool http_get " + json.dumps({"url": "http://localhost:9/"}),
    ]
    evs = _turn(mp, sid, "\n".join(fetches))
    assert not [e for e in mp.history(sid) if e.kind == Kind.ACTION_PENDING]
    rejected = [e for e in evs if e.kind == Kind.ACTION_REJECTED]
    assert [e.fault for e in rejected] == ["egress_refused", "egress_refused"]
    reasons = sorted(e.reason for e in evs if e.kind == Kind.EGRESS)
    assert reasons == ["loopback", "metadata"]
    assert [r for r, _ in _results(evs)] == ["not run: refused by governance (egress_refused)"] * 2
    status = wait_for(lambda: (s := mp.status(sid)).turns == 1 and s, 20)
    assert (status.pending, status.egress_blocked, status.rejected) == ((), 2, 2)
