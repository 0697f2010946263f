"""Conversation control on real processes: a steer lands in a running tool turn at its
safe point (the model's next request holds every result, then the steer), survives a
SIGKILL between its ack and its delivery, and branches, forks and replays of a session
on the scripted model, over a real SQLite file."""

from __future__ import annotations

import os
import pathlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from actor_helpers import model_host
from fake_models import FakeModelServer, chunk, tool_delta

from actors.errors import InvalidRequest, SessionAlreadyExists
from actors.host import Host
from projections import project
from spine import Kind, SqliteLog
from spine.seal import merkle_root, row_leaf_hash

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def mp(tmp_path: pathlib.Path, gated: Gated, no_leftover_processes):  # type: ignore[no-untyped-def]
    with model_host(tmp_path / "data", [gated.server.url]) as h:
        yield h


class Gated:
    """A fake server whose first request (no tool result yet) waits for ``release``:
    the test acknowledges a steer while the turn is surely running."""

    def __init__(self) -> None:
        self.release = threading.Event()
        #: Set once the first request waits (the server's own lock is held meanwhile).
        self.waiting = threading.Event()
        self.asked = 0
        self.server = FakeModelServer(route=self._route)

    def _route(self, body: Any) -> list[Any] | None:
        msgs = body.get("messages", []) if isinstance(body, dict) else []
        self.asked += 1
        if any(m.get("role") == "tool" for m in msgs) or self.asked > 1:
            last = msgs[-1].get("content", "")
            return [("sse", [chunk(content=f"noted: {last}"), chunk(finish="stop")]), ("done",)]
        self.waiting.set()
        if not self.release.wait(30):
            return [("status", 500, {}, "never released")]
        calls = [tool_delta(0, "call_a", "calculator", '{"expression": "2+3"}')]
        return [("sse", [chunk(tool_calls=calls), chunk(finish="tool_calls")]), ("done",)]


@pytest.fixture
def gated() -> Iterator[Gated]:
    g = Gated()
    try:
        yield g
    finally:
        g.release.set()
        g.server.close()


def _point(h: Host, sid: str, server: FakeModelServer) -> None:
    for cmd in (f"/provider openai {server.url}", "/model fake-1"):
        assert h.send(sid, cmd).consumed


def test_a_steer_lands_after_the_tool_batch_and_before_the_next_model_call(
    mp: Host, gated: Gated
) -> None:
    sid = mp.create()
    _point(mp, sid, gated.server)
    first = mp.send(sid, "what is 2+3?")
    steer = mp.send(sid, "answer in French", mode="steer")
    gated.release.set()
    done = mp.wait_turn(sid, first.seq)
    assert done.kind == Kind.TURN_COMPLETED, done
    evs = [e for e in mp.history(sid) if e.seq > first.seq]
    kinds = [str(e.kind) for e in evs]
    (landed,) = [e for e in evs if e.kind == Kind.STEER_DELIVERED]
    assert landed.extra["steer"] == steer.seq and landed.text == "answer in French"
    # After the result, with the admission of the model call it went before.
    assert kinds.index("tool.result") < kinds.index("steer.delivered")
    admitted = {e.seq for e in evs if e.kind == Kind.ACTION_ADMITTED and e.action == "model"}
    assert landed.call in admitted
    # The model's second request holds the call, its result, then the steer.
    second = gated.server.requests[-1]["body"]["messages"]
    assert [m["role"] for m in second[-3:]] == ["assistant", "tool", "user"]
    assert second[-1]["content"] == "answer in French"
    assert [e.text for e in evs if e.kind == Kind.ASSISTANT][-1] == "noted: answer in French"
    assert "steer.dropped" not in kinds


def test_a_steer_acknowledged_before_a_sigkill_is_dropped_once_and_runs_next(
    mp: Host, gated: Gated
) -> None:
    sid = mp.create()
    _point(mp, sid, gated.server)
    first = mp.send(sid, "what is 2+3?")
    steer = mp.send(sid, "after the crash", mode="steer")
    assert gated.waiting.wait(10)
    os.kill(mp.session_pid(sid), signal.SIGKILL)
    # The killed session's request is answered to nobody; the server serves on.
    gated.release.set()
    cut = mp.wait_turn(sid, first.seq)
    assert cut.kind == Kind.TURN_CANCELLED and cut.reason == "crash"
    nxt = mp.wait_turn(sid, cut.seq)
    assert nxt.kind in (Kind.TURN_COMPLETED, Kind.TURN_CANCELLED)
    evs = mp.history(sid)
    dropped = [e for e in evs if e.kind == Kind.STEER_DROPPED]
    assert [(e.reason, e.extra["steer"], e.extra["handed"]) for e in dropped] == [
        ("crash", steer.seq, "next")
    ]
    assert not [e for e in evs if e.kind == Kind.STEER_DELIVERED]
    # The next turn ran on it as its message.
    last_users = [m for m in gated.server.requests[-1]["body"]["messages"] if m["role"] == "user"]
    assert last_users[-1]["content"] == "after the crash"


def test_regenerate_edit_branches_switch_fork_and_replay_on_the_scripted_model(
    mp: Host, tmp_path: pathlib.Path
) -> None:
    sid = mp.create()
    one = mp.send(sid, "one")
    mp.wait_turn(sid, one.seq)
    two = mp.send(sid, "two")
    mp.wait_turn(sid, two.seq)
    regen = mp.regenerate(sid)
    assert mp.wait_turn(sid, regen.seq).kind == Kind.TURN_COMPLETED
    edit = mp.edit(sid, one.seq, "uno")
    mp.wait_turn(sid, edit.seq)
    listed = mp.branches(sid)
    assert [b.leaf for b in listed] == [two.seq, regen.seq, edit.seq]
    assert [b.active for b in listed] == [False, False, True]
    mp.switch_branch(sid, two.seq)
    assert [b.leaf for b in mp.branches(sid) if b.active] == [two.seq]
    more = mp.send(sid, "three")
    mp.wait_turn(sid, more.seq)
    from projections import turns

    assert [t.text for t in turns(mp.history(sid))] == ["one", "two", "three"]
    # Every branch stays in the log.
    users = [e.text for e in mp.history(sid) if e.kind == Kind.USER_MESSAGE]
    assert users == ["one", "two", "two", "uno", "three"]

    # A fork at the end of the second turn folds to the parent's state there.
    at = mp.wait_turn(sid, two.seq).seq
    child = mp.fork(sid, at)
    parent_events = [e for e in mp.history(sid) if e.seq <= at]
    child_events = mp.history(child)
    assert child_events[:at] == parent_events
    assert project(child_events[:at]) == project(parent_events)
    prov = child_events[at]
    assert prov.properties["fork.parent"] == sid and prov.properties["fork.seq"] == str(at)
    log = SqliteLog(tmp_path / "data" / "spine.db")
    try:
        rows = log.read(child, 0, at)
        root = merkle_root([row_leaf_hash(r.payload, r.version) for r in rows]).hex()
    finally:
        log.close()
    assert prov.properties["fork.root"] == root
    again = mp.send(child, "four")
    mp.wait_turn(child, again.seq)
    assert [t.text for t in turns(mp.history(child))] == ["one", "two", "four"]
    assert len([e for e in mp.history(sid) if e.kind == Kind.USER_MESSAGE]) == 5
    with pytest.raises(InvalidRequest):
        mp.fork(sid, 10_000)
    with pytest.raises(SessionAlreadyExists, match="never overwrites"):
        mp.fork(sid, at, new_id=child)

    # Replay on the same scripted model reproduces the answers; another model's differ.
    same = mp.replay(sid)
    assert [t.text for t in same.turns] == ["one", "two", "three"]
    assert same.diverged_at == 0
    other = mp.replay(sid, metadata={"ore.model.name": "other"})
    assert other.diverged_at == one.seq
    assert other.turns[0].reply.startswith("[other]")


def test_a_fork_on_a_postgres_spine_folds_to_its_parent_and_records_the_root(
    tmp_path: pathlib.Path, pg_url: str, no_leftover_processes: object
) -> None:
    h = Host(tmp_path / "data", spine=pg_url, timeout=30)
    try:
        sid = h.create()
        one = h.send(sid, "one")
        end = h.wait_turn(sid, one.seq)
        h.wait_turn(sid, h.send(sid, "two").seq)
        child = h.fork(sid, end.seq + 1)
        parent = [e for e in h.history(sid) if e.seq <= end.seq + 1]
        copied = h.history(child)
        assert copied[: len(parent)] == parent
        assert project(copied[: len(parent)]) == project(parent)
        prov = copied[len(parent)]
        assert prov.properties["fork.parent"] == sid
        again = h.send(child, "three")
        h.wait_turn(child, again.seq)
        from projections import turns

        assert [t.text for t in turns(h.history(child))] == ["one", "three"]
    finally:
        h.close()


def test_a_fork_of_a_session_mid_turn_starts_at_its_last_idle_seq(mp: Host) -> None:
    """The parent hangs in a turn: the default fork point is before the message that
    started it, so the fork is idle and serves on while the parent's turn goes on."""
    sid = mp.create()
    one = mp.send(sid, "one")
    done = mp.wait_turn(sid, one.seq)
    with mp.subscribe(sid, done.seq, kinds=[Kind.TURN_STARTED]) as started:
        hang = mp.send(sid, "!hang")
        assert started.get(30) is not None
    child = mp.fork(sid)
    at = int(mp.get(child).metadata["fork.seq"])
    assert done.seq <= at < hang.seq
    nxt = mp.send(child, "two")
    assert mp.wait_turn(child, nxt.seq).kind == Kind.TURN_COMPLETED
    from projections import turns

    assert [t.text for t in turns(mp.history(child))] == ["one", "two"]
    assert mp.history(sid)[-1].seq >= hang.seq  # the parent's turn still runs
    mp.interrupt(sid)


def test_a_replay_reports_the_tool_calls_and_the_tokens_of_each_run(mp: Host) -> None:
    sid = mp.create()
    ask = mp.send(sid, '!tool calculator {"expression": "2+3"}')
    mp.wait_turn(sid, ask.seq)
    same = mp.replay(sid)
    (t,) = same.turns
    assert t.parent_calls == (("calculator", '{"expression": "2+3"}'),) == t.calls
    assert t.reply == t.parent_reply == "calculator returned 5" and same.diverged_at == 0
    assert same.tokens_delta == 0 and t.usage.output_tokens > 0
