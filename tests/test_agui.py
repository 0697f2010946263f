"""The AG-UI door against a live gateway: the official ``@ag-ui/client`` drives a session
(a tool call, an approval as an interrupt and its resume, a slash command), a retried input
stores nothing, ``Last-Event-ID`` resumes exactly, the REST stream and the AG-UI runs say
the same conversation, and runs resume across daemon SIGKILLs with nothing lost or doubled."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import wait_for
from gateway_support import client, running_gateway

from actors.gateway import GatewayHandle
from actors.gateway._tokens import create_token

pytest.importorskip("ag_ui.core")

JS = pathlib.Path(__file__).with_name("js")
GOVERNED = {"governance.trust": "sandboxed", "governance.egress_allow": "127.0.0.1"}
FETCH = '!tool http_get {"url": "http://127.0.0.1:9/"}'


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayHandle]:
    with running_gateway(tmp_path_factory.mktemp("agui") / "data") as g:
        yield g


@pytest.fixture
def http(gw: GatewayHandle) -> Iterator[httpx.Client]:
    with client(gw) as c:
        yield c


def _inp(run: str, *messages: tuple[str, str], **extra: Any) -> dict[str, Any]:
    msgs = [{"id": mid, "role": "user", "content": text} for mid, text in messages]
    return {"threadId": "t", "runId": run, "messages": msgs, **extra}


def run_events(
    http: httpx.Client, sid: str, body: dict[str, Any], last: int | None = None
) -> list[tuple[int | None, dict[str, Any]]]:
    """One AG-UI run over SSE: ``(id, event)`` pairs, the id the stored seq or None."""
    headers = {"Last-Event-ID": str(last)} if last is not None else {}
    with http.stream("POST", f"/v1/agui/{sid}", json=body, headers=headers) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = r.read().decode()
    out: list[tuple[int | None, dict[str, Any]]] = []
    for block in raw.split("\n\n"):
        lines = block.splitlines()
        ids = [int(x[4:]) for x in lines if x.startswith("id: ")]
        data = [x[6:] for x in lines if x.startswith("data: ")]
        if data:
            out.append((ids[0] if ids else None, json.loads("".join(data))))
    return out


def _history(http: httpx.Client, sid: str) -> list[dict[str, Any]]:
    return http.get(f"/v1/sessions/{sid}/history", params={"limit": 1000}).json()["events"]  # type: ignore[no-any-return]


def _node() -> str:
    node = shutil.which("node")
    if node is None or not (JS / "node_modules" / "@ag-ui" / "client").is_dir():
        if os.environ.get("VERTEBRA_REQUIRE_NODE"):
            pytest.fail("node and @ag-ui/client are required here (.ci/run installs them)")
        pytest.skip("node or @ag-ui/client is not installed (.ci/run installs them)")
    return node


def test_the_official_client_drives_a_conversation_with_a_tool_and_an_approval(
    gw: GatewayHandle, http: httpx.Client
) -> None:
    node = _node()
    http.post("/v1/sessions", json={"id": "ag-1", "metadata": GOVERNED})
    steps = [{"say": "hello"}, {"say": FETCH}, {"approve": True}, {"say": "/help"}]
    out = subprocess.run(
        [node, str(JS / "agui_drive.mjs"), f"{gw.url}/v1/agui/ag-1", gw.token],
        input=json.dumps(steps),
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    outcomes = [r["outcome"] for r in result["runs"]]
    assert outcomes == ["success", "interrupt", "success", "success"]
    (interrupt,) = result["runs"][1]["interrupts"]
    msgs = result["messages"]
    assert msgs[1] == {
        "role": "assistant",
        "content": "[scripted] hello",
        "toolCalls": [],
        "toolCallId": None,
    }
    (call,) = msgs[3]["toolCalls"]
    assert call["name"] == "http_get" and json.loads(call["arguments"]) == {
        "url": "http://127.0.0.1:9/"
    }
    assert msgs[4]["role"] == "tool" and "Connection refused" in msgs[4]["content"]
    assert msgs[5]["content"].startswith("http_get returned")
    approvals = [e for e in _history(http, "ag-1") if e["kind"] == "action.approval"]
    assert [(a["call"], a["allowed"], a["reason"]) for a in approvals] == [
        (int(interrupt), True, "from node")
    ]


def test_a_retried_input_stores_nothing_and_last_event_id_resumes_exactly(
    http: httpx.Client,
) -> None:
    http.post("/v1/sessions", json={"id": "ag-2"})
    body = _inp("r1", ("m1", "!tool clock {}"))
    full = run_events(http, "ag-2", body)
    assert full[0][1]["type"] == "RUN_STARTED" and full[-1][1]["type"] == "RUN_FINISHED"
    again = run_events(http, "ag-2", body)
    # The first run may have streamed its text as live deltas; read back, it is whole.
    assert _transcript_agui([e for _, e in again]) == _transcript_agui([e for _, e in full])
    assert [i for i, _ in again if i] == [i for i, _ in full if i]
    users = [e for e in _history(http, "ag-2") if e["kind"] == "user.message"]
    assert len(users) == 1
    full = again
    ids = [i for i, _ in full if i is not None]
    for cut in ids[:-1]:
        resumed = run_events(http, "ag-2", body, last=cut)
        at = max(n for n, (i, _) in enumerate(full) if i == cut)
        head = [e for _, e in full[: at + 1]]
        tail = [e for _, e in full[at + 1 :]]
        # The resumed run starts anew (RUN_STARTED, a fresh snapshot), then goes on
        # exactly after the cut: nothing seen again, nothing missing.
        assert [e["type"] for _, e in resumed[:2]] == ["RUN_STARTED", "STATE_SNAPSHOT"]
        assert [e for _, e in resumed[2:]] == tail, cut
        assert head + tail == [e for _, e in full]


def test_bad_inputs_are_clear_errors_that_store_nothing(
    gw: GatewayHandle, http: httpx.Client
) -> None:
    http.post("/v1/sessions", json={"id": "ag-3"})
    before = len(_history(http, "ag-3"))
    cases = [
        ({"runId": "r", "messages": []}, 422, "threadId"),
        (_inp("r"), 422, "no user message"),
        (
            {
                "threadId": "t",
                "runId": "r",
                "messages": [{"id": "x", "role": "user", "content": 5}],
            },
            422,
            "RunAgentInput",
        ),
        (
            _inp("r", resume=[{"interruptId": "abc", "status": "resolved"}]),
            422,
            "not an approval",
        ),
        (
            _inp("r", resume=[{"interruptId": "999", "status": "resolved"}]),
            422,
            "no action 999",
        ),
    ]
    for body, status, words in cases:
        r = http.post("/v1/agui/ag-3", json=body)
        assert r.status_code == status, (body, r.text)
        assert words in r.json()["message"], r.json()
    r = http.post("/v1/agui/ag-3", content=b"{", headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert http.post("/v1/agui/nope", json=_inp("r", ("m", "hi"))).status_code == 404
    run_events(http, "ag-3", _inp("r", ("m1", "one")))
    r = http.post("/v1/agui/ag-3", json=_inp("r", ("m1", "another text")))
    assert r.status_code == 422 and r.json()["error"] == "idempotency_conflict"
    kinds = [e["kind"] for e in _history(http, "ag-3")[before:]]
    assert kinds.count("user.message") == 1 and kinds[-1] == "session.lifecycle"
    ro = create_token(gw.host.data_dir, ["ag-3"], read_only=True)
    r = httpx.post(
        f"{gw.url}/v1/agui/ag-3",
        json=_inp("r", ("m2", "x")),
        headers={"Authorization": f"Bearer {ro}"},
    )
    assert r.status_code == 403 and "read-only" in r.json()["message"]


def _transcript_rest(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    out = []
    for e in events:
        if e["kind"] == "assistant.message":
            out.append(("assistant", e["text"]))
        elif e["kind"] == "tool.call":
            out.append(("call", e["tool"]))
        elif e["kind"] == "tool.result":
            out.append(("result", e["result"]))
    return out


def _transcript_agui(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    text: dict[str, str] = {}
    for e in events:
        if e["type"] == "TEXT_MESSAGE_CONTENT":
            text[e["messageId"]] = text.get(e["messageId"], "") + e["delta"]
        elif e["type"] == "TEXT_MESSAGE_END":
            out.append(("assistant", text.pop(e["messageId"], "")))
        elif e["type"] == "TOOL_CALL_START":
            out.append(("call", e["toolCallName"]))
        elif e["type"] == "TOOL_CALL_RESULT":
            out.append(("result", e["content"]))
    return out


def test_the_rest_stream_and_the_agui_runs_say_the_same_conversation(http: httpx.Client) -> None:
    http.post("/v1/sessions", json={"id": "ag-4"})
    said = ["hello", "!tool clock {}", "!slow 0.01 one two three", "bye"]
    agui: list[dict[str, Any]] = []
    for n, text in enumerate(said):
        agui += [e for _, e in run_events(http, "ag-4", _inp(f"r{n}", (f"m{n}", text)))]
    assert _transcript_agui(agui) == _transcript_rest(_history(http, "ag-4"))
    assert len(_transcript_agui(agui)) == 6


def test_runs_resume_across_daemon_sigkills_with_nothing_lost_or_doubled(
    tmp_path: pathlib.Path,
) -> None:
    """Each round: a run starts, the daemon is SIGKILLed mid-turn, a new daemon serves,
    and the client re-posts the same input with the last id it saw. What it got in all
    equals the run as the log tells it afterwards."""
    from cli_support import Daemon

    from actors._runtime.system import free_port

    port = free_port()
    d = Daemon(tmp_path / "data")
    rounds = 3
    try:
        d.start("--http", f"127.0.0.1:{port}")
        url = f"http://127.0.0.1:{port}"
        token = wait_for(lambda: _token(d.data), 30)
        wait_for(lambda: _up(url), 30)
        with httpx.Client(base_url=url, headers=_auth(token), timeout=30) as h:
            assert h.post("/v1/sessions", json={"id": "kill-1"}).status_code == 201
        for n in range(rounds):
            body = _inp(f"r{n}", (f"k{n}", "!slow 0.3 " + " ".join(["word"] * 40)))
            seen: list[tuple[int | None, dict[str, Any]]] = []
            with (
                httpx.Client(base_url=url, headers=_auth(token), timeout=30) as h,
                h.stream("POST", "/v1/agui/kill-1", json=body) as r,
            ):
                for block in _blocks(r):
                    seen.append(block)
                    if block[1]["type"] == "TEXT_MESSAGE_CONTENT":
                        break
            assert d.proc is not None
            d.proc.kill()
            d.wait_exited()
            (d.data / "daemon.json").unlink()
            d.start("--http", f"127.0.0.1:{port}")
            token = wait_for(lambda: _token(d.data), 30)
            wait_for(lambda: _up(url), 30)
            last = max(i for i, _ in seen if i is not None)
            with httpx.Client(base_url=url, headers=_auth(token), timeout=30) as h:
                rest = run_events(h, "kill-1", body, last=last)
                whole = run_events(h, "kill-1", body)
            stored = lambda xs: [(i, e) for i, e in xs if i is not None]  # noqa: E731
            got = stored(seen) + stored(rest)
            assert [i for i, _ in got] == sorted({i for i, _ in got}), "an event came twice"
            assert got == stored(whole), "the resumed run differs from the log's"
            assert whole[-1][1]["type"] == "RUN_FINISHED"
            assert whole[-1][1]["outcome"] == {"type": "cancelled"}
        with httpx.Client(base_url=url, headers=_auth(token), timeout=30) as h:
            users = [e for e in _history(h, "kill-1") if e["kind"] == "user.message"]
        assert len(users) == rounds
    finally:
        d.stop()
        d.check_no_leftovers()


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _token(data: pathlib.Path) -> str | None:
    path = data / "gateway-token"
    return path.read_text().strip() or None if path.exists() else None


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/openapi.json", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _blocks(r: httpx.Response) -> Iterator[tuple[int | None, dict[str, Any]]]:
    buf = ""
    for piece in r.iter_text():
        buf += piece
        while "\n\n" in buf:
            block, buf = buf.split("\n\n", 1)
            lines = block.splitlines()
            ids = [int(x[4:]) for x in lines if x.startswith("id: ")]
            data = [x[6:] for x in lines if x.startswith("data: ")]
            if data:
                yield (ids[0] if ids else None, json.loads("".join(data)))
