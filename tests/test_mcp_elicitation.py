"""A server's question during an MCP tool call, end to end against real servers: the
test suite's SDK server (whose ``pick`` asks on a 2026-07-28 connection, inside the
call's result) and the reference server-everything under Node (a handshake-era server
that sends ``elicitation/create`` of its own). The question waits as ``action.pending``,
a human answers through the Host, the answer is stored and reaches the server; a crash
while it waits leaves the call in doubt and asks the server nothing again."""

from __future__ import annotations

import json
import os
import pathlib
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cli_support import Daemon, ok, run, stopped_after
from conftest import wait_for

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from test_mcp_e2e import SERVER, _data, _everything, _gone, _of, _simple, _stdio_server, _turn
from test_mcp_e2e import http_server as http_server  # the fixture

from actors.agents import ScriptedFactory
from actors.errors import InvalidRequest
from actors.host import Host
from spine import Event, Kind

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def calls(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """The file the server appends each round of ``pick`` to."""
    path = tmp_path / "calls.txt"
    monkeypatch.setenv("MCP_TEST_CALLS", str(path))
    monkeypatch.setenv("MCP_TEST_PIDFILE", str(tmp_path / "server.pid"))
    return path


_TOML = _stdio_server().replace(
    'env = ["MCP_TEST_PIDFILE"]', 'env = ["MCP_TEST_PIDFILE", "MCP_TEST_CALLS"]'
)


@pytest.fixture
def host(tmp_path: pathlib.Path, calls: pathlib.Path) -> Iterator[Host]:
    yield from _simple(_data(tmp_path, _TOML))
    _gone(tmp_path / "server.pid")


def _after(h: Host, sid: str, seq: int) -> list[Event]:
    return [e for e in h.history(sid) if e.seq > seq]


def _question(h: Host, sid: str, seq: int) -> Event:
    (q,) = wait_for(
        lambda: [
            e for e in _of(_after(h, sid, seq), Kind.ACTION_PENDING) if e.action == "elicitation"
        ],
        timeout=60,
    )
    return q


def test_a_servers_question_is_answered_by_a_human_and_the_answer_reaches_the_server(
    host: Host, calls: pathlib.Path
) -> None:
    sid = host.create(metadata={"mcp.servers": "notes"})
    ack = host.send(sid, "!tool notes.pick {}")
    q = _question(host, sid, ack.seq)
    asked = q.extra["elicitation"]
    assert (asked["server"], asked["tool"], asked["message"]) == ("notes", "pick", "Which color?")
    assert asked["requestedSchema"]["required"] == ["color"]
    assert [p.call for p in host.pending(sid)] == [q.call]
    # An answer that does not fit is refused; the question still waits.
    with pytest.raises(InvalidRequest, match="lacks 'color'"):
        host.approve(sid, q.call, content={})
    host.approve(sid, q.call, note="picked", content={"color": "red"})
    done = host.wait_turn(sid, ack.seq, timeout=60)
    assert done.stop_reason == "end_turn", done
    evs = _after(host, sid, ack.seq)
    (answer,) = [e for e in _of(evs, Kind.ACTION_APPROVAL) if e.call == q.call]
    assert answer.extra["elicitation"] == {"action": "accept", "content": {"color": "red"}}
    (result,) = _of(evs, Kind.TOOL_RESULT)
    assert result.result == "accept {'color': 'red'}" and not result.is_error
    # One call, asked once and answered once (the 2026-07-28 round trip).
    assert calls.read_text().split() == ["asked", "answered"]
    assert [e.tool for e in _of(evs, Kind.TOOL_CALL)] == ["notes.pick"]


def test_two_calls_asking_at_once_each_get_their_own_answer(host: Host) -> None:
    """Each question is tied to the call that asked it: answered by its call's id, each
    answer reaches its own call."""
    sid = host.create(metadata={"mcp.servers": "notes"})
    ack = host.send(sid, "!tool notes.pick {}\n!tool notes.pick {}")
    answered: dict[str, str] = {}

    def answer_all() -> bool:
        for q in host.pending(sid):
            color = f"c{len(answered)}"
            answered[q.tool_use_id] = color
            host.approve(sid, q.call, content={"color": color})
        return len(answered) == 2

    wait_for(answer_all, timeout=60)
    done = host.wait_turn(sid, ack.seq, timeout=60)
    assert done.stop_reason == "end_turn", done
    results = {r.tool_use_id: r.result for r in _of(_after(host, sid, ack.seq), Kind.TOOL_RESULT)}
    assert results == {u: f"accept {{'color': '{c}'}}" for u, c in answered.items()}


def test_a_declined_question_tells_the_server_decline(host: Host) -> None:
    sid = host.create(metadata={"mcp.servers": "notes"})
    ack = host.send(sid, "!tool notes.pick {}")
    q = _question(host, sid, ack.seq)
    host.reject(sid, q.call, "no")
    done = host.wait_turn(sid, ack.seq, timeout=60)
    assert done.stop_reason == "end_turn", done
    (result,) = _of(_after(host, sid, ack.seq), Kind.TOOL_RESULT)
    assert result.result == "decline None"


def test_an_interrupt_withdraws_the_question_and_the_server_serves_on(host: Host) -> None:
    sid = host.create(metadata={"mcp.servers": "notes"})
    ack = host.send(sid, "!tool notes.pick {}")
    q = _question(host, sid, ack.seq)
    host.interrupt(sid)
    done = host.wait_turn(sid, ack.seq, timeout=30)
    assert done.kind == Kind.TURN_CANCELLED, done
    (gone,) = [e for e in _of(_after(host, sid, ack.seq), Kind.ACTION_REJECTED) if e.call == q.call]
    assert gone.fault == "cancelled" and not host.pending(sid)
    (done,) = [
        host.wait_turn(sid, host.send(sid, '!tool notes.echo {"text": "x"}').seq, timeout=60)
    ]
    assert done.stop_reason == "end_turn"


def test_over_streamable_http_the_servers_timeout_never_runs_while_a_human_is_asked(
    tmp_path: pathlib.Path, http_server: str
) -> None:
    toml = f'[servers.web]\nurl = "{http_server}"\negress_allow = ["127.0.0.1"]\ntimeout = 1\n'
    for h in _simple(_data(tmp_path, toml)):
        sid = h.create(metadata={"mcp.servers": "web"})
        ack = h.send(sid, "!tool web.pick {}")
        q = _question(h, sid, ack.seq)
        # The human takes longer than the server may: that is the point, not a wait for
        # something to happen.
        time.sleep(1.5)
        h.approve(sid, q.call, content={"color": "blue"})
        done = h.wait_turn(sid, ack.seq, timeout=60)
        assert done.stop_reason == "end_turn", done
        (result,) = _of(_after(h, sid, ack.seq), Kind.TOOL_RESULT)
        assert result.result == "accept {'color': 'blue'}" and not result.is_error


def test_a_crash_while_a_question_waits_leaves_the_call_in_doubt_never_sent_again(
    tmp_path: pathlib.Path, calls: pathlib.Path, no_leftover_processes: Any
) -> None:
    """SIGKILL of the session process while the human has not answered: the question
    is withdrawn, the call is in doubt (by default a human is asked about that, once),
    and the server never hears the call again."""
    h = Host(_data(tmp_path, _TOML), base="multiprocTCPBase", timeout=30, factory=ScriptedFactory())
    try:
        sid = h.create(metadata={"mcp.servers": "notes"})
        ack = h.send(sid, "!tool notes.pick {}")
        q = _question(h, sid, ack.seq)
        os.kill(h.session_pid(sid), 9)
        (doubt,) = wait_for(lambda: _of(_after(h, sid, ack.seq), Kind.ACTION_IN_DOUBT), timeout=30)
        assert doubt.extra["resolution"] == "ask"
        evs = _after(h, sid, ack.seq)
        (gone,) = [e for e in _of(evs, Kind.ACTION_REJECTED) if e.call == q.call]
        assert (gone.fault, gone.reason) == ("cancelled", "crash")
        (p,) = h.pending(sid)  # the one question left: about the call in doubt
        assert p.call != q.call and p.action == "notes.pick"
        with pytest.raises(InvalidRequest):
            h.approve(sid, q.call, content={"color": "red"})
        assert not _of(evs, Kind.TOOL_RESULT)
        assert calls.read_text().split() == ["asked"]
    finally:
        h.close()


def test_the_command_line_answers_a_question_in_the_chat_and_with_approve_answer(
    tmp_path: pathlib.Path,
) -> None:
    """A daemon with the SDK server configured: the chat shows the question and takes a
    JSON object as the answer; `vertebra approve --answer` answers another."""
    data = tmp_path / "data"
    data.mkdir()
    toml = f"[servers.notes]\ncommand = {sys.executable!r}\nargs = [{str(SERVER)!r}]\n"
    (data / "mcp.toml").write_text(toml)
    with stopped_after(Daemon(data).start()) as d:
        ok(run(d.data, "new", "q", "--meta", "mcp.servers=notes"))
        text = ok(run(d.data, "chat", "q", stdin='!tool notes.pick {}\n{"color": "red"}\n'))
        assert "question from notes.pick (action " in text and "Which color?" in text
        assert "accept {'color': 'red'}" in text
        ok(run(d.data, "send", "q", "!tool notes.pick {}", "--no-wait"))

        def waiting() -> list[dict[str, Any]]:
            lines = ok(run(d.data, "pending", "q", "--json")).splitlines()
            return [json.loads(x) for x in lines if x.strip()]

        (q,) = wait_for(waiting, 60)
        assert q["action"] == "elicitation" and q["input"]["message"] == "Which color?"
        call = str(q["call"])
        out = ok(run(d.data, "approve", "q", call, "--answer", '{"color": "green"}'))
        assert f"action {call} approved" in out
        wait_for(lambda: "accept {'color': 'green'}" in ok(run(d.data, "history", "q")), 60)


def test_the_reference_servers_elicitation_request_is_answered_by_a_human(
    tmp_path: pathlib.Path, no_leftover_processes: Any
) -> None:
    command = _everything()
    toml = f'[servers.everything]\ncommand = "{command}"\nargs = ["stdio"]\n'
    for h in _simple(_data(tmp_path, toml)):
        sid = h.create(metadata={"mcp.servers": "everything"})
        ack = h.send(sid, "!tool everything.trigger-elicitation-request {}")
        q = _question(h, sid, ack.seq)
        assert q.extra["elicitation"]["requestedSchema"]["required"] == ["name"]
        h.approve(sid, q.call, content={"name": "Ada", "check": True})
        done = h.wait_turn(sid, ack.seq, timeout=60)
        assert done.stop_reason == "end_turn", done
        (result,) = _of(_after(h, sid, ack.seq), Kind.TOOL_RESULT)
        assert "provided the requested information" in result.result and "Ada" in result.result
        # A tool the server runs only as a task is refused before anything is sent.
        done, evs = _turn(h, sid, '!tool everything.simulate-research-query {"topic": "x"}')
        (result,) = _of(evs, Kind.TOOL_RESULT)
        assert result.is_error and "cannot run tasks" in result.result
        assert not _of(evs, Kind.ACTION_IN_DOUBT) and not _of(evs, Kind.ACTION_PENDING)
