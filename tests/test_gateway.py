"""The HTTP + SSE gateway over a real daemon (multiproc Host) on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import socket
import stat
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import wait_for
from fake_models import FakeModelServer, chunk, usage_chunk
from gateway_support import SseReader, client, running_gateway

from actors.errors import IdempotencyConflict
from actors.gateway import (
    ROUTES,
    GatewayError,
    GatewayHandle,
    create_token,
    is_loopback,
    parse_bind,
    start_gateway,
)
from actors.gateway._app import PAGES, openapi_bytes
from actors.gateway._hub import Batch, Client
from actors.gateway._tokens import ADMIN_FILE, TOKENS_FILE
from projections import cache_hit_rate
from spine import Usage

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server() -> Iterator[FakeModelServer]:
    """The model server the daemon's operator allows."""
    s = FakeModelServer()
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def gw(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    server: FakeModelServer,
) -> Iterator[GatewayHandle]:
    """One gateway over one daemon for the module (starting a daemon takes a second), on
    each spine: every route must read the daemon's own log, wherever it lives."""
    data = tmp_path_factory.mktemp("gw") / "data"
    allowed = [server.url]
    if request.param == "sqlite":
        with running_gateway(data, model_servers=allowed) as g:
            yield g
        return
    from spine.testing import fresh_schema

    with (
        fresh_schema(request.getfixturevalue("pg_server")) as url,
        running_gateway(data, spine=url, model_servers=allowed) as g,
    ):
        yield g


@pytest.fixture
def http(gw: GatewayHandle) -> Iterator[httpx.Client]:
    with client(gw) as c:
        yield c


def _new(http: httpx.Client, sid: str, **body: Any) -> dict[str, Any]:
    r = http.post("/v1/sessions", json={"id": sid, **body})
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


def _kinds(http: httpx.Client, sid: str) -> list[str]:
    return [e["kind"] for e in http.get(f"/v1/sessions/{sid}/history").json()["events"]]


def _wait_turn_end(http: httpx.Client, sid: str, after: int) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        evs = http.get(f"/v1/sessions/{sid}/history", params={"after": after}).json()["events"]
        return next((e for e in evs if e["kind"] in ("turn.completed", "turn.cancelled")), None)

    return wait_for(ended, 30)  # type: ignore[no-any-return]


# -- sessions and commands ----------------------------------------------------------------


def test_a_session_is_created_listed_read_and_closed_over_http(http: httpx.Client) -> None:
    """POST answers 201 with the session; GET lists and reads it; DELETE closes it."""
    s = _new(http, "crud-1", metadata={"objective": "try it"})
    assert s["id"] == "crud-1" and s["state"] == "live" and s["last_seq"] >= 1
    assert s["metadata"] == {"objective": "try it"}
    assert "crud-1" in [x["id"] for x in http.get("/v1/sessions").json()["sessions"]]
    assert http.get("/v1/sessions/crud-1").json()["id"] == "crud-1"
    r = http.delete("/v1/sessions/crud-1")
    assert r.status_code == 200 and r.json()["state"] == "closed"
    r = http.post("/v1/sessions/crud-1/messages", json={"text": "hi"})
    assert r.status_code == 409 and r.json()["error"] == "closed"


def test_a_session_without_an_id_gets_a_fresh_one(http: httpx.Client) -> None:
    """An empty create body makes a session with a generated id."""
    r = http.post("/v1/sessions")
    assert r.status_code == 201 and len(r.json()["id"]) >= 32
    assert r.headers["location"] == f"/v1/sessions/{r.json()['id']}"


def test_a_message_is_acknowledged_with_the_seq_it_was_stored_at(http: httpx.Client) -> None:
    """The ack names the committed user message's seq; the turn follows in history."""
    _new(http, "msg-1")
    r = http.post("/v1/sessions/msg-1/messages", json={"text": "hello there"})
    assert r.status_code == 201, r.text
    ack = r.json()
    assert ack["duplicate"] is False and ack["consumed"] is False
    ended = _wait_turn_end(http, "msg-1", ack["seq"])
    assert ended["kind"] == "turn.completed"
    evs = http.get("/v1/sessions/msg-1/history").json()["events"]
    stored = evs[ack["seq"] - 1]
    assert (stored["kind"], stored["text"]) == ("user.message", "hello there")
    assert any(e.get("text") == "[scripted] hello there" for e in evs)


def test_a_retry_with_the_same_idempotency_key_returns_the_same_ack(http: httpx.Client) -> None:
    """Two POSTs with one Idempotency-Key store one message; the second is a duplicate."""
    _new(http, "idem-1")
    first = http.post(
        "/v1/sessions/idem-1/messages", json={"text": "once"}, headers={"Idempotency-Key": "k-1"}
    ).json()
    again = http.post(
        "/v1/sessions/idem-1/messages", json={"text": "once"}, headers={"Idempotency-Key": "k-1"}
    ).json()
    assert again["seq"] == first["seq"] and again["duplicate"] is True
    _wait_turn_end(http, "idem-1", first["seq"])
    assert _kinds(http, "idem-1").count("user.message") == 1


def test_a_reused_idempotency_key_with_another_text_is_a_422_naming_the_key(
    gw: GatewayHandle, http: httpx.Client
) -> None:
    """The same Idempotency-Key with a different text answers 422 idempotency_conflict
    naming the key, stores nothing, and the first message stays the only one; the Host
    API raises IdempotencyConflict (an InvalidRequest) for the same reuse."""
    _new(http, "idem-2")
    headers = {"Idempotency-Key": "k-2"}
    url = "/v1/sessions/idem-2/messages"
    first = http.post(url, json={"text": "first text"}, headers=headers).json()
    _wait_turn_end(http, "idem-2", first["seq"])
    last = http.get("/v1/sessions/idem-2").json()["last_seq"]
    r = http.post(url, json={"text": "another text"}, headers=headers)
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "idempotency_conflict" and "'k-2'" in r.json()["message"]
    assert http.get("/v1/sessions/idem-2").json()["last_seq"] == last
    evs = http.get("/v1/sessions/idem-2/history").json()["events"]
    assert [e["text"] for e in evs if e["kind"] == "user.message"] == ["first text"]
    again = http.post(url, json={"text": "first text"}, headers=headers).json()
    assert again["duplicate"] and again["seq"] == first["seq"]
    with pytest.raises(IdempotencyConflict, match="'http:k-2'"):
        gw.host.send("idem-2", "a third text", key="http:k-2")


def test_a_session_id_outside_latin_1_is_created_and_its_location_percent_encoded(
    http: httpx.Client,
) -> None:
    """An id such as "séance-日本" cannot go into a header as it is: the Location header
    carries it percent-encoded, and following it reads the session."""
    r = http.post("/v1/sessions", json={"id": "séance-日本"})
    assert r.status_code == 201, r.text
    assert r.headers["location"] == "/v1/sessions/s%C3%A9ance-%E6%97%A5%E6%9C%AC"
    assert http.get(r.headers["location"]).json()["id"] == "séance-日本"
    ack = http.post(f"{r.headers['location']}/messages", json={"text": "bonjour"})
    assert ack.status_code == 201, ack.text


def test_a_slash_command_is_consumed_and_its_notice_returned(http: httpx.Client) -> None:
    """/model changes metadata; the ack says consumed and carries the notice."""
    _new(http, "slash-1")
    ack = http.post("/v1/sessions/slash-1/messages", json={"text": "/model big"}).json()
    assert ack["consumed"] is True
    assert any("big" in n["text"] for n in ack["notices"])


def test_metadata_is_patched_and_read_back_from_the_status(http: httpx.Client) -> None:
    """PATCH sets and deletes keys; the status projection shows the result."""
    _new(http, "meta-1", metadata={"a": "1", "b": "2"})
    r = http.patch("/v1/sessions/meta-1/metadata", json={"a": "9", "b": None})
    assert r.status_code == 200 and r.json()["seq"] > 0
    status = http.get("/v1/sessions/meta-1/status").json()
    assert status["metadata"]["a"] == "9" and "b" not in status["metadata"]


def test_the_status_has_the_seed_field_names(http: httpx.Client) -> None:
    """Status is the projection in camelCase (turns, usage.inputTokens, egressAllowed, ...)."""
    _new(http, "status-1")
    ack = http.post("/v1/sessions/status-1/messages", json={"text": "count me"}).json()
    _wait_turn_end(http, "status-1", ack["seq"])
    s = wait_for(lambda: (p := http.get("/v1/sessions/status-1/status").json())["turns"] and p)
    assert s["turns"] == 1 and s["usage"]["inputTokens"] >= 1
    fields = {"record", "egressAllowed", "egressBlocked", "fanout", "actions", "cacheHitRate"}
    assert fields <= set(s)
    assert s["record"] == "recording"


def test_the_context_route_reports_the_window_and_the_estimate(http: httpx.Client) -> None:
    """A scripted session manages no context until its window is set; then the route
    says the window, where it came from and the estimate of the next request."""
    _new(http, "ctx-1")
    assert http.get("/v1/sessions/ctx-1/context").json() == {}
    http.patch("/v1/sessions/ctx-1/metadata", json={"ore.model.context_window": "4096"})
    ack = http.post("/v1/sessions/ctx-1/messages", json={"text": "hello there"}).json()
    _wait_turn_end(http, "ctx-1", ack["seq"])
    ctx = http.get("/v1/sessions/ctx-1/context").json()
    assert ctx["window"] == 4096 and ctx["windowSource"] == "setting"
    assert 0 < ctx["estimate"] < 4096 and ctx["compactions"] == 0
    # The status says it too, from the projection (the scripted model measures nothing).
    status = http.get("/v1/sessions/ctx-1/status").json()
    assert status["context"] == {
        "window": 4096,
        "source": "setting",
        "used": 0,
        "remaining": 4096,
        "fill": 0.0,
        "compactions": 0,
        "covered": None,
    }
    assert http.get("/v1/sessions/nobody/context").status_code == 404


def test_the_cache_hit_rate_is_cache_reads_over_input_tokens(
    http: httpx.Client, server: FakeModelServer
) -> None:
    """A model call of 100 prompt tokens, 80 of them cached (input already counts them):
    the status over HTTP says 0.8, the seed's cache-read over input."""
    meta = {"ore.model.provider": "openai", "ore.model.base_url": server.url}
    _new(http, "cache-1", metadata={**meta, "ore.model.name": "fake"})
    server.queue(
        [("sse", [chunk(content="hi"), chunk(finish="stop"), usage_chunk(100, 5, 80)]),
         ("done",)]
    )  # fmt: skip
    ack = http.post("/v1/sessions/cache-1/messages", json={"text": "cached?"}).json()
    _wait_turn_end(http, "cache-1", ack["seq"])
    s = wait_for(lambda: (p := http.get("/v1/sessions/cache-1/status").json())["turns"] and p)
    assert (s["usage"]["inputTokens"], s["usage"]["cacheReadTokens"]) == (100, 80)
    assert s["cacheHitRate"] == pytest.approx(0.8)


def test_the_cache_hit_rate_rule_in_a_table() -> None:
    """cache_hit_rate: reads over input, 0 with no input, never above 1."""
    assert cache_hit_rate(Usage(input_tokens=100, cache_read_tokens=80)) == pytest.approx(0.8)
    assert cache_hit_rate(Usage()) == 0.0 and cache_hit_rate(Usage(cache_read_tokens=3)) == 0.0
    assert cache_hit_rate(Usage(input_tokens=2, cache_read_tokens=5)) == 1.0


def test_history_pages_through_the_stream(http: httpx.Client) -> None:
    """after and limit page the stored events; next_after continues where a page ended."""
    _new(http, "page-1")
    ack = http.post("/v1/sessions/page-1/messages", json={"text": "fill"}).json()
    _wait_turn_end(http, "page-1", ack["seq"])
    seqs: list[int] = []
    after = 0
    while True:
        page = http.get("/v1/sessions/page-1/history", params={"after": after, "limit": 2}).json()
        if not page["events"]:
            break
        assert len(page["events"]) <= 2
        seqs += [e["seq"] for e in page["events"]]
        after = page["next_after"]
    assert seqs == list(range(1, page["last_seq"] + 1))


def test_seal_and_verify_work_over_http(http: httpx.Client) -> None:
    """seal stores a signed root over what is new; verify reports it intact."""
    _new(http, "seal-1")
    r = http.post("/v1/sessions/seal-1/seal").json()
    assert r["seq"] > 0 and r["first"] == 1 and r["root"]
    v = http.post("/v1/sessions/seal-1/verify").json()
    assert v["ok"] is True and v["seq"] > 0


def test_interrupt_cuts_a_hanging_turn_off(http: httpx.Client) -> None:
    """A turn blocked in its model call ends as turn.cancelled after POST interrupt."""
    _new(http, "int-1")
    ack = http.post("/v1/sessions/int-1/messages", json={"text": "!hang"}).json()
    wait_for(lambda: "turn.started" in _kinds(http, "int-1"))
    r = http.post("/v1/sessions/int-1/interrupt", json={"reason": "stop"})
    assert r.status_code == 200, r.text
    assert _wait_turn_end(http, "int-1", ack["seq"])["kind"] == "turn.cancelled"


# -- goal runs ------------------------------------------------------------------------------

CALC = '!tool calculator {"expression": "6*7"}'


def _goal(http: httpx.Client, sid: str, key: str | None = None, **body: Any) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key else {}
    return http.post(f"/v1/sessions/{sid}/goals", json=body, headers=headers)


def _wait(http: httpx.Client, sid: str, timeout: float = 30) -> httpx.Response:
    return http.get(f"/v1/sessions/{sid}/goals/wait", params={"timeout": timeout})


def test_a_goal_run_is_submitted_and_its_answer_waited_for_over_http(
    http: httpx.Client,
) -> None:
    """POST goals answers 201 with the objective's seq (a retry with the same
    Idempotency-Key gets the same Ack); GET goals/wait returns the answer, also when
    asked again after the run ended."""
    _new(http, "goal-1")
    budget = {"max_turns": 3, "max_cost": 1.5}  # money: no operator prices here, none spent
    r = _goal(http, "goal-1", "g-1", objective=CALC, budget=budget)
    assert r.status_code == 201, r.text
    first = r.json()
    again = _goal(http, "goal-1", "g-1", objective=CALC, budget=budget).json()
    assert again["seq"] == first["seq"] and again["duplicate"] is True
    w = _wait(http, "goal-1")
    assert w.status_code == 200, w.text
    assert w.json()["state"] == "converged"
    assert w.json()["answer"] == "calculator returned 42"
    assert _wait(http, "goal-1", 0).json() == w.json()
    kinds = _kinds(http, "goal-1")
    assert kinds.count("session.started") == 2 and kinds.count("session.converged") == 1
    assert http.get("/v1/sessions/goal-1/status").json()["result"] == "calculator returned 42"


def test_a_goal_run_that_is_interrupted_waits_then_reports_its_stall_reason(
    http: httpx.Client,
) -> None:
    """While the run hangs, wait answers "running" at its timeout, a second run is 409
    and a retried submit is still the same Ack; after the interrupt wait reports the
    stall with its reason."""
    _new(http, "goal-2")
    first = _goal(http, "goal-2", "g-2", objective="!hang")
    assert first.status_code == 201, first.text
    wait_for(lambda: "turn.started" in _kinds(http, "goal-2"))
    w = _wait(http, "goal-2", 0.2).json()
    assert w["state"] == "running" and w["goal"] == "goal-2"
    r = _goal(http, "goal-2", objective="another")
    assert r.status_code == 409 and r.json()["error"] == "running", r.text
    retry = _goal(http, "goal-2", "g-2", objective="!hang")
    assert retry.status_code == 201 and retry.json()["seq"] == first.json()["seq"]
    assert http.post("/v1/sessions/goal-2/interrupt").status_code == 200
    w = _wait(http, "goal-2").json()
    assert w["state"] == "stalled" and "cancelled" in w["reason"], w


def test_bad_goal_requests_are_clear_errors(http: httpx.Client) -> None:
    """No run to wait for is 409; a missing objective, a bad budget or timeout is 422;
    an unknown session is 404."""
    _new(http, "goal-3")
    cases = [
        (_wait(http, "goal-3", 0), 409, "no_goal"),
        (_goal(http, "goal-3"), 422, "invalid_field"),
        (_goal(http, "goal-3", objective="  "), 422, "invalid_field"),
        (_goal(http, "goal-3", objective="x", budget={"max_turns": 0}), 422, "invalid_field"),
        (_goal(http, "goal-3", objective="x", budget={"turns": 1}), 422, "invalid_field"),
        (_goal(http, "goal-3", objective="x", budget={"max_cost": 0}), 422, "invalid_field"),
        (_goal(http, "goal-3", objective="x", budget={"max_cost": "1"}), 422, "invalid_field"),
        (_goal(http, "goal-3", objective="x", budget=[1]), 422, "invalid_field"),
        (_wait(http, "goal-3", -1), 422, "invalid_field"),
        (_wait(http, "goal-3", 301), 422, "invalid_field"),
        (http.get("/v1/sessions/goal-3/goals/wait?timeout=soon"), 422, "invalid_field"),
        (_goal(http, "nobody", objective="x"), 404, "not_found"),
        (_wait(http, "nobody"), 404, "not_found"),
    ]
    for r, status, code in cases:
        assert (r.status_code, r.json()["error"]) == (status, code), (r.request.url, r.text)
    assert "session.started" in _kinds(http, "goal-3")
    assert "user.message" not in _kinds(http, "goal-3")


def test_goal_routes_honour_scoped_and_read_only_tokens(
    gw: GatewayHandle, http: httpx.Client
) -> None:
    """A token for another session gets 403 on both goal routes; a read-only token may
    wait but not submit."""
    _new(http, "goal-4")
    _new(http, "goal-4-other")
    other = create_token(gw.host.data_dir, ["goal-4-other"])
    ro = create_token(gw.host.data_dir, ["goal-4"], read_only=True)
    with client(gw, other) as c:
        for r in (_goal(c, "goal-4", objective=CALC), _wait(c, "goal-4", 0)):
            assert r.status_code == 403 and r.json()["error"] == "forbidden", r.request.url
    with client(gw, ro) as c:
        r = _goal(c, "goal-4", objective=CALC)
        assert r.status_code == 403 and r.json()["error"] == "forbidden"
        assert _wait(c, "goal-4", 0).status_code == 409
    assert "user.message" not in _kinds(http, "goal-4")
    assert _goal(http, "goal-4", objective=CALC).status_code == 201
    with client(gw, ro) as c:
        assert _wait(c, "goal-4").json()["answer"] == "calculator returned 42"


def test_a_goal_waited_for_after_a_daemon_restart_is_read_from_the_stream(
    tmp_path: pathlib.Path,
) -> None:
    """A run that converged under one daemon is answered by the next one's wait."""
    with running_gateway(tmp_path / "data") as g, client(g) as http:
        _new(http, "goal-5")
        assert _goal(http, "goal-5", objective=CALC).status_code == 201
        assert _wait(http, "goal-5").json()["state"] == "converged"
    with running_gateway(tmp_path / "data") as g, client(g) as http:
        w = _wait(http, "goal-5", 0).json()
        assert (w["state"], w["answer"]) == ("converged", "calculator returned 42")


# -- errors ---------------------------------------------------------------------------------


def test_errors_are_json_with_the_right_status(gw: GatewayHandle, http: httpx.Client) -> None:
    """400 bad JSON and bad id, 401, 404, 409 exists, 413, 422, each {error, message}."""
    _new(http, "err-1")
    cases = [
        (http.post("/v1/sessions/err-1/messages", content=b"{nope"), 400, "bad_json"),
        (http.post("/v1/sessions/err-1/messages", json=[1]), 400, "bad_json"),
        (http.get("/v1/sessions/a.b"), 400, "bad_id"),
        (http.post("/v1/sessions", json={"id": "has space"}), 400, "bad_id"),
        (httpx.get(f"{gw.url}/v1/sessions"), 401, "unauthorized"),
        (
            httpx.get(f"{gw.url}/v1/sessions", headers={"Authorization": "Bearer nope"}),
            401,
            "unauthorized",
        ),
        (http.get("/v1/sessions/nobody"), 404, "not_found"),
        (http.get("/v1/sessions/nobody/history"), 404, "not_found"),
        (http.post("/v1/sessions/nobody/messages", json={"text": "x"}), 404, "not_found"),
        (http.post("/v1/sessions", json={"id": "err-1"}), 409, "exists"),
        (
            http.post("/v1/sessions/err-1/messages", json={"text": "x" * (300 * 1024)}),
            413,
            "too_large",
        ),
        (http.post("/v1/sessions/err-1/messages", json={"text": 5}), 422, "invalid_field"),
        (http.post("/v1/sessions", json={"metadata": {"k": 1}}), 422, "invalid_field"),
        (http.get("/v1/sessions/err-1/history", params={"limit": "x"}), 422, "invalid_field"),
        (http.get("/v1/nothing-here"), 404, "not_found"),
    ]
    for r, status, code in cases:
        assert (r.status_code, r.json()["error"]) == (status, code), (r.request.url, r.text)
        assert r.json()["message"]
    assert _kinds(http, "err-1") == ["session.started"]


def test_a_full_queue_is_answered_429(tmp_path: pathlib.Path) -> None:
    """Under the reject busy policy a message mid-turn is refused with 429, nothing stored."""
    with running_gateway(tmp_path / "data", busy_policy="reject") as g, client(g) as http:
        _new(http, "busy-1")
        http.post("/v1/sessions/busy-1/messages", json={"text": "!hang"})
        wait_for(lambda: "turn.started" in _kinds(http, "busy-1"))
        r = http.post("/v1/sessions/busy-1/messages", json={"text": "too soon"})
        assert r.status_code == 429 and r.json()["error"] == "busy"
        assert r.headers["retry-after"]
        http.post("/v1/sessions/busy-1/interrupt")
        assert _kinds(http, "busy-1").count("user.message") == 1


def test_a_runtime_that_does_not_answer_gives_503(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """With the embedding program's Host gone, commands answer 503 with Retry-After and
    reads of the spine still work."""
    from actors.host import Host

    host = Host(tmp_path / "data", timeout=20)
    try:
        g = start_gateway(tmp_path / "data", host=host)
        try:
            with client(g) as http:
                _new(http, "gone-1")
                host.close()
                r = http.post("/v1/sessions/gone-1/messages", json={"text": "anyone?"})
                assert r.status_code == 503 and r.json()["error"] == "unavailable"
                assert r.headers["retry-after"]
                assert http.get("/v1/sessions/gone-1/history").status_code == 200
        finally:
            g.stop()
    finally:
        host.close()


# -- tokens ---------------------------------------------------------------------------------


def test_the_admin_token_is_owner_only_and_scoped_tokens_are_stored_hashed(
    gw: GatewayHandle,
) -> None:
    """gateway-token is mode 0600; the tokens file holds digests, never a token."""
    data = gw.host.data_dir
    assert stat.S_IMODE(os.stat(os.path.join(data, ADMIN_FILE)).st_mode) == 0o600
    token = create_token(data, ["x"])
    path = os.path.join(data, TOKENS_FILE)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    text = pathlib.Path(path).read_text()
    assert token not in text and token[4:] not in text


def test_a_scoped_token_reaches_only_its_sessions(gw: GatewayHandle, http: httpx.Client) -> None:
    """A token for one session reads and writes it, gets 403 elsewhere, lists only it."""
    _new(http, "mine-1")
    _new(http, "theirs-1")
    token = create_token(gw.host.data_dir, ["mine-1"])
    with client(gw, token) as mine:
        assert mine.get("/v1/sessions/mine-1").status_code == 200
        r = mine.post("/v1/sessions/mine-1/messages", json={"text": "/model small"})
        assert r.status_code == 201
        for r in (
            mine.get("/v1/sessions/theirs-1"),
            mine.get("/v1/sessions/theirs-1/history"),
            mine.get("/v1/sessions/theirs-1/events"),
            mine.post("/v1/sessions/theirs-1/messages", json={"text": "x"}),
            mine.post("/v1/sessions", json={"id": "new-1"}),
            mine.get("/v1/events"),
        ):
            assert r.status_code == 403 and r.json()["error"] == "forbidden", r.request.url
        assert [s["id"] for s in mine.get("/v1/sessions").json()["sessions"]] == ["mine-1"]
    assert _kinds(http, "theirs-1") == ["session.started"]


def test_a_read_only_token_reads_but_cannot_write(gw: GatewayHandle, http: httpx.Client) -> None:
    """GETs pass; POST, PATCH and DELETE answer 403 and change nothing."""
    _new(http, "ro-1")
    token = create_token(gw.host.data_dir, ["ro-1"], read_only=True)
    with client(gw, token) as ro:
        assert ro.get("/v1/sessions/ro-1/history").status_code == 200
        assert ro.get("/v1/sessions/ro-1/status").status_code == 200
        for r in (
            ro.post("/v1/sessions/ro-1/messages", json={"text": "x"}),
            ro.post("/v1/sessions/ro-1/interrupt"),
            ro.patch("/v1/sessions/ro-1/metadata", json={"a": "b"}),
            ro.delete("/v1/sessions/ro-1"),
        ):
            assert r.status_code == 403, r.request.url
    assert _kinds(http, "ro-1") == ["session.started"]


def test_a_non_loopback_bind_is_refused_unless_allowed(tmp_path: pathlib.Path) -> None:
    """0.0.0.0 and a LAN address are refused without allow_remote; bad binds are named."""
    for bind in ("0.0.0.0:0", "10.1.2.3:8080"):
        with pytest.raises(GatewayError, match="not a loopback address"):
            start_gateway(tmp_path, bind)
    for bind in ("8080", "host:", ":80", "127.0.0.1:99999"):
        with pytest.raises(GatewayError):
            parse_bind(bind)
    assert is_loopback("127.0.0.5") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("192.168.1.1")


# -- SSE ------------------------------------------------------------------------------------


def _stream(http: httpx.Client, sid: str, **kw: Any) -> Any:
    return http.stream("GET", f"/v1/sessions/{sid}/events", **kw)


@pytest.fixture(params=[True, False], ids=["direct", "asgi"])
def direct(request: pytest.FixtureRequest, gw: GatewayHandle) -> Iterator[bool]:
    """SSE bodies written straight to the socket, and through ASGI (any other server)."""
    gw.gateway.direct = request.param
    try:
        yield request.param
    finally:
        gw.gateway.direct = True


def test_sse_sends_stored_events_with_their_seq_as_id_and_a_retry(
    http: httpx.Client, direct: bool
) -> None:
    """From seq 0: every stored event in order, id = seq, event = kind, data = stored JSON."""
    _new(http, f"sse-1-{direct}")
    ack = http.post(f"/v1/sessions/sse-1-{direct}/messages", json={"text": "stream me"}).json()
    _wait_turn_end(http, f"sse-1-{direct}", ack["seq"])
    stored = http.get(f"/v1/sessions/sse-1-{direct}/history").json()["events"]
    with _stream(http, f"sse-1-{direct}") as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        reader = SseReader(r)
        got = [e for e in reader.until(lambda e: e["id"] == str(len(stored))) if e["id"]]
    assert reader.retry == 1000
    assert [int(e["id"]) for e in got] == [e["seq"] for e in stored]
    assert [e["event"] for e in got] == [e["kind"] for e in stored]
    assert [json.loads(e["data"]) for e in got] == stored


def test_sse_resumes_after_last_event_id_exactly(http: httpx.Client) -> None:
    """A reconnect with Last-Event-ID starts right after it; ?after does the same."""
    _new(http, "sse-2")
    ack = http.post("/v1/sessions/sse-2/messages", json={"text": "resume me"}).json()
    last = _wait_turn_end(http, "sse-2", ack["seq"])["seq"]
    with _stream(http, "sse-2", headers={"Last-Event-ID": "3"}) as r:
        got = SseReader(r).until(lambda e: e["id"] == str(last))
    assert [int(e["id"]) for e in got if e["id"]] == list(range(4, last + 1))
    with _stream(http, "sse-2", params={"after": 2, "kinds": "assistant.message"}) as r:
        got = SseReader(r).until(lambda e: e["event"] == "assistant.message")
    assert [e["event"] for e in got if e["id"]] == ["assistant.message"]


def test_a_stream_cut_mid_turn_and_resumed_shows_every_event_once(http: httpx.Client) -> None:
    """Disconnect while a slow turn streams; resume from the last id: each stored event
    exactly once, live deltas never carrying an id."""
    _new(http, "cut-1")
    ack = http.post(
        "/v1/sessions/cut-1/messages", json={"text": "!slow 0.1 one two three four five six"}
    ).json()
    seen: list[dict[str, Any]] = []
    with _stream(http, "cut-1") as r:
        seen += SseReader(r).until(lambda e: e["event"] == "assistant.delta")
    # The connection is gone mid-turn; the turn goes on streaming meanwhile.
    last_id = [e["id"] for e in seen if e["id"]][-1]
    with _stream(http, "cut-1", headers={"Last-Event-ID": last_id}) as r:
        seen += SseReader(r).until(lambda e: e["event"] == "turn.completed")
    stored = [e for e in seen if e["id"] is not None]
    live = [e for e in seen if e["id"] is None]
    history = http.get("/v1/sessions/cut-1/history").json()["events"]
    end = next(e["seq"] for e in history if e["kind"] == "turn.completed")
    assert [int(e["id"]) for e in stored] == list(range(1, end + 1))
    assert [json.loads(e["data"]) for e in stored] == history[:end]
    assert live and {e["event"] for e in live} == {"assistant.delta"}
    assert all(json.loads(e["data"])["after"] >= ack["seq"] for e in live)


def test_live_deltas_stream_the_reply_before_it_is_stored(http: httpx.Client) -> None:
    """During a slow turn the words arrive as unnumbered deltas, then the stored message."""
    _new(http, "delta-1")
    with _stream(http, "delta-1") as r:
        reader = SseReader(r)
        reader.until(lambda e: e["event"] == "session.started")
        http.post("/v1/sessions/delta-1/messages", json={"text": "!slow 0.05 a b c d"})
        got = reader.until(lambda e: e["event"] == "assistant.message")
    deltas = [json.loads(e["data"])["text"] for e in got if e["event"] == "assistant.delta"]
    message = json.loads(got[-1]["data"])["text"]
    assert deltas and "".join(deltas) == message
    assert all(e["id"] is None for e in got if e["event"] == "assistant.delta")


def test_heartbeats_keep_an_idle_stream_open(gw: GatewayHandle, http: httpx.Client) -> None:
    """An idle stream gets comment heartbeats at the configured interval."""
    _new(http, "beat-1")
    gw.gateway.ping = 0.2
    try:
        with _stream(http, "beat-1") as r:
            reader = SseReader(r)
            reader.next()
            # Nothing happens in the session: what comes now can only be heartbeats.
            beats = [line for line, _ in zip(reader.lines, range(4), strict=False) if line]
    finally:
        gw.gateway.ping = 15.0
    assert len(beats) >= 2 and all(b.startswith(": ping") for b in beats), beats


def test_a_closed_session_ends_its_stream(http: httpx.Client) -> None:
    """Closing the session ends the SSE response after the closing lifecycle event."""
    _new(http, "end-1")
    with _stream(http, "end-1") as r:
        reader = SseReader(r)
        reader.until(lambda e: e["event"] == "session.started")
        http.delete("/v1/sessions/end-1")
        got = reader.until(lambda e: e["event"] == "session.lifecycle")
        assert json.loads(got[-1]["data"])["phase"] == "closed"
        with pytest.raises(EOFError):
            reader.next()


def test_a_stalled_client_does_not_hold_back_another(http: httpx.Client, gw: GatewayHandle) -> None:
    """A client that connects and never reads leaves other streams and commands serving."""
    _new(http, "stall-1")
    host, port = gw.url.removeprefix("http://").split(":")
    stalled = socket.create_connection((host, int(port)))
    try:
        stalled.sendall(
            f"GET /v1/sessions/stall-1/events HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {gw.token}\r\n\r\n".encode()
        )
        with _stream(http, "stall-1") as r:
            reader = SseReader(r)
            reader.until(lambda e: e["event"] == "session.started")
            for i in range(5):
                text = f"!slow 0.001 {' '.join(['word'] * 200)} {i}"
                http.post("/v1/sessions/stall-1/messages", json={"text": text})
            got = reader.until(
                lambda e: (
                    e["event"] == "assistant.message"
                    and json.loads(e["data"])["text"].endswith(" 4")
                )
            )
        assert sum(e["event"] == "turn.completed" for e in got) >= 4
    finally:
        stalled.close()


class _Held:
    """An `Out` whose client never reads: everything written stays buffered."""

    closed = False

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, body: bytes, framed: bytes | None = None) -> None:
        self.writes.append(body)

    def buffered(self) -> int:
        return sum(map(len, self.writes))

    async def room(self, timeout: float) -> bool:
        return True


def test_a_live_client_too_far_behind_is_disconnected() -> None:
    """Past its byte bound a live client's stream ends (it resumes from its last id);
    before that, a record it already has is never offered twice."""
    from spine import Event, Kind, Record, encode_event

    def rec(seq: int) -> Record:
        return Record("s", seq, seq, Kind.USER_MESSAGE, encode_event(Event(kind=Kind.USER_MESSAGE)))

    async def run() -> tuple[Client, _Held]:
        out = _Held()
        c = Client(2, None, out, limit=3000)
        c.live = True
        c.offer(Batch.of([rec(2), rec(3)]))  # seq 2 is the client's already
        assert not c.ended and [w.startswith(b"id: 3\r\n") for w in out.writes] == [True]
        while not c.ended:
            c.offer(Batch.of([rec(c.cursor + 1), rec(c.cursor + 2)]))
        return c, out

    c, out = asyncio.run(run())
    assert c.overflowed and c.done.is_set() and out.buffered() > 3000
    seqs = [int(line[4:]) for w in out.writes for line in w.split(b"\r\n") if line[:4] == b"id: "]
    assert seqs == list(range(3, c.cursor + 1))


def _raw_get(gw: GatewayHandle, path: str, version: str = "1.1", **sock: int) -> socket.socket:
    """A bare socket that sent one GET (options: SO_RCVBUF before connecting)."""
    host, port = gw.url.removeprefix("http://").split(":")
    s = socket.socket()
    for opt, value in sock.items():
        s.setsockopt(socket.SOL_SOCKET, getattr(socket, opt), value)
    s.settimeout(30)
    s.connect((host, int(port)))
    s.sendall(
        f"GET {path} HTTP/{version}\r\nHost: x\r\nAuthorization: Bearer {gw.token}\r\n\r\n".encode()
    )
    return s


class _Wire:
    """Reads an HTTP/1.1 response off a socket, checking its chunked framing byte by byte."""

    def __init__(self, s: socket.socket) -> None:
        self.s, self.buf = s, b""

    def _need(self, n: int) -> None:
        while len(self.buf) < n:
            data = self.s.recv(1 << 16)
            if not data:
                raise EOFError("the connection closed")
            self.buf += data

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._need(len(self.buf) + 1)
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def head(self) -> tuple[bytes, dict[bytes, bytes]]:
        status, headers = self.line(), {}
        while line := self.line():
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        return status, headers

    def chunk(self) -> bytes:
        """One chunk's data (b"" for the last chunk), its framing checked exactly."""
        size = self.line()
        assert size and all(c in b"0123456789abcdef" for c in size), size
        n = int(size, 16)
        self._need(n + 2)
        data, crlf, self.buf = self.buf[:n], self.buf[n : n + 2], self.buf[n + 2 :]
        assert crlf == b"\r\n", (size, data[-20:], crlf)
        return data


def _events(body: bytes) -> list[dict[str, str]]:
    """The SSE events (with an id) in a body."""
    out = []
    for block in body.split(b"\r\n\r\n"):
        fields = dict(
            line.split(b": ", 1)
            for line in block.split(b"\r\n")
            if line[:1] != b":" and b": " in line
        )
        if b"id" in fields:
            out.append({k.decode(): v.decode() for k, v in fields.items()})
    return out


def test_sse_bytes_on_the_wire_are_correct_chunked_http(
    http: httpx.Client, gw: GatewayHandle
) -> None:
    """A session stream is chunked HTTP/1.1, written straight to the socket, every chunk
    framed exactly; it ends with the last chunk, and the connection serves a next request."""
    _new(http, "wire-1")
    ack = http.post("/v1/sessions/wire-1/messages", json={"text": "on the wire"}).json()
    _wait_turn_end(http, "wire-1", ack["seq"])
    s = _raw_get(gw, "/v1/sessions/wire-1/events")
    try:
        wire = _Wire(s)
        status, headers = wire.head()
        assert status == b"HTTP/1.1 200 OK", status
        assert headers[b"transfer-encoding"] == b"chunked" and b"content-length" not in headers
        assert headers[b"content-type"].startswith(b"text/event-stream")
        body = wire.chunk()
        assert body.startswith(b": vertebra\r\nretry: 1000\r\n\r\n")
        hub = gw.gateway.hubs._hubs["wire-1"]
        assert wait_for(lambda: all(c.live for c in hub.clients), timeout=10)
        assert {type(c.out).__name__ for c in hub.clients} == {"Wire"}
        http.post("/v1/sessions/wire-1/messages", json={"text": "live now"})
        http.delete("/v1/sessions/wire-1")
        while data := wire.chunk():
            body += data
        assert wire.buf == b""
        stored = http.get("/v1/sessions/wire-1/history").json()["events"]
        got = _events(body)
        assert [int(e["id"]) for e in got] == [e["seq"] for e in stored]
        assert [json.loads(e["data"]) for e in got] == stored
        # The server's own HTTP state followed: the connection takes a next request.
        auth = f"Authorization: Bearer {gw.token}"
        s.sendall(f"GET /v1/sessions/wire-1 HTTP/1.1\r\nHost: x\r\n{auth}\r\n\r\n".encode())
        status, headers = wire.head()
        assert status == b"HTTP/1.1 200 OK"
        wire._need(int(headers[b"content-length"]))
        assert json.loads(wire.buf)["state"] == "closed"
    finally:
        s.close()
    head = http.head("/v1/sessions/wire-1/events")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-type"].startswith("text/event-stream")


def test_an_http_1_0_stream_is_unframed_and_ends_with_the_connection(
    http: httpx.Client, gw: GatewayHandle
) -> None:
    """HTTP/1.0 has no chunks: the events go out as they are, and the end closes."""
    _new(http, "wire-2")
    s = _raw_get(gw, "/v1/sessions/wire-2/events", version="1.0")
    try:
        wire = _Wire(s)
        status, headers = wire.head()
        assert status.startswith(b"HTTP/1.1 200") and b"transfer-encoding" not in headers
        wire._need(len(b": vertebra"))
        http.delete("/v1/sessions/wire-2")
        with contextlib.suppress(EOFError):
            wire._need(1 << 30)
        assert wire.buf.startswith(b": vertebra\r\nretry: 1000\r\n\r\nid: 1\r\n")
        stored = http.get("/v1/sessions/wire-2/history").json()["events"]
        assert [int(e["id"]) for e in _events(wire.buf)] == [e["seq"] for e in stored]
    finally:
        s.close()


def test_a_client_that_stops_reading_is_dropped_and_the_others_get_everything(
    gw: GatewayHandle, http: httpx.Client, direct: bool
) -> None:
    """A live client that stops reading is disconnected once its unread bytes pass the
    bound; a reading client of the same stream meanwhile gets every event, in order."""
    from actors.runner import spine_spec
    from spine import Event, Kind, open_log

    stream, n = f"wire-slow-{direct}", 300
    log = open_log(spine_spec(gw.host.data_dir, gw.host.spine))
    log.append(stream, [Event(kind=Kind.USER_MESSAGE, text="0")])
    limit = gw.gateway.hubs.limit
    gw.gateway.hubs.limit = 256 * 1024
    stalled = _raw_get(gw, f"/v1/sessions/{stream}/events", SO_RCVBUF=4096)
    try:
        with _stream(http, stream) as r:
            reader = SseReader(r)
            reader.until(lambda e: e["id"] == "1")
            hub = gw.gateway.hubs._hubs[stream]
            assert wait_for(
                lambda: len(hub.clients) == 2 and all(c.live for c in hub.clients), timeout=10
            )
            big = "x" * 20_000
            seen = threading.Semaphore(5)

            def append() -> None:
                # At most 5 events (100 KB) ahead of the reading client, far below
                # the bound: only the stalled client falls behind.
                for i in range(2, n + 2):
                    assert seen.acquire(timeout=30)
                    log.append(stream, [Event(kind=Kind.USER_MESSAGE, text=f"{i} {big}")])

            writer = threading.Thread(target=append)
            writer.start()
            got = []
            try:
                while len(got) < n:
                    got.append(reader.next())
                    seen.release()
            finally:
                writer.join(30)
            assert [int(e["id"]) for e in got] == list(range(2, n + 2))
            # ~6 MB went out; the stalled client could hold a small part of it.
            assert wait_for(lambda: len(hub.clients) == 1, timeout=30)
        # Dropped: the connection is reset (written straight to the socket), or, through
        # ASGI, the response ends after what was queued for it.
        received = b""
        with contextlib.suppress(ConnectionResetError):
            while not received.endswith(b"\r\n0\r\n\r\n") and (data := stalled.recv(1 << 16)):
                received += data
        assert received.count(b"\r\nid: ") < n
    finally:
        gw.gateway.hubs.limit = limit
        stalled.close()
        log.close()


def test_the_global_stream_carries_every_session_with_positions(http: httpx.Client) -> None:
    """/v1/events: id is the global position, data names the session and its event."""
    _new(http, "glob-1")
    with http.stream("GET", "/v1/events", params={"after": 0}) as r:
        got = SseReader(r).until(
            lambda e: (
                e["event"] == "session.started" and json.loads(e["data"])["session"] == "glob-1"
            )
        )
    positions = [int(e["id"]) for e in got]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    data = json.loads(got[-1]["data"])
    assert data["seq"] == 1 and data["event"]["kind"] == "session.started"


# -- the API description ----------------------------------------------------------------------


def test_openapi_lists_every_route_and_validates(http: httpx.Client) -> None:
    """The served document is the repository's, a valid OpenAPI 3.1, with every route."""
    from openapi_spec_validator import validate

    spec = http.get("/openapi.json").json()
    assert spec == json.loads(openapi_bytes())
    validate(spec)
    documented = {
        (m.upper(), p) for p, ops in spec["paths"].items() for m in ops if m != "parameters"
    }
    served = {(method, path) for method, path, _, _ in ROUTES}
    served |= {("GET", p) for p in ("/openapi.json", "/", *PAGES)}
    assert documented == served


# -- the command line and the README ---------------------------------------------------------

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def _readme_curl_block(marker: str = "TOKEN=") -> str:
    """The first shell block of the README's HTTP section that contains ``marker``."""
    text = README.read_text()
    section = text[text.index("## HTTP, server-sent events") :]
    section = section[: section.index("\n## ", 1)]
    blocks = section.split("```sh\n")
    return next(b.split("```")[0] for b in blocks[1:] if marker in b)


def test_serve_http_prints_the_url_and_the_readme_curl_examples_work(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """`vertebra serve --http` prints the URL and where the token is; the README's curl
    lines run as written (only the port differs); `token create` mints a read-only token
    that works."""
    import signal
    import subprocess
    import sys

    from actors._runtime.system import free_port

    port = free_port()
    daemon = subprocess.Popen(
        [sys.executable, "-m", "actors.cli", "serve", "--quiet", "--http", f"127.0.0.1:{port}"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    data = tmp_path / "vertebra-data"
    try:
        wait_for(lambda: (data / "daemon.json").exists() or daemon.poll() is not None, 30)
        assert daemon.poll() is None, daemon.stderr.read() if daemon.stderr else ""
        no_leftover_processes.append(
            json.loads((data / "daemon.json").read_text())["system_session"]
        )
        wait_for(lambda: (data / "gateway-token").exists() or daemon.poll() is not None, 30)
        token = (data / "gateway-token").read_text().strip()
        wait_for(lambda: httpx.get(f"http://127.0.0.1:{port}/openapi.json").status_code == 200)
        script = _readme_curl_block().replace("8080", str(port))
        out = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        # curl --max-time ends the event stream with status 28; everything before ran.
        assert out.returncode == 28, out.stderr
        assert '"id":"http-1"' in out.stdout and '"seq":2' in out.stdout
        assert "hello over http" in out.stdout and '"turns"' in out.stdout
        sse = out.stdout.replace("\r\n", "\n")
        assert "id: 3\nevent: turn.started" in sse and "id: 2\n" not in sse
        ro = subprocess.run(
            [
                sys.executable,
                "-m",
                "actors.cli",
                "token",
                "create",
                "--session",
                "http-1",
                "--read-only",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        goal = subprocess.run(
            [
                "bash",
                "-euo",
                "pipefail",
                "-c",
                _readme_curl_block("/goals").replace("8080", str(port)),
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=90,
            env={**os.environ, "TOKEN": token},
        )
        assert goal.returncode == 0, goal.stderr
        assert '"id":"goal-1"' in goal.stdout and '"duplicate":false' in goal.stdout
        assert '"state":"converged","answer":"[scripted] plan the release"' in goal.stdout
        scoped = ro.stdout.strip()
        headers = {"Authorization": f"Bearer {scoped}"}
        base = f"http://127.0.0.1:{port}/v1/sessions/http-1"
        assert httpx.get(base, headers=headers).status_code == 200
        assert (
            httpx.post(f"{base}/messages", headers=headers, json={"text": "x"}).status_code == 403
        )
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            stdout, _ = daemon.communicate(timeout=30)
        finally:
            if daemon.poll() is None:
                daemon.kill()
    assert daemon.returncode == 0
    # The admin token is never printed, only where it is.
    assert token not in stdout
    assert (
        f"vertebra http: http://127.0.0.1:{port}  admin token in vertebra-data/gateway-token"
        in stdout
    )
    assert f"http://127.0.0.1:{port}/#token=$(cat vertebra-data/gateway-token)" in stdout


def test_a_waiting_action_is_listed_and_decided_over_http(http: httpx.Client) -> None:
    """A sandboxed session's fetch waits; GET approvals lists it, POST approvals/{call}
    approves it (a repeat is a duplicate), and a bad call or decision is an error."""
    meta = {"governance.trust": "sandboxed", "governance.egress_allow": "127.0.0.1"}
    _new(http, "gov-1", metadata=meta)
    fetch = '!tool http_get {"url": "http://127.0.0.1:9/"}'
    assert http.post("/v1/sessions/gov-1/messages", json={"text": fetch}).status_code == 201

    def listed() -> list[dict[str, object]]:
        r = http.get("/v1/sessions/gov-1/approvals")
        assert r.status_code == 200
        return r.json()["pending"]  # type: ignore[no-any-return]

    (w,) = wait_for(listed, 20)
    assert w["action"] == "http_get"
    url = f"/v1/sessions/gov-1/approvals/{w['call']}"
    assert http.post(url, json={"decision": "maybe"}).status_code == 422
    # A result by hand is for a call in doubt, and goes with resolve only.
    assert http.post(url, json={"decision": "resolve"}).status_code == 422
    assert http.post(url, json={"decision": "approve", "result": "x"}).status_code == 422
    r = http.post(url, json={"decision": "resolve", "result": "fetched it myself"})
    assert r.status_code == 422 and "not in doubt" in r.json()["message"]
    assert (
        http.post("/v1/sessions/gov-1/approvals/x", json={"decision": "approve"}).status_code == 400
    )
    # An answer's content is for a server's question, never for an approval.
    r = http.post(url, json={"decision": "approve", "content": {"color": "red"}})
    assert r.status_code == 422 and "takes no content" in r.json()["message"]
    r = http.post(url, json={"decision": "reject", "content": {}})
    assert r.status_code == 422 and "'content'" in r.json()["message"]
    r = http.post(url, json={"decision": "approve", "note": "fine"})
    assert r.status_code == 200 and not r.json()["duplicate"]
    assert http.post(url, json={"decision": "approve"}).json()["duplicate"]
    r = http.post(url, json={"decision": "reject"})
    assert r.status_code == 422 and "already approved" in r.json()["message"]
    r = http.post("/v1/sessions/gov-1/approvals/99999", json={"decision": "reject"})
    assert r.status_code == 422 and "no action 99999" in r.json()["message"]
    wait_for(lambda: not listed(), 20)
    assert http.get("/v1/sessions/gov-1/status").json()["pending"] == []


def test_approvals_and_status_give_a_waiting_actions_input_as_the_same_json_object(
    http: httpx.Client,
) -> None:
    """The approvals route and the status route both answer ``input`` as the tool's
    arguments as a JSON object (as the stream's events do), never a JSON string of them."""
    meta = {"governance.trust": "sandboxed", "governance.egress_allow": "127.0.0.1"}
    _new(http, "gov-input", metadata=meta)
    fetch = '!tool http_get {"url": "http://127.0.0.1:9/a b"}'
    assert http.post("/v1/sessions/gov-input/messages", json={"text": fetch}).status_code == 201

    def listed() -> list[dict[str, Any]]:
        return http.get("/v1/sessions/gov-input/approvals").json()["pending"]  # type: ignore[no-any-return]

    (w,) = wait_for(listed, 20)
    (s,) = http.get("/v1/sessions/gov-input/status").json()["pending"]
    want = {"url": "http://127.0.0.1:9/a b"}
    assert w["input"] == want and s["input"] == want
    evs = http.get("/v1/sessions/gov-input/history").json()["events"]
    (asked,) = [e for e in evs if e["kind"] == "action.pending"]
    assert asked["input"] == want
    r = http.post(f"/v1/sessions/gov-input/approvals/{w['call']}", json={"decision": "reject"})
    assert r.status_code == 200


def test_a_passivated_session_is_listed_and_read_with_its_metadata_and_stays_passivated(
    tmp_path: pathlib.Path,
) -> None:
    """Once a session passivates, GET /v1/sessions and GET /v1/sessions/{id} answer its
    metadata from the projections, and neither brings it back (it stays passivated, no
    process starts); an unknown id is still 404."""
    with running_gateway(tmp_path / "data", idle_timeout=0.3) as g, client(g) as http:
        meta = {"ore.model.name": "kept", "team": "blue"}
        _new(http, "idle-1", metadata=meta)
        r = http.post("/v1/sessions/idle-1/messages", json={"text": "hello"})
        _wait_turn_end(http, "idle-1", r.json()["seq"])
        wait_for(lambda: g.host.stats()["passivated"] >= 1, 20)
        passivated = g.host.stats()["passivated"]
        for _ in range(3):
            (listed,) = http.get("/v1/sessions").json()["sessions"]
            one = http.get("/v1/sessions/idle-1").json()
            assert listed == one
            assert one["state"] == "passivated" and one["metadata"] == meta
        # No read started it again (a woken session would be live, then passivate anew).
        assert g.host.stats()["passivated"] == passivated
        assert http.get("/v1/sessions").json()["sessions"][0]["state"] == "passivated"
        assert http.get("/v1/sessions/nobody").status_code == 404
