"""Timers and budgets over real HTTP on loopback: set, list, fire, cancel, and a budget
pause answered with a raise."""

from __future__ import annotations

import pathlib

import pytest
from conftest import wait_for
from gateway_support import client, running_gateway

pytestmark = pytest.mark.timeout(120)

PRICES = {"version": "http-1", "currency": "EUR", "models": {"*": {"input": 1e6, "output": 1e6}}}


def test_timers_and_a_budget_pause_over_http(tmp_path: pathlib.Path) -> None:
    with running_gateway(tmp_path / "data", prices=PRICES) as g, client(g) as http:
        meta = {"ore.model.name": "scripted", "governance.max_cost": "1"}
        assert http.post("/v1/sessions", json={"id": "h1", "metadata": meta}).status_code == 201
        bad = http.post("/v1/sessions/h1/timers", json={"text": "x", "cron": "nope"})
        assert bad.status_code == 422 and "cron expression" in bad.json()["message"]
        daily = {"text": "daily", "cron": "0 9 * * 1-5", "tz": "Europe/Paris", "id": "d"}
        assert http.post("/v1/sessions/h1/timers", json=daily).json() == {"timer": "d"}
        soon = http.post("/v1/sessions/h1/timers", json={"text": "soon", "after": 0.5})
        assert soon.status_code == 201
        rows = http.get("/v1/sessions/h1/timers").json()["timers"]
        assert [r["text"] for r in rows] == ["soon", "daily"] and rows[1]["tz"] == "Europe/Paris"

        def fired() -> bool:
            evs = http.get("/v1/sessions/h1/history").json()["events"]
            return any(e["kind"] == "turn.completed" for e in evs)

        wait_for(fired, 20)
        assert [r["id"] for r in http.get("/v1/sessions/h1/timers").json()["timers"]] == ["d"]
        gone = http.delete("/v1/sessions/h1/timers/d").json()
        assert gone["consumed"] is False
        assert http.delete("/v1/sessions/h1/timers/d").json()["consumed"] is True
        # The timer's turn spent the budget: the next message pauses on it.
        assert http.post("/v1/sessions/h1/messages", json={"text": "more"}).status_code == 201

        def paused() -> list[int]:
            return http.get("/v1/sessions/h1/budget").json()["paused"]  # type: ignore[no-any-return]

        (call,) = wait_for(paused, 20)
        budget = http.get("/v1/sessions/h1/budget").json()
        assert budget["version"] == "http-1" and budget["budget"] == 1.0
        no = http.post(f"/v1/sessions/h1/approvals/{call}", json={"decision": "reject", "raise": 5})
        assert no.status_code == 422
        yes = http.post(
            f"/v1/sessions/h1/approvals/{call}", json={"decision": "approve", "raise": 50}
        )
        assert yes.status_code == 200
        wait_for(lambda: not paused(), 20)
        assert http.get("/v1/sessions/h1/budget").json()["budget"] == 51.0


def test_a_goal_timer_over_http(tmp_path: pathlib.Path) -> None:
    with running_gateway(tmp_path / "data") as g, client(g) as http:
        meta = {"ore.model.name": "scripted"}
        assert http.post("/v1/sessions", json={"id": "g1", "metadata": meta}).status_code == 201
        bad = {"text": "x", "after": 5, "goal": True, "budget": {"max_turns": 0}}
        r = http.post("/v1/sessions/g1/timers", json=bad)
        assert r.status_code == 422 and "max_turns" in r.json()["message"]
        goal = {"text": "say hi", "after": 0.2, "goal": True, "budget": {"max_turns": 2.0}}
        r = http.post("/v1/sessions/g1/timers", json={**goal, "id": "run"})
        assert r.status_code == 201 and r.json() == {"timer": "run"}

        def converged() -> bool:
            evs = http.get("/v1/sessions/g1/history").json()["events"]
            return any(e["kind"] == "session.converged" for e in evs)

        wait_for(converged, 20)
        evs = http.get("/v1/sessions/g1/history").json()["events"]
        (started,) = [e for e in evs if e["kind"] == "session.started" and e.get("goal")]
        assert started["text"] == "say hi"
