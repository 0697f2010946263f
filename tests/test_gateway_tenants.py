"""Tenants over real HTTP: a tenant's token reaches its tenant's sessions on every route
and no other's (404, as if they did not exist; 403 on the admin's routes), creates
sessions in its tenant up to its quota, and is held to its request rate (429 with
Retry-After)."""

from __future__ import annotations

import pathlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from cli_support import Daemon, run, stopped_after
from conftest import wait_for
from gateway_support import client, running_gateway

from actors._runtime.system import free_port
from actors.gateway import ROUTES, GatewayHandle, Quotas, create_token

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayHandle]:
    quotas = Quotas(sessions=2)
    with running_gateway(tmp_path_factory.mktemp("ten") / "data", quotas=quotas) as g:
        yield g


def _tenant(gw: GatewayHandle, name: str) -> httpx.Client:
    return client(gw, create_token(gw.host.data_dir, tenant=name))


def _call(c: httpx.Client, method: str, path: str) -> httpx.Response:
    bodies = {
        "/v1/sessions/{id}/messages": {"text": "hi"},
        "/v1/sessions/{id}/goals": {"objective": "x"},
        "/v1/sessions/{id}/metadata": {"colour": "blue"},
        "/v1/sessions/{id}/approvals/{call}": {"decision": "approve"},
    }
    url = path.replace("{call}", "1").replace("{token}", "tok_x")
    if method == "GET" and url.endswith("events"):
        with c.stream(method, url, timeout=5) as r:
            return r
    return c.request(method, url, json=bodies.get(path), params={"timeout": "0"})


def test_a_tenant_reaches_its_sessions_on_every_route_and_no_other(gw: GatewayHandle) -> None:
    with _tenant(gw, "acme") as a, _tenant(gw, "globex") as b, client(gw) as admin:
        r = a.post("/v1/sessions", json={"id": "acme-1", "metadata": {"colour": "red"}})
        assert r.status_code == 201, r.text
        assert r.json()["metadata"]["tenant"] == "acme"
        assert b.post("/v1/sessions", json={"id": "globex-1"}).status_code == 201
        admin.post("/v1/sessions", json={"id": "nobody-1"})
        assert [s["id"] for s in a.get("/v1/sessions").json()["sessions"]] == ["acme-1"]
        for method, path, _access, _fn in ROUTES:
            if path == "/v1/sessions" or (path.endswith("/{id}") and method == "DELETE"):
                continue
            if "{id}" not in path:
                assert _call(a, method, path).status_code == 403, path
                continue
            for other in ("globex-1", "nobody-1"):
                r = _call(a, method, path.replace("{id}", other))
                assert r.status_code == 404, (method, path, r.status_code)
            r = _call(a, method, path.replace("{id}", "acme-1"))
            assert r.status_code not in (401, 403, 404), (method, path, r.status_code)
        # The tenant key is the operator's: a tenant cannot move a session.
        r = a.patch("/v1/sessions/acme-1/metadata", json={"tenant": "globex"})
        assert r.status_code == 403 and r.json()["error"] == "forbidden_key"
        r = a.post("/v1/sessions", json={"metadata": {"tenant": "globex"}})
        assert r.status_code == 403
        assert a.delete("/v1/sessions/globex-1").status_code == 404
        assert a.delete("/v1/sessions/acme-1").status_code == 200


def test_a_tenant_holds_at_most_its_quota_of_live_sessions(gw: GatewayHandle) -> None:
    with _tenant(gw, "initech") as c:
        assert c.post("/v1/sessions", json={"id": "ini-1"}).status_code == 201
        assert c.post("/v1/sessions", json={"id": "ini-2"}).status_code == 201
        r = c.post("/v1/sessions", json={"id": "ini-3"})
        assert r.status_code == 429 and r.json()["error"] == "quota_exceeded", r.text
        assert c.delete("/v1/sessions/ini-1").status_code == 200
        assert c.post("/v1/sessions", json={"id": "ini-3"}).status_code == 201


def test_a_tenant_over_its_rate_gets_429_and_others_do_not(tmp_path) -> None:  # type: ignore[no-untyped-def]
    quotas = Quotas(rate=1.0, burst=10)
    with (
        running_gateway(tmp_path / "data", quotas=quotas) as g,
        _tenant(g, "hooli") as fast,
        _tenant(g, "pied") as calm,
    ):
        codes = [fast.get("/v1/sessions").status_code for _ in range(15)]
        assert codes[:10] == [200] * 10 and 429 in codes[10:], codes
        r = fast.get("/v1/sessions")
        assert r.status_code == 429 and r.json()["error"] == "rate_limited"
        assert int(r.headers["retry-after"]) >= 1
        assert calm.get("/v1/sessions").status_code == 200


def test_the_token_command_mints_a_tenants_token(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = tmp_path / "data"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "actors.cli", "--data", str(data), "token", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert cli("create", "--tenant", "acme").returncode == 0
    assert "tenant acme" in cli("list").stdout
    bad = cli("create", "--tenant", "acme", "--session", "s")
    assert bad.returncode == 2 and "name no sessions" in bad.stderr
    assert cli("create").returncode == 2


def test_a_tenant_runs_at_most_its_quota_of_turns_at_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """With one turn at once, a tenant's message that would start a second is 429 with
    Retry-After and stores nothing; one to the session whose turn runs waits behind it;
    another tenant is not held back; once the turn ends the next one may start."""
    with (
        running_gateway(tmp_path / "data", quotas=Quotas(turns=1)) as g,
        _tenant(g, "hooli") as busy,
        _tenant(g, "pied") as calm,
        client(g) as admin,
    ):
        for c, sid in ((busy, "t-1"), (busy, "t-2"), (calm, "p-1")):
            assert c.post("/v1/sessions", json={"id": sid}).status_code == 201
        assert busy.post("/v1/sessions/t-1/messages", json={"text": "!hang"}).status_code == 201
        r = busy.post("/v1/sessions/t-2/messages", json={"text": "hi"})
        assert r.status_code == 429 and r.json()["error"] == "quota_exceeded", r.text
        assert int(r.headers["retry-after"]) >= 1 and "1 turns at once" in r.json()["message"]
        r = busy.post("/v1/sessions/t-2/goals", json={"objective": "x"})
        assert r.status_code == 429, r.text
        kinds = [e["kind"] for e in admin.get("/v1/sessions/t-2/history").json()["events"]]
        assert "user.message" not in kinds, kinds
        assert (
            busy.post("/v1/sessions/t-1/messages", json={"text": "/model big"}).status_code == 201
        )
        assert calm.post("/v1/sessions/p-1/messages", json={"text": "hi"}).status_code == 201
        assert admin.post("/v1/sessions/t-1/interrupt", json={}).status_code == 200

        def sent() -> bool:
            r = busy.post("/v1/sessions/t-2/messages", json={"text": "hi"})
            return r.status_code == 201

        wait_for(sent, timeout=30)


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def test_serve_takes_the_quotas_and_the_connection_limits(
    tmp_path: pathlib.Path, no_leftover_processes: list[int]
) -> None:
    """``serve --tenant-sessions 1 --http-idle-timeout 1``: a tenant's second session is
    429, and a kept-alive connection idle past a second is closed; the same options
    without ``--http`` stop the start naming the option."""
    out = run(tmp_path / "none", "serve", "--tenant-turns", "2", "--for-seconds", "1")
    assert out.returncode == 2 and "--tenant-turns needs --http ADDR" in out.stderr, out.stderr
    out = run(tmp_path / "none", "serve", "--tenant-sessions", "0")
    assert out.returncode == 2 and "at least 1" in out.stderr, out.stderr
    port = free_port()
    d = Daemon(tmp_path / "data")
    with stopped_after(d):
        d.start("--http", f"127.0.0.1:{port}", "--tenant-sessions", "1", "--http-idle-timeout", "1")
        no_leftover_processes.extend(d.systems)
        token = create_token(str(d.data), tenant="acme")
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _listening(port), timeout=30)  # the gateway starts after the file
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=url, headers=headers, timeout=10) as c:
            assert c.post("/v1/sessions", json={"id": "a-1"}).status_code == 201
            r = c.post("/v1/sessions", json={"id": "a-2"})
            assert r.status_code == 429 and r.json()["error"] == "quota_exceeded", r.text
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            head = f"GET /v1/sessions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            s.sendall(head.encode() + b"\r\n")
            start, got = time.monotonic(), b""
            while chunk := s.recv(65536):  # the server closes it: recv returns b""
                got += chunk
            assert got.startswith(b"HTTP/1.1 200"), got[:100]
            # Closed after its 1 s of idling, not the default 5 s.
            assert time.monotonic() - start < 4.0


PRICES = {"version": "t-1", "currency": "EUR", "models": {"*": {"input": 1e6, "output": 1e6}}}


def test_a_tenant_that_spent_its_quota_starts_no_more_turns(tmp_path: pathlib.Path) -> None:
    """Priced by the operator's table (a token costs 1 EUR here), a tenant whose sessions
    spent its 1 EUR gets 429 on the next message, naming what it spent; another tenant
    and the operator are not held back."""
    quotas = Quotas(cost=1.0)
    with (
        running_gateway(tmp_path / "data", quotas=quotas, prices=PRICES) as g,
        _tenant(g, "hooli") as spender,
        _tenant(g, "pied") as calm,
        client(g) as admin,
    ):
        for c, sid in ((spender, "s-1"), (spender, "s-2"), (calm, "p-1")):
            assert c.post("/v1/sessions", json={"id": sid}).status_code == 201
        assert spender.post("/v1/sessions/s-1/messages", json={"text": "hi"}).status_code == 201

        def priced() -> bool:
            return admin.get("/v1/sessions/s-1/budget").json()["cost"] > 0

        wait_for(priced, timeout=30)

        def refused() -> httpx.Response | None:
            r = spender.post("/v1/sessions/s-2/messages", json={"text": "more"})
            return r if r.status_code == 429 else None

        r = wait_for(refused, timeout=30)
        assert r.json()["error"] == "quota_exceeded" and "hooli' spent" in r.json()["message"]
        assert spender.post("/v1/sessions/s-2/goals", json={"objective": "x"}).status_code == 429
        assert calm.post("/v1/sessions/p-1/messages", json={"text": "hi"}).status_code == 201
        assert admin.post("/v1/sessions/s-2/messages", json={"text": "hi"}).status_code == 201
