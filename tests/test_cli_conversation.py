"""Conversation control from the command line, run as users run it: a real daemon and
client processes (send --steer, regenerate, edit, branches, switch-branch, fork, replay)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest
from cli_support import CLI, Daemon, env, ok, run, stopped_after
from conftest import wait_for

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = Daemon(tmp_path_factory.mktemp("cliconv") / "data").start()
    with stopped_after(d):
        yield d


def _events(daemon: Daemon, sid: str) -> list[dict[str, object]]:
    out = ok(run(daemon.data, "history", sid, "--json"))
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_send_steer_is_stored_for_the_running_turn(daemon: Daemon) -> None:
    """A steer to a hanging turn is stored as such; the interrupt drops it and the next
    turn answers it."""
    ok(run(daemon.data, "new", "steer-cli"))
    proc = subprocess.Popen(
        [*CLI, "--data", str(daemon.data), "send", "steer-cli", "!hang", "--no-wait"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
    )
    try:
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    wait_for(lambda: "turn.started" in run(daemon.data, "history", "steer-cli").stdout, 30)
    out = ok(run(daemon.data, "send", "steer-cli", "short please", "--steer", "--no-wait"))
    assert "stored at seq" in out
    ok(run(daemon.data, "interrupt", "steer-cli"))

    def answered() -> bool:
        return any(e.get("text") == "[scripted] short please" for e in _events(daemon, "steer-cli"))

    wait_for(answered, 30)
    kinds = [e["kind"] for e in _events(daemon, "steer-cli")]
    assert kinds.count("steer.dropped") == 1 and "steer.delivered" not in kinds


def test_regenerate_edit_branches_switch_fork_and_replay(daemon: Daemon) -> None:
    ok(run(daemon.data, "send", "tree-cli", "one", "--create"))
    assert "[scripted] one" in ok(run(daemon.data, "regenerate", "tree-cli"))
    first = next(e for e in _events(daemon, "tree-cli") if e["kind"] == "user.message")
    seq = int(first["seq"])  # type: ignore[call-overload]
    assert "[scripted] uno" in ok(run(daemon.data, "edit", "tree-cli", str(seq), "uno"))
    rows = [
        json.loads(x) for x in ok(run(daemon.data, "branches", "tree-cli", "--json")).splitlines()
    ]
    assert [r["active"] for r in rows] == [False, False, True]
    assert rows[0]["leaf"] == seq
    text = ok(run(daemon.data, "branches", "tree-cli"))
    assert text.splitlines()[-1].startswith("*")
    ok(run(daemon.data, "switch-branch", "tree-cli", str(seq)))
    rows = [
        json.loads(x) for x in ok(run(daemon.data, "branches", "tree-cli", "--json")).splitlines()
    ]
    assert [r["leaf"] for r in rows if r["active"]] == [seq]
    bad = run(daemon.data, "switch-branch", "tree-cli", "9999")
    assert bad.returncode == 2 and "no user message at seq 9999" in bad.stderr

    out = ok(run(daemon.data, "fork", "tree-cli", "--at", str(seq), "--id", "tree-fork", "--json"))
    assert json.loads(out) == {"session": "tree-fork", "parent": "tree-cli", "at": seq}
    assert _events(daemon, "tree-fork")[:seq] == _events(daemon, "tree-cli")[:seq]

    out = ok(run(daemon.data, "replay", "tree-cli", "--model", "other"))
    assert "diverges at seq" in out and "[other] one" in out
