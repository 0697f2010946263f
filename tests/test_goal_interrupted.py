"""A goal run that nothing drives says `interrupted` on every surface, on a real daemon:
cut by `vertebra stop`, the next `serve --no-resume-goals` leaves it in flight in the
log; `vertebra wait` and GET goals/wait say interrupted (goal, seq, how to continue) at
once instead of waiting; `vertebra resume` brings it back, after which it is running
again, then converges."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator

import httpx
import pytest
from cli_support import Daemon, ok, run, stopped_after
from conftest import wait_for

pytestmark = pytest.mark.timeout(180)

SID = "int-1"
#: Long enough that a resumed run is still running when asked at once.
OBJECTIVE = "!slow 0.6 one two three four five six seven eight"


@pytest.fixture
def own_daemon(tmp_path: pathlib.Path) -> Iterator[Daemon]:
    d = Daemon(tmp_path / "own")
    with stopped_after(d):
        yield d


def _wait_http(port: int, data: pathlib.Path, timeout: float) -> dict[str, object]:
    token = (data / "gateway-token").read_text().strip()
    r = httpx.get(
        f"http://127.0.0.1:{port}/v1/sessions/{SID}/goals/wait",
        params={"timeout": timeout},
        headers={"Authorization": f"Bearer {token}"},
        timeout=timeout + 30,
    )
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_a_run_left_by_no_resume_goals_is_interrupted_until_resumed(
    own_daemon: Daemon,
) -> None:
    pytest.importorskip("uvicorn", reason="the HTTP gateway needs the http extra")
    from actors._runtime.system import free_port

    data, port = own_daemon.data, free_port()
    own_daemon.start()
    ok(run(data, "submit", SID, OBJECTIVE, "--create"))
    wait_for(lambda: "turn.started" in run(data, "history", SID).stdout, 30)
    ok(run(data, "stop"))
    assert own_daemon.wait_exited() == 0

    # No daemon at all: nothing drives the run.
    cut = run(data, "wait", SID, "--json")
    assert cut.returncode == 1, (cut.stdout, cut.stderr)
    seen = json.loads(cut.stdout)
    started = [
        json.loads(x)
        for x in ok(run(data, "history", SID, "--json")).splitlines()
        if '"session.started"' in x and '"goal"' in x
    ]
    assert seen["outcome"] == "interrupted"
    assert (seen["goal"], seen["seq"]) == (SID, started[-1]["seq"])

    own_daemon.start("--no-resume-goals", "--http", f"127.0.0.1:{port}")
    wait_for(lambda: (data / "gateway-token").exists(), 30)
    # Without a timeout: said at once, not waited for (the test's timeout would end it).
    cut = run(data, "wait", SID)
    assert cut.returncode == 1 and "interrupted" in cut.stderr, (cut.stdout, cut.stderr)
    assert f"vertebra resume {SID}" in cut.stderr
    w = _wait_http(port, data, 60)
    assert w["state"] == "interrupted" and (w["goal"], w["seq"]) == (SID, started[-1]["seq"])
    assert f"vertebra resume {SID}" in str(w["reason"])

    assert "resumed the goal run" in ok(run(data, "resume", SID))
    assert _wait_http(port, data, 0)["state"] == "running"
    assert ok(run(data, "wait", SID, "--timeout", "60")).strip().endswith("seven eight")
    w = _wait_http(port, data, 0)
    assert w["state"] == "converged" and str(w["answer"]).endswith("seven eight")
    again = json.loads(ok(run(data, "resume", SID, "--json")))
    assert again["resumed"] is False  # nothing in flight any more
    kinds = [json.loads(x)["kind"] for x in ok(run(data, "history", SID, "--json")).splitlines()]
    assert kinds.count("session.converged") == 1 and len(started) == 1
