"""Conversation control over real HTTP on loopback: a steer (``mode``), edits,
regenerations, branches and forks, against a gateway over its own daemon."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import wait_for
from gateway_support import client, running_gateway

from actors.gateway import GatewayHandle

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    data: pathlib.Path = tmp_path_factory.mktemp("gwc") / "data"
    gw: GatewayHandle
    with running_gateway(data) as gw, client(gw) as c:
        yield c


def _events(http: httpx.Client, sid: str, after: int = 0) -> list[dict[str, Any]]:
    r = http.get(f"/v1/sessions/{sid}/history", params={"after": after})
    return r.json()["events"]  # type: ignore[no-any-return]


def _ended(http: httpx.Client, sid: str, after: int) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        evs = _events(http, sid, after)
        return next((e for e in evs if e["kind"] in ("turn.completed", "turn.cancelled")), None)

    return wait_for(ended, 30)  # type: ignore[no-any-return]


def _send(http: httpx.Client, sid: str, text: str, **body: Any) -> dict[str, Any]:
    r = http.post(f"/v1/sessions/{sid}/messages", json={"text": text, **body})
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


def test_a_steer_is_stored_mid_turn_and_handed_to_the_next_turn_when_cut_off(
    http: httpx.Client,
) -> None:
    assert http.post("/v1/sessions", json={"id": "steer-1"}).status_code == 201
    first = _send(http, "steer-1", "!hang")
    wait_for(lambda: any(e["kind"] == "turn.started" for e in _events(http, "steer-1")), 10)
    steer = _send(http, "steer-1", "be brief", mode="steer")
    stored = _events(http, "steer-1", steer["seq"] - 1)[0]
    assert stored["kind"] == "user.message" and stored["steer"] is True
    bad = http.post("/v1/sessions/steer-1/messages", json={"text": "x", "mode": "sideways"})
    assert bad.status_code == 422 and "steer" in bad.json()["message"]
    assert http.post("/v1/sessions/steer-1/interrupt", json={}).status_code == 200
    assert _ended(http, "steer-1", first["seq"])["kind"] == "turn.cancelled"
    evs = _events(http, "steer-1", steer["seq"])
    dropped = [e for e in evs if e["kind"] == "steer.dropped"]
    assert len(dropped) == 1 and dropped[0]["handed"] == "next"
    nxt = _ended(http, "steer-1", dropped[0]["seq"])
    assert nxt["kind"] == "turn.completed"
    assert any(e.get("text") == "[scripted] be brief" for e in _events(http, "steer-1"))


def test_edit_regenerate_branches_switch_and_fork_over_http(http: httpx.Client) -> None:
    assert http.post("/v1/sessions", json={"id": "tree-1"}).status_code == 201
    one = _send(http, "tree-1", "one")
    _ended(http, "tree-1", one["seq"])
    r = http.post("/v1/sessions/tree-1/regenerations", json={})
    assert r.status_code == 201, r.text
    regen = r.json()
    _ended(http, "tree-1", regen["seq"])
    r = http.post("/v1/sessions/tree-1/edits", json={"seq": one["seq"], "text": "uno"})
    assert r.status_code == 201, r.text
    edit = r.json()
    end = _ended(http, "tree-1", edit["seq"])
    listed = http.get("/v1/sessions/tree-1/branches").json()["branches"]
    assert [(b["leaf"], b["active"]) for b in listed] == [
        (one["seq"], False),
        (regen["seq"], False),
        (edit["seq"], True),
    ]
    assert listed[2]["reply"] == "[scripted] uno"
    r = http.put("/v1/sessions/tree-1/branch", json={"turn": one["seq"]})
    assert r.status_code == 200, r.text
    active = [b["leaf"] for b in http.get("/v1/sessions/tree-1/branches").json()["branches"]]
    assert one["seq"] in active
    # A well-formed seq that opens no turn is the session's answer (404), not a bad field.
    for method, path, body in (
        ("PUT", "branch", {"turn": 9999}),
        ("POST", "edits", {"seq": one["seq"] + 1, "text": "x"}),
        ("POST", "regenerations", {"seq": 9999}),
    ):
        r = http.request(method, f"/v1/sessions/tree-1/{path}", json=body)
        assert (r.status_code, r.json()["error"]) == (404, "no_such_turn"), r.text
    assert http.post("/v1/sessions/tree-1/edits", json={"seq": 0, "text": "x"}).status_code == 422

    r = http.post("/v1/sessions/tree-1/forks", json={"at": end["seq"], "id": "tree-1-fork"})
    assert r.status_code == 201, r.text
    assert r.headers["location"] == "/v1/sessions/tree-1-fork"
    child = r.json()
    assert child["metadata"]["fork.parent"] == "tree-1"
    assert child["metadata"]["fork.seq"] == str(end["seq"])
    parent = _events(http, "tree-1")[: end["seq"]]
    assert _events(http, "tree-1-fork")[: end["seq"]] == parent
    again = http.post("/v1/sessions/tree-1/forks", json={"at": end["seq"], "id": "tree-1-fork"})
    assert again.status_code == 409 and again.json()["error"] == "exists"
    # Its own id is taken too (by itself): the same answer, not a server error.
    itself = http.post("/v1/sessions/tree-1/forks", json={"id": "tree-1"})
    assert itself.status_code == 409 and itself.json()["error"] == "exists", itself.text
