"""MCP tools end to end against real servers: the test suite's own (the official SDK's
MCPServer over stdio and over Streamable HTTP on loopback) and the reference server
``@modelcontextprotocol/server-everything`` under Node; a scripted model drives sessions
on a live Host, and the events the calls stored are read back."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import wait_for

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from actors._runtime.system import free_port
from actors.agents import ScriptedFactory
from actors.agents.mcp_client import close_all
from actors.errors import InvalidRequest
from actors.host import Host
from projections import spans_from
from spine import Event, Kind

pytestmark = pytest.mark.timeout(180)

HERE = pathlib.Path(__file__).resolve().parent
SERVER = HERE / "mcp_server.py"
NPM_DIR = HERE.parent / ".npm-mcp"
EVERYTHING = "@modelcontextprotocol/server-everything@2026.8.31"


def _stdio_server(name: str = "notes", extra: str = "") -> str:
    return (
        f"[servers.{name}]\n"
        f"command = {sys.executable!r}\n"
        f"args = [{str(SERVER)!r}]\n"
        'env = ["MCP_TEST_PIDFILE"]\n'
        "timeout = 20\n" + extra
    )


def _data(tmp: pathlib.Path, toml: str) -> pathlib.Path:
    data = tmp / "data"
    data.mkdir(exist_ok=True)
    (data / "mcp.toml").write_text(toml)
    return data


@pytest.fixture
def pidfile(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    path = tmp_path / "server.pid"
    monkeypatch.setenv("MCP_TEST_PIDFILE", str(path))
    return path


def _simple(data: pathlib.Path) -> Iterator[Host]:
    h = Host(data, base="simpleSystemBase", timeout=30, factory=ScriptedFactory())
    try:
        yield h
    finally:
        # Its sessions ran in this process: closing it ends their servers (`_gone`).
        h.close()


def _gone(pidfile: pathlib.Path) -> None:
    if pidfile.exists():
        pid = int(pidfile.read_text())
        wait_for(lambda: not _alive(pid), timeout=15)


@pytest.fixture
def host(tmp_path: pathlib.Path, pidfile: pathlib.Path) -> Iterator[Host]:
    extra = "\n[servers.notes.tools.remember]\napproval = true\n"
    yield from _simple(_data(tmp_path, _stdio_server(extra=extra)))
    _gone(pidfile)


def _turn(h: Host, sid: str, text: str) -> tuple[Event, list[Event]]:
    ack = h.send(sid, text)
    done = h.wait_turn(sid, ack.seq, timeout=60)
    return done, [e for e in h.history(sid) if e.seq > ack.seq]


def _of(evs: list[Event], kind: str) -> list[Event]:
    return [e for e in evs if e.kind == kind]


def _key(evs: list[Event], tool_use_id: str) -> str:
    """The idempotency key the effect ledger stored for the call before it ran."""
    (started,) = [e for e in _of(evs, Kind.ACTION_STARTED) if e.tool_use_id == tool_use_id]
    key = started.extra["idempotencyKey"]
    assert isinstance(key, str) and key
    return key


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone but for its parent's wait.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_a_stdio_servers_tool_is_a_governed_call_with_its_key_and_result_stored(
    host: Host,
) -> None:
    sid = host.create(metadata={"mcp.servers": "notes"})
    done, evs = _turn(host, sid, '!tool notes.echo {"text": "hi"}\n!tool notes.picture {}')
    assert done.stop_reason == "end_turn", done
    calls = _of(evs, Kind.TOOL_CALL)
    assert [c.tool for c in calls] == ["notes.echo", "notes.picture"]
    admitted = [e.action for e in _of(evs, Kind.ACTION_ADMITTED)]
    assert admitted == ["model", "notes.echo", "notes.picture", "model"]
    completed = [e.action for e in _of(evs, Kind.ACTION_COMPLETED)]
    assert completed.count("notes.echo") == 1 and completed.count("notes.picture") == 1
    echo, picture = _of(evs, Kind.TOOL_RESULT)
    key = _key(evs, calls[0].tool_use_id)
    # The server saw the key in the request's _meta and said it back.
    assert echo.result == f"hi (key {key})" and not echo.is_error
    rec = echo.extra["mcp"]
    assert (rec["server"], rec["tool"], rec["idempotencyKey"]) == ("notes", "echo", key)
    assert rec["hints"] == {"readOnlyHint": True, "idempotentHint": True}
    assert rec["inDoubt"] == "ask"
    image = picture.extra["mcp"]["content"][1]
    assert image["type"] == "image" and image["mimeType"] == "image/png" and image["size"] == 70
    assert "iVBOR" not in repr(picture.extra) and "iVBOR" not in picture.result
    # The model spoke of the tools by their wire names; the log keeps the configured ones.
    answer = _of(evs, Kind.ASSISTANT)[-1].text
    assert answer.startswith(f"notes__echo returned hi (key {key})")
    # Their spans follow the GenAI conventions for an extension tool.
    spans = {sp.name: sp for sp in spans_from(host.history(sid), sid)}
    attrs = dict(spans["execute_tool notes.echo"].attributes)
    assert attrs["gen_ai.tool.type"] == "extension" and attrs["mcp.method.name"] == "tools/call"
    assert attrs["vertebra.mcp.server"] == "notes"


def test_the_operators_policy_decides_and_a_refusal_never_reaches_the_server(
    host: Host,
) -> None:
    """The operator marked ``remember`` as needing approval: it waits for a human and
    runs once approved; with approvals off it is refused, never sent."""
    sid = host.create(metadata={"mcp.servers": "notes"})
    ack = host.send(sid, '!tool notes.remember {"name": "a", "text": "b"}')
    pending = wait_for(
        lambda: _of([e for e in host.history(sid) if e.seq > ack.seq], Kind.ACTION_PENDING),
        timeout=30,
    )
    assert pending[0].action == "notes.remember"
    host.approve(sid, pending[0].call)
    done = host.wait_turn(sid, ack.seq, timeout=60)
    assert done.stop_reason == "end_turn", done
    (result,) = _of([e for e in host.history(sid) if e.seq > ack.seq], Kind.TOOL_RESULT)
    assert result.extra["mcp"]["structured"] == {"stored": "a", "count": 1}
    assert result.extra["mcp"]["hints"] == {"destructiveHint": True}

    sid2 = host.create(metadata={"mcp.servers": "notes", "governance.approvals": "off"})
    done, evs = _turn(host, sid2, '!tool notes.remember {"name": "c", "text": "d"}')
    assert done.stop_reason == "end_turn", done
    rejected = _of(evs, Kind.ACTION_REJECTED)
    assert [(e.action, e.fault) for e in rejected] == [("notes.remember", "needs_approval")]
    (result,) = _of(evs, Kind.TOOL_RESULT)
    assert result.is_error and "needs_approval" in result.result and not result.extra
    # A session without the mcp capability is refused every server tool.
    sid3 = host.create(metadata={"mcp.servers": "notes", "governance.capabilities": "net"})
    _, evs = _turn(host, sid3, '!tool notes.echo {"text": "x"}')
    assert [e.fault for e in _of(evs, Kind.ACTION_REJECTED)] == ["capability_denied"]


def test_tools_are_listed_again_after_the_server_says_they_changed(host: Host) -> None:
    sid = host.create(metadata={"mcp.servers": "notes"})
    _, evs = _turn(host, sid, "!tool notes.extra {}")
    assert "unknown tool 'notes.extra'" in _of(evs, Kind.TOOL_RESULT)[0].result
    _, evs = _turn(host, sid, "!tool notes.grow {}")
    assert _of(evs, Kind.TOOL_RESULT)[0].result == "grown"

    def listed() -> bool:
        _, evs = _turn(host, sid, "!tool notes.extra {}")
        return _of(evs, Kind.TOOL_RESULT)[0].result == "extra ran"

    wait_for(listed, timeout=20, interval=0.2)


@pytest.fixture
def quick(tmp_path: pathlib.Path, pidfile: pathlib.Path) -> Iterator[Host]:
    yield from _simple(_data(tmp_path, _stdio_server().replace("timeout = 20", "timeout = 1")))
    _gone(pidfile)


def test_a_hung_call_is_cut_off_by_its_timeout_and_the_server_serves_on(quick: Host) -> None:
    sid = quick.create(metadata={"mcp.servers": "notes"})
    done, evs = _turn(quick, sid, '!tool notes.slow {"seconds": 30}')
    assert done.stop_reason == "end_turn", done
    (result,) = _of(evs, Kind.TOOL_RESULT)
    assert result.is_error and "within 1s (timeout)" in result.result
    assert "outcome is unknown" in result.result
    assert result.extra["mcp"]["outcome"] == "unknown"
    _, evs = _turn(quick, sid, '!tool notes.echo {"text": "still here"}')
    assert _of(evs, Kind.TOOL_RESULT)[0].result.startswith("still here (key ")


def test_a_server_that_died_is_started_again_for_the_next_call(
    host: Host, pidfile: pathlib.Path
) -> None:
    sid = host.create(metadata={"mcp.servers": "notes"})
    _turn(host, sid, '!tool notes.echo {"text": "one"}')
    first = int(pidfile.read_text())
    os.kill(first, 9)
    wait_for(lambda: not _alive(first), timeout=10)

    def answered() -> bool:
        _, evs = _turn(host, sid, '!tool notes.echo {"text": "two"}')
        result = _of(evs, Kind.TOOL_RESULT)[0]
        # A call the dead server could not answer is an error, never repeated.
        assert result.is_error or result.result.startswith("two (key ")
        return not result.is_error

    wait_for(answered, timeout=30, interval=0.1)
    assert int(pidfile.read_text()) != first


def test_an_interrupt_cancels_a_call_in_flight(host: Host) -> None:
    sid = host.create(metadata={"mcp.servers": "notes"})
    ack = host.send(sid, '!tool notes.slow {"seconds": 30}')
    wait_for(
        lambda: _of([e for e in host.history(sid) if e.seq > ack.seq], Kind.ACTION_ADMITTED)[1:],
        timeout=30,
    )
    host.interrupt(sid)
    done = host.wait_turn(sid, ack.seq, timeout=10)
    assert done.kind == Kind.TURN_CANCELLED, done
    done, _ = _turn(host, sid, '!tool notes.echo {"text": "after"}')
    assert done.stop_reason == "end_turn"


def test_a_real_wire_format_is_offered_the_servers_schema_under_a_safe_name(
    tmp_path: pathlib.Path, pidfile: pathlib.Path
) -> None:
    """A model server in the OpenAI format gets ``notes__echo`` with the schema the MCP
    server gave; its call of that name runs ``notes.echo`` and is stored so."""
    from fake_models import FakeModelServer, chunk, tool_delta

    from actors.agents import ModelFactory

    models = FakeModelServer()
    try:
        models.queue(
            [
                (
                    "sse",
                    [
                        chunk(tool_calls=[tool_delta(0, "c1", "notes__echo", '{"text": "w"}')]),
                        chunk(finish="tool_calls"),
                    ],
                ),
                ("done",),
            ],
            [("sse", [chunk(content="ok"), chunk(finish="stop")]), ("done",)],
        )
        data = _data(tmp_path, _stdio_server())
        h = Host(
            data,
            base="simpleSystemBase",
            timeout=30,
            factory=ModelFactory(backoff=0.01),
            model_servers=[models.url],
        )
        try:
            sid = h.create(
                metadata={
                    "mcp.servers": "notes",
                    "ore.model.provider": "openai",
                    "ore.model.base_url": models.url,
                    "ore.model.name": "fake-1",
                }
            )
            done, evs = _turn(h, sid, "say w")
        finally:
            close_all()
            h.close()
    finally:
        models.close()
    assert done.stop_reason == "end_turn", done
    offered = {t["function"]["name"]: t["function"] for t in models.requests[0]["body"]["tools"]}
    assert offered["notes__echo"]["parameters"]["properties"]["text"]["type"] == "string"
    assert offered["notes__echo"]["description"].startswith("Say the text back")
    assert [e.tool for e in _of(evs, Kind.TOOL_CALL)] == ["notes.echo"]
    (result,) = _of(evs, Kind.TOOL_RESULT)
    assert result.result == f"w (key {_key(evs, 'c1')})"
    second = models.requests[1]["body"]["messages"]
    called = [c["function"]["name"] for m in second for c in m.get("tool_calls") or ()]
    assert called == ["notes__echo"]


def test_a_server_a_session_names_that_is_not_configured_fails_its_turn_clearly(
    host: Host,
) -> None:
    sid = host.create(metadata={"mcp.servers": "notes,evil"})
    done, _ = _turn(host, sid, "!tool notes.echo {}")
    assert done.stop_reason == "error"
    assert "'evil'" in done.error and "configured: notes" in done.error
    # The session serves on once it picks what is there.
    host.set_metadata(sid, {"mcp.servers": "notes"})
    done, _ = _turn(host, sid, "plain words")
    assert done.stop_reason == "end_turn"


def test_a_bad_configuration_stops_the_host_before_it_starts(tmp_path: pathlib.Path) -> None:
    data = _data(tmp_path, '[servers.notes]\ncommand = "x"\ntimeout = -1\n')
    with pytest.raises(InvalidRequest, match=r"server 'notes': timeout"):
        Host(data, base="simpleSystemBase")
    (data / "mcp.toml").write_text("[servers.notes\n")
    with pytest.raises(InvalidRequest, match="not valid TOML"):
        Host(data, base="simpleSystemBase")


def test_vertebra_serve_refuses_a_bad_configuration_in_one_line(
    tmp_path: pathlib.Path, no_leftover_processes: Any
) -> None:
    data = _data(tmp_path, '[servers.notes]\nargs = ["x"]\n')
    done = subprocess.run(
        [sys.executable, "-m", "actors.cli", "--data", str(data), "serve"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        cwd=HERE.parent,
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "mcp.toml: server 'notes': command/url must give exactly one" in done.stderr
    assert not (data / "daemon.json").exists()


def test_a_daemon_sessions_server_runs_in_its_process_and_is_gone_when_it_stops(
    tmp_path: pathlib.Path, pidfile: pathlib.Path, no_leftover_processes: Any
) -> None:
    data = _data(tmp_path, _stdio_server())
    h = Host(data, base="multiprocTCPBase", timeout=30, factory=ScriptedFactory())
    try:
        sid = h.create(metadata={"mcp.servers": "notes"})
        done, evs = _turn(h, sid, '!tool notes.remember {"name": "a", "text": "b"}')
        assert done.stop_reason == "end_turn", done
        (result,) = _of(evs, Kind.TOOL_RESULT)
        assert result.extra["mcp"]["structured"] == {"stored": "a", "count": 1}
        pid = int(pidfile.read_text())
        assert _alive(pid)
        # The same connection serves the session's next call: the note is still there.
        _, evs = _turn(h, sid, '!tool notes.remember {"name": "c", "text": "d"}')
        assert _of(evs, Kind.TOOL_RESULT)[0].extra["mcp"]["structured"]["count"] == 2
        assert int(pidfile.read_text()) == pid
    finally:
        h.close()
    wait_for(lambda: not _alive(pid), timeout=15)


def test_a_killed_session_process_takes_its_server_along(
    tmp_path: pathlib.Path, pidfile: pathlib.Path, no_leftover_processes: Any
) -> None:
    """SIGKILL leaves the session process no time to close anything: the launcher's
    parent-death signal ends the server all the same, and the restarted session starts
    a new one for its next call."""
    data = _data(tmp_path, _stdio_server())
    h = Host(data, base="multiprocTCPBase", timeout=30, factory=ScriptedFactory())
    try:
        sid = h.create(metadata={"mcp.servers": "notes"})
        done, _ = _turn(h, sid, '!tool notes.echo {"text": "one"}')
        assert done.stop_reason == "end_turn", done
        server = int(pidfile.read_text())
        os.kill(h.session_pid(sid), 9)
        wait_for(lambda: not _alive(server), timeout=15)
        done, evs = _turn(h, sid, '!tool notes.echo {"text": "two"}')
        assert _of(evs, Kind.TOOL_RESULT)[0].result.startswith("two (key ")
        assert int(pidfile.read_text()) != server
    finally:
        h.close()


@pytest.mark.parametrize("in_doubt", ["retry", "ask"])
def test_a_call_a_crash_cut_off_is_sent_again_under_its_key_only_if_the_operator_says(
    tmp_path: pathlib.Path, pidfile: pathlib.Path, no_leftover_processes: Any, in_doubt: str
) -> None:
    """SIGKILL of the session process while ``slow_echo`` runs: the call is in doubt.
    With ``in_doubt = "retry"`` it is sent once more with the same key (the server's
    answer names it); by default (``ask``) a human is asked and nothing is sent."""
    extra = f'\n[servers.notes.tools.slow_echo]\nin_doubt = "{in_doubt}"\n'
    data = _data(tmp_path, _stdio_server(extra=extra))
    h = Host(data, base="multiprocTCPBase", timeout=30, factory=ScriptedFactory())
    try:
        sid = h.create(metadata={"mcp.servers": "notes"})
        ack = h.send(sid, '!tool notes.slow_echo {"text": "once", "seconds": 3}')

        def after() -> list[Event]:
            return [e for e in h.history(sid) if e.seq > ack.seq]

        wait_for(lambda: _of(after(), Kind.ACTION_STARTED) and pidfile.exists(), timeout=30)
        os.kill(h.session_pid(sid), 9)
        (doubt,) = wait_for(lambda: _of(after(), Kind.ACTION_IN_DOUBT), timeout=30)
        assert doubt.extra["resolution"] == in_doubt
        if in_doubt == "ask":
            (question,) = wait_for(lambda: _of(after(), Kind.ACTION_PENDING), timeout=30)
            assert question.extra["inDoubt"] == doubt.call
            assert not _of(after(), Kind.TOOL_RESULT)
            return
        done = h.wait_turn(sid, ack.seq, timeout=60)
        assert done.stop_reason == "end_turn", done
        evs = after()
        (result,) = _of(evs, Kind.TOOL_RESULT)
        key = _of(evs, Kind.ACTION_STARTED)[0].extra["idempotencyKey"]
        assert result.result == f"once (key {key})"
        assert [e.tool for e in _of(evs, Kind.TOOL_CALL)] == ["notes.slow_echo"]
    finally:
        h.close()


@pytest.fixture
def http_server(tmp_path: pathlib.Path) -> Iterator[str]:
    port = free_port()
    log = open(tmp_path / "http-server.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "http", str(port)], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        import socket

        def up() -> bool:
            assert proc.poll() is None, (tmp_path / "http-server.log").read_text()
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        wait_for(up, timeout=30, interval=0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


def test_a_streamable_http_server_is_reached_through_the_egress_guard(
    tmp_path: pathlib.Path, http_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NOTES_AUTH", "Bearer t0k3n")
    toml = (
        f'[servers.web]\nurl = "{http_server}"\negress_allow = ["127.0.0.1"]\n'
        'headers = { Authorization = "NOTES_AUTH" }\n'
        f'[servers.shut]\nurl = "{http_server}"\n'
    )
    for h in _simple(_data(tmp_path, toml)):
        sid = h.create(metadata={"mcp.servers": "web"})
        done, evs = _turn(h, sid, '!tool web.echo {"text": "over http"}')
        assert done.stop_reason == "end_turn", done
        (result,) = _of(evs, Kind.TOOL_RESULT)
        key = _key(evs, result.tool_use_id)
        assert result.result == f"over http (key {key})"
        egress = _of(evs, Kind.EGRESS)
        assert [(e.host, e.allowed) for e in egress] == [("127.0.0.1", True)]
        assert "t0k3n" not in repr(h.history(sid))
        # Loopback without the operator's allowance: refused, and the turn says why.
        sid2 = h.create(metadata={"mcp.servers": "shut"})
        done, evs = _turn(h, sid2, '!tool shut.echo {"text": "x"}')
        assert done.stop_reason == "error" and "egress to 127.0.0.1 refused" in done.error
        assert [e.allowed for e in _of(evs, Kind.EGRESS)] == [False]


def _everything() -> str:
    """The reference server's command: installed by CI into the checkout; installed
    here the same way when npm is there."""
    given = os.environ.get("VERTEBRA_TEST_MCP_EVERYTHING")
    if given:
        return given
    binary = NPM_DIR / "node_modules" / ".bin" / "mcp-server-everything"
    if not binary.exists():
        npm = shutil.which("npm")
        if npm is None:
            if os.environ.get("CI"):
                pytest.fail("npm is missing, and CI must run the reference MCP server")
            pytest.skip("npm is missing: cannot install @modelcontextprotocol/server-everything")
        subprocess.run(
            [
                npm,
                "install",
                "--no-audit",
                "--no-fund",
                "--silent",
                "--prefix",
                str(NPM_DIR),
                EVERYTHING,
            ],
            check=True,
            timeout=300,
        )
    return str(binary)


def test_the_reference_server_everything_under_node(
    tmp_path: pathlib.Path, no_leftover_processes: Any
) -> None:
    command = _everything()
    toml = f'[servers.everything]\ncommand = "{command}"\nargs = ["stdio"]\n'
    for h in _simple(_data(tmp_path, toml)):
        sid = h.create(metadata={"mcp.servers": "everything"})
        started = time.monotonic()
        done, evs = _turn(
            h,
            sid,
            '!tool everything.echo {"message": "hello"}\n'
            '!tool everything.get-sum {"a": 2, "b": 3}\n'
            "!tool everything.get-tiny-image {}",
        )
        assert done.stop_reason == "end_turn", done
        assert time.monotonic() - started < 60
        echo, total, image = _of(evs, Kind.TOOL_RESULT)
        assert echo.result == "Echo: hello" and not echo.is_error
        assert echo.extra["mcp"]["hints"]["readOnlyHint"] is True
        assert "5" in total.result
        kinds = [c["type"] for c in image.extra["mcp"]["content"]]
        assert "image" in kinds
        ref = next(c for c in image.extra["mcp"]["content"] if c["type"] == "image")
        assert ref["mimeType"] == "image/png" and ref["size"] > 0 and len(ref["sha256"]) == 64


def test_a_handshake_era_list_changed_notice_marks_the_tools_stale() -> None:
    """Servers on the 2025 revisions (server-everything among them) send
    ``notifications/tools/list_changed`` unasked; 2026-07-28 ones publish it to
    ``subscriptions/listen`` (the test above)."""
    import asyncio

    import mcp_types

    from actors.agents.mcp_client import Connection
    from actors.agents.mcp_config import ServerConfig

    conn = Connection(ServerConfig(name="x", command="true"))
    conn.tools = ()
    asyncio.run(conn._on_message(mcp_types.ToolListChangedNotification()))
    assert conn.tools is None
    conn.tools = ()
    asyncio.run(conn._on_message(RuntimeError("a transport error")))
    assert conn.tools == ()
