"""The A2A door against a live gateway, driven by the official ``a2a-sdk`` client: goal
runs as tasks (streamed, fetched, listed, cancelled), an approval as input-required and
its answer, a retried message that opens nothing new, a signed agent card, tokens, and
subscriptions that resume after a seq, also across a daemon SIGKILL."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from conftest import wait_for
from gateway_support import client, running_gateway

from actors.gateway import GatewayHandle
from actors.gateway._tokens import create_token

pytest.importorskip("a2a.client")

from a2a.client import ClientConfig, create_client
from a2a.client.client import ClientCallContext
from a2a.types import a2a_pb2 as pb
from a2a.utils.signing import create_signature_verifier

from spine.seal import KeyStore

GOVERNED = {"governance.trust": "sandboxed", "governance.egress_allow": "127.0.0.1"}
FETCH = '!tool http_get {"url": "http://127.0.0.1:9/"}'
BOUND = 60


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayHandle]:
    with running_gateway(tmp_path_factory.mktemp("a2a") / "data") as g:
        yield g


def _message(mid: str, text: str, context: str = "", task: str = "") -> pb.SendMessageRequest:
    msg = pb.Message(message_id=mid, role=pb.ROLE_USER, parts=[pb.Part(text=text)])
    if context:
        msg.context_id = context
    if task:
        msg.task_id = task
    return pb.SendMessageRequest(message=msg)


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, BOUND))


class Door:
    """The official client over a gateway's URL and a token."""

    def __init__(self, url: str, token: str, streaming: bool = True) -> None:
        self.url, self.token, self.streaming = url, token, streaming

    async def __aenter__(self) -> Door:
        self.http = httpx.AsyncClient(headers={"Authorization": f"Bearer {self.token}"}, timeout=30)
        self.client = await create_client(
            self.url, ClientConfig(httpx_client=self.http, streaming=self.streaming)
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.close()
        await self.http.aclose()

    async def stream(self, req: pb.SendMessageRequest) -> list[Any]:
        return [r async for r in self.client.send_message(req)]

    async def subscribe(self, tid: str, after: int | None = None) -> list[Any]:
        ctx = ClientCallContext(service_parameters={"Last-Event-ID": str(after)}) if after else None
        it: AsyncIterator[Any] = self.client.subscribe(
            pb.SubscribeToTaskRequest(id=tid), context=ctx
        )
        return [r async for r in it]


def _task_of(stream: list[Any]) -> pb.Task:
    return stream[0].task


def _states(stream: list[Any]) -> list[str]:
    return [
        pb.TaskState.Name(r.status_update.status.state)
        for r in stream
        if r.HasField("status_update")
    ]


def _seqs(stream: list[Any]) -> list[int]:
    out = []
    for r in stream:
        for field in ("status_update", "artifact_update"):
            if r.HasField(field):
                out.append(int(getattr(r, field).metadata["vertebra.seq"]))
    return out


def test_the_agent_card_is_served_and_signed_with_the_record_key(gw: GatewayHandle) -> None:
    r = httpx.get(f"{gw.url}/.well-known/agent-card.json")
    assert r.status_code == 200
    body = r.json()
    assert body["supportedInterfaces"][0]["url"] == f"{gw.url}/a2a"
    assert body["capabilities"]["streaming"] is True
    from google.protobuf.json_format import ParseDict

    card = ParseDict(body, pb.AgentCard())
    key = KeyStore(pathlib.Path(gw.host.data_dir) / "keys").signing_key()
    public = key._private.public_key()
    verify = create_signature_verifier(lambda kid, jku: public, ["EdDSA"])
    verify(card)
    card.name = "someone else"
    with pytest.raises(Exception, match=r"(?i)signature"):
        verify(card)


def test_a_goal_run_streams_to_its_answer_and_a_retry_opens_nothing_new(
    gw: GatewayHandle,
) -> None:
    async def go() -> tuple[list[Any], list[Any], pb.Task, Any]:
        async with Door(gw.url, gw.token) as door:
            first = await door.stream(_message("g-1", "plan the release"))
            again = await door.stream(_message("g-1", "plan the release"))
            tid = _task_of(first).id
            got = await door.client.get_task(pb.GetTaskRequest(id=tid))
            listed = await door.client.list_tasks(pb.ListTasksRequest(context_id=got.context_id))
            return first, again, got, listed

    first, again, got, listed = run(go())
    assert _states(first)[-1] == "TASK_STATE_COMPLETED"
    assert _task_of(again).id == _task_of(first).id
    assert got.status.state == pb.TASK_STATE_COMPLETED
    assert got.artifacts[0].parts[0].text == "[scripted] plan the release"
    assert got.history[0].parts[0].text == "plan the release"
    assert [t.id for t in listed.tasks] == [got.id]
    with client(gw) as http:
        events = http.get(f"/v1/sessions/{got.context_id}/history").json()["events"]
    assert [e["kind"] for e in events].count("session.converged") == 1
    assert sum(1 for e in events if e["kind"] == "user.message" and e.get("goal")) == 1


def test_an_approval_is_input_required_and_answered_by_a_message(gw: GatewayHandle) -> None:
    with client(gw) as http:
        http.post("/v1/sessions", json={"id": "a2a-gov", "metadata": GOVERNED})

    async def go() -> tuple[list[Any], list[Any]]:
        async with Door(gw.url, gw.token) as door:
            asked = await door.stream(_message("g-2", FETCH, context="a2a-gov"))
            tid = _task_of(asked).id
            with pytest.raises(Exception, match="approve or reject"):
                await door.stream(_message("g-3", "perhaps", task=tid))
            done = await door.stream(_message("g-4", "approve", task=tid))
            return asked, done

    asked, done = run(go())
    assert _states(asked)[-1] == "TASK_STATE_INPUT_REQUIRED"
    assert _states(done)[-1] in ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED")
    with client(gw) as http:
        events = http.get("/v1/sessions/a2a-gov/history").json()["events"]
    approvals = [e for e in events if e["kind"] == "action.approval"]
    assert [(a["allowed"], a["reason"]) for a in approvals] == [(True, "via A2A")]


def test_a_task_is_cancelled(gw: GatewayHandle) -> None:
    async def go() -> pb.Task:
        async with Door(gw.url, gw.token, streaming=False) as door:
            req = _message("g-5", "!hang")
            req.configuration.return_immediately = True
            resp = [r async for r in door.client.send_message(req)]
            tid = resp[0].task.id
            with client(gw) as http:
                sid = tid.rpartition("#")[0]
                wait_for(
                    lambda: "turn.started" in str(http.get(f"/v1/sessions/{sid}/history").json()),
                    20,
                )
            return await door.client.cancel_task(pb.CancelTaskRequest(id=tid))

    task = run(go())
    assert task.status.state == pb.TASK_STATE_CANCELED


def test_a_subscription_resumes_exactly_after_the_seq_it_names(gw: GatewayHandle) -> None:
    async def go() -> tuple[list[Any], dict[int, list[Any]]]:
        async with Door(gw.url, gw.token) as door:
            full = await door.stream(_message("g-6", "!tool clock {}"))
            tid = _task_of(full).id
            whole = await door.subscribe(tid)
            resumed = {s: await door.subscribe(tid, after=s) for s in _seqs(full)[:-1]}
            return full, {0: whole, **resumed}

    full, resumed = run(go())
    seqs = _seqs(full)
    # Ordered by seq; an event may give two updates (the answer and the final state).
    assert seqs == sorted(seqs) and len(set(seqs)) >= 3
    assert _seqs(resumed[0]) == []  # subscribed to an ended task: the task, nothing more
    assert resumed[0][0].task.status.state == pb.TASK_STATE_COMPLETED
    for after, got in resumed.items():
        if after:
            assert _seqs(got) == [s for s in seqs if s > after], after
            assert int(got[0].task.metadata["vertebra.seq"]) == after


def test_tokens_guard_the_door(gw: GatewayHandle) -> None:
    r = httpx.post(f"{gw.url}/a2a", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask"})
    assert r.status_code == 401
    with client(gw) as http:
        http.post("/v1/sessions", json={"id": "a2a-mine"})
        http.post("/v1/sessions", json={"id": "a2a-other"})
        scoped = create_token(gw.host.data_dir, ["a2a-mine"])

    async def go() -> None:
        async with Door(gw.url, scoped) as door:
            mine = await door.stream(_message("g-7", "hello", context="a2a-mine"))
            assert _states(mine)[-1] == "TASK_STATE_COMPLETED"
            with pytest.raises(Exception, match=r"may not write|own sessions"):
                await door.stream(_message("g-8", "hello", context="a2a-other"))
            with pytest.raises(Exception, match="no task"):
                await door.client.get_task(pb.GetTaskRequest(id="a2a-other#3"))

    run(go())


def test_a_subscription_resumes_across_a_daemon_sigkill(tmp_path: pathlib.Path) -> None:
    """A run streams; the daemon is SIGKILLed; a new daemon comes up; subscribing with the
    last seq seen gives the rest of the run, nothing seen again, nothing missing."""
    from cli_support import Daemon

    from actors._runtime.system import free_port

    port = free_port()
    d = Daemon(tmp_path / "data")
    url = f"http://127.0.0.1:{port}"
    try:
        d.start("--http", f"127.0.0.1:{port}")
        token = wait_for(lambda: _token(d.data), 30)
        wait_for(lambda: _up(url), 30)

        async def first() -> list[Any]:
            got: list[Any] = []
            async with Door(url, token) as door:
                req = _message("k-1", "!slow 0.2 " + " ".join(["word"] * 30))
                async for r in door.client.send_message(req):
                    got.append(r)
                    if len(_seqs(got)) >= 1:
                        break
            return got

        seen = run(first())
        tid = _task_of(seen).id
        assert d.proc is not None
        d.proc.kill()
        d.wait_exited()
        (d.data / "daemon.json").unlink()
        # The operator asks the new daemon to go on with the runs the old one left.
        d.start("--http", f"127.0.0.1:{port}", "--resume-goals")
        token = wait_for(lambda: _token(d.data), 30)
        wait_for(lambda: _up(url), 30)
        last = max(_seqs(seen))

        async def rest() -> tuple[list[Any], list[Any], pb.Task]:
            async with Door(url, token) as door:
                resumed = await door.subscribe(tid, after=last)
                whole = await door.subscribe(tid, after=int(tid.rpartition("#")[2]))
                task = await door.client.get_task(pb.GetTaskRequest(id=tid))
                return resumed, whole, task

        resumed, whole, task = run(rest())
        assert all(s > last for s in _seqs(resumed)), "an update came twice"
        got = _seqs(seen) + _seqs(resumed)
        assert got == _seqs(whole), "the resumed updates differ from the log's"
        assert task.status.state in (
            pb.TASK_STATE_COMPLETED,
            pb.TASK_STATE_FAILED,
            pb.TASK_STATE_CANCELED,
        )
    finally:
        d.stop()
        d.check_no_leftovers()


def _token(data: pathlib.Path) -> str | None:
    path = data / "gateway-token"
    return path.read_text().strip() or None if path.exists() else None


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/openapi.json", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


class Receiver:
    """A webhook on loopback that records what it is sent and fails the first attempt."""

    def __init__(self) -> None:
        import http.server
        import threading

        self.got: list[tuple[str, str, bytes]] = []
        self.fail_first = True
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.got.append(
                    (
                        self.headers["X-Vertebra-Delivery"],
                        self.headers["X-Vertebra-Signature"],
                        body,
                    )
                )
                status = 500 if outer.fail_first else 204
                outer.fail_first = False
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.close()


def test_pauses_and_ends_are_pushed_signed_retried_and_not_sent_again_after_a_restart(
    tmp_path: pathlib.Path, receiver: Receiver
) -> None:
    import hashlib
    import hmac
    import json

    from actors.gateway._a2a_push import Webhook

    hook = Webhook(url=receiver.url, secret=b"s3cret", backoff=0.05)
    data = tmp_path / "data"

    def deliveries() -> list[str]:
        return sorted({d for d, _, _ in receiver.got})

    with running_gateway(data, webhook=hook) as g:
        with client(g) as http:
            http.post("/v1/sessions", json={"id": "push-1", "metadata": GOVERNED})

        async def go() -> None:
            async with Door(g.url, g.token) as door:
                asked = await door.stream(_message("p-1", FETCH, context="push-1"))
                await door.stream(_message("p-2", "approve", task=_task_of(asked).id))

        run(go())
        wait_for(lambda: len(deliveries()) == 2, 30)
    ids = [d for d, _, _ in receiver.got]
    first, last = ids[0], ids[-1]
    assert ids.count(first) == 2 and ids.count(last) == 1  # the 500 was retried, same id
    for _, signature, body in receiver.got:
        assert signature == "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    states = [json.loads(b)["task"]["status"]["state"] for _, _, b in receiver.got]
    assert states[0] == states[1] == "TASK_STATE_INPUT_REQUIRED"  # retried after the 500
    assert states[-1] in ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED")
    sent = len(receiver.got)
    with running_gateway(data, webhook=hook) as g:

        async def again() -> None:
            async with Door(g.url, g.token) as door:
                await door.stream(_message("p-3", "one more", context="push-1"))

        run(again())
        wait_for(lambda: len(deliveries()) == 3, 30)
    assert len(receiver.got) == sent + 1, "a settled notification was sent again"


def test_a_tenant_works_on_its_own_contexts_and_sees_no_other(gw: GatewayHandle) -> None:
    """A tenant's token opens contexts of its tenant, lists and reads only its tenant's
    tasks; another tenant's task is not found, and writing to its context is refused."""
    acme = create_token(gw.host.data_dir, tenant="acme")
    globex = create_token(gw.host.data_dir, tenant="globex")

    async def go() -> tuple[pb.Task, Any]:
        async with Door(gw.url, acme) as a, Door(gw.url, globex) as b:
            mine = await a.stream(_message("t-acme-1", "plan the release"))
            task = _task_of(mine)
            assert _states(mine)[-1] == "TASK_STATE_COMPLETED"
            with pytest.raises(Exception, match="no task"):
                await b.client.get_task(pb.GetTaskRequest(id=task.id))
            with pytest.raises(Exception, match="may not write"):
                await b.stream(_message("t-globex-1", "hi", context=task.context_id))
            theirs = await b.client.list_tasks(pb.ListTasksRequest())
            assert task.id not in [t.id for t in theirs.tasks]
            return task, await a.client.list_tasks(pb.ListTasksRequest())

    task, listed = run(go())
    assert task.id in [t.id for t in listed.tasks]
    with client(gw) as http:
        meta = http.get(f"/v1/sessions/{task.context_id}").json()["metadata"]
    assert meta["tenant"] == "acme"


def test_the_a2a_task_says_what_the_rest_stream_says(gw: GatewayHandle) -> None:
    """One goal run observed through both doors: the task's history is the run's user
    and assistant messages of the REST stream, in order, and its answer the converged
    text."""

    async def go() -> pb.Task:
        async with Door(gw.url, gw.token) as door:
            done = await door.stream(_message("same-1", "!tool clock {}"))
            return await door.client.get_task(pb.GetTaskRequest(id=_task_of(done).id))

    task = run(go())
    start = int(task.id.rpartition("#")[2])
    with client(gw) as http:
        events = http.get(f"/v1/sessions/{task.context_id}/history").json()["events"]
    said = [
        ("user" if e["kind"] == "user.message" else "agent", e["text"])
        for e in events
        if e["seq"] >= start and e["kind"] in ("user.message", "assistant.message") and e["text"]
    ]
    history = [
        ("user" if m.role == pb.ROLE_USER else "agent", m.parts[0].text) for m in task.history
    ]
    assert history == said and len(said) >= 2
    converged = next(e for e in events if e["kind"] == "session.converged")
    assert task.artifacts[0].parts[0].text == converged["text"]
