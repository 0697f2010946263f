"""Token lifecycle over real HTTP and the CLI: minted tokens are listed without their
secret, expire, and are revoked one at a time (open event streams included); the admin
token is never printed. Also the 405 answers' ``Allow`` and the id and resume rules."""

from __future__ import annotations

import json
import os
import pathlib
import stat
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from gateway_support import client, running_gateway

from actors.gateway import GatewayHandle, create_token
from actors.gateway._tokens import TOKENS_FILE, list_tokens, mint, parse_ttl, revoke_token

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayHandle]:
    # Short heartbeats: a revoked stream ends at its next one.
    with running_gateway(tmp_path_factory.mktemp("tok") / "data", ping=0.2) as g:
        yield g


@pytest.fixture(scope="module")
def admin(gw: GatewayHandle) -> Iterator[httpx.Client]:
    with client(gw) as c:
        yield c


def test_ttl_text() -> None:
    assert parse_ttl("30m") == 1800 and parse_ttl("7d") == 7 * 86400 and parse_ttl("5") == 5
    for bad in ("", "0", "-1d", "7y", "d"):
        with pytest.raises(ValueError, match="expiry"):
            parse_ttl(bad)


def test_tokens_are_stored_hashed_listed_and_revoked_one_at_a_time(
    gw: GatewayHandle, admin: httpx.Client
) -> None:
    assert admin.post("/v1/sessions", json={"id": "t-1"}).status_code == 201
    r = admin.post("/v1/tokens", json={"sessions": ["t-1"], "expires_in": "1h"})
    assert r.status_code == 201, r.text
    minted = r.json()
    a, b = minted["token"], create_token(gw.host.data_dir, ["t-1"])
    raw = (pathlib.Path(gw.host.data_dir) / TOKENS_FILE).read_text()
    assert a not in raw and b not in raw
    assert stat.S_IMODE(os.stat(pathlib.Path(gw.host.data_dir) / TOKENS_FILE).st_mode) == 0o600
    listed = admin.get("/v1/tokens").json()["tokens"]
    mine = next(t for t in listed if t["id"] == minted["id"])
    assert "token" not in mine and mine["sessions"] == ["t-1"] and not mine["expired"]
    assert mine["expires"] == pytest.approx(time.time() + 3600, abs=60)
    assert admin.delete(f"/v1/tokens/{minted['id']}").status_code == 200
    assert admin.delete(f"/v1/tokens/{minted['id']}").status_code == 404
    with client(gw, a) as ca, client(gw, b) as cb:
        assert ca.get("/v1/sessions/t-1").status_code == 401
        assert cb.get("/v1/sessions/t-1").status_code == 200
    with client(gw, b) as cb:
        assert cb.get("/v1/tokens").status_code == 403
        assert cb.post("/v1/tokens", json={"sessions": ["t-1"]}).status_code == 403


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"sessions": []},
        {"sessions": [1]},
        {"sessions": ["a"], "expires_in": "soon"},
        {"sessions": ["a"], "expires_in": True},
        {"sessions": ["a"], "read_only": "yes"},
    ],
)
def test_a_bad_token_request_is_422(admin: httpx.Client, body: dict[str, object]) -> None:
    r = admin.post("/v1/tokens", json=body)
    assert r.status_code == 422, r.text


def test_an_expired_token_is_refused(gw: GatewayHandle, admin: httpx.Client) -> None:
    admin.post("/v1/sessions", json={"id": "t-2"})
    info, token = mint(gw.host.data_dir, ["t-2"], ttl=0.5)
    with client(gw, token) as c:
        assert c.get("/v1/sessions/t-2").status_code == 200
        deadline = time.monotonic() + 10
        while c.get("/v1/sessions/t-2").status_code != 401:
            assert time.monotonic() < deadline, "the token did not expire"
            time.sleep(0.1)
    assert next(t for t in list_tokens(gw.host.data_dir) if t.id == info.id).expired(time.time())


def test_revoking_ends_an_open_event_stream(gw: GatewayHandle, admin: httpx.Client) -> None:
    admin.post("/v1/sessions", json={"id": "t-3"})
    info, token = mint(gw.host.data_dir, ["t-3"])
    with (
        client(gw, token) as c,
        c.stream("GET", "/v1/sessions/t-3/events", timeout=httpx.Timeout(5.0)) as r,
    ):
        assert r.status_code == 200
        lines = r.iter_lines()
        assert next(lines).startswith(("id:", ":", "retry:"))
        started = time.monotonic()
        assert revoke_token(gw.host.data_dir, info.id)
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError, StopIteration)):
            for _ in lines:
                assert time.monotonic() - started < 5, "the stream went on after revocation"
            raise StopIteration
    assert time.monotonic() - started < 5


def test_a_405_names_the_allowed_methods(gw: GatewayHandle, admin: httpx.Client) -> None:
    r = admin.put("/v1/sessions")
    assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD, POST", r.headers
    r = admin.post("/v1/sessions/x/history")
    assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"
    r = admin.put("/v1/sessions/x")
    assert r.status_code == 405 and r.headers["allow"] == "DELETE, GET, HEAD"


def _cli(data: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "actors.cli", "--data", str(data), "token", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_token_command_creates_lists_and_revokes(tmp_path: pathlib.Path) -> None:
    data = tmp_path / "data"
    made = _cli(data, "create", "--session", "s-1", "--expires", "7d")
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    token_id = made.stderr.split()[2]
    listed = _cli(data, "list", "--json")
    (row,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert row["id"] == token_id and row["sessions"] == ["s-1"] and secret not in listed.stdout
    assert "expires" in _cli(data, "list").stdout
    assert _cli(data, "create", "--session", "s-1", "--expires", "soon").returncode == 2
    assert _cli(data, "revoke", token_id).returncode == 0
    gone = _cli(data, "revoke", token_id)
    assert gone.returncode == 2 and "no token" in gone.stderr
    assert _cli(data, "list").stdout == ""


def test_one_rule_for_ids_and_resume_points(gw: GatewayHandle, admin: httpx.Client) -> None:
    """A null id is refused, not read as "make one up"; an id with a format character
    (U+202E, which makes text display reversed) is refused naming why; a resume point
    beyond the range is the same 422 in the header and in the query."""
    r = admin.post("/v1/sessions", json={"id": None})
    assert r.status_code == 422 and "'id' must be a string" in r.json()["message"]
    r = admin.post("/v1/sessions", json={"id": "evil\u202etxt"})
    assert r.status_code == 400 and r.json()["error"] == "bad_id"
    admin.post("/v1/sessions", json={"id": "resume-1"})
    huge = str(10**30)
    by_query = admin.get("/v1/sessions/resume-1/events", params={"after": huge})
    by_header = admin.get("/v1/sessions/resume-1/events", headers={"Last-Event-ID": huge})
    assert by_query.status_code == by_header.status_code == 422
    assert by_query.json()["error"] == by_header.json()["error"] == "invalid_field"
