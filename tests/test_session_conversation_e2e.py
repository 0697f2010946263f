"""Conversation control on real processes: a steer lands in a running tool turn at its
safe point (the model's next request holds every result, then the steer), survives a
SIGKILL between its ack and its delivery, and branches, forks and replays of a session
on the scripted model, over a real SQLite file."""

from __future__ import annotations

import json
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
from spine import Event, Kind, SqliteLog
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
    link, prov = child_events[at : at + 2]
    assert link.kind == Kind.SESSION_FORKED
    assert {k: link.extra[k] for k in ("parent", "at")} == {"parent": sid, "at": at}
    assert prov.properties["fork.parent"] == sid and prov.properties["fork.seq"] == str(at)
    log = SqliteLog(tmp_path / "data" / "spine.db")
    try:
        rows = log.read(child, 0, at)
        root = merkle_root([row_leaf_hash(r.payload, r.version) for r in rows]).hex()
    finally:
        log.close()
    assert link.extra["root"] == root
    again = mp.send(child, "four")
    mp.wait_turn(child, again.seq)
    assert [t.text for t in turns(mp.history(child))] == ["one", "two", "four"]
    assert len([e for e in mp.history(sid) if e.kind == Kind.USER_MESSAGE]) == 5
    with pytest.raises(InvalidRequest):
        mp.fork(sid, 10_000)
    with pytest.raises(SessionAlreadyExists, match="never overwrites"):
        mp.fork(sid, at, new_id=child)
    with pytest.raises(SessionAlreadyExists, match="cannot be forked into itself"):
        mp.fork(sid, at, new_id=sid)

    # Replay on the same scripted model reproduces the answers; another model's differ.
    same = mp.replay(sid)
    assert [t.text for t in same.turns] == ["one", "two", "three"]
    assert same.diverged_at == 0
    other = mp.replay(sid, metadata={"ore.model.name": "other"})
    assert other.diverged_at == one.seq
    assert other.turns[0].reply.startswith("[other]")


def test_a_fork_on_a_postgres_spine_folds_to_its_parent_by_reference(
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
        link, prov = copied[len(parent) : len(parent) + 2]
        assert link.kind == Kind.SESSION_FORKED
        assert prov.properties["fork.parent"] == sid and "fork.root" not in prov.properties
        rows = h._log.read(sid, 0, end.seq + 1)
        assert (
            link.extra["root"]
            == merkle_root([row_leaf_hash(r.payload, r.version) for r in rows]).hex()
        )
        again = h.send(child, "three")
        h.wait_turn(child, again.seq)
        from projections import turns

        assert [t.text for t in turns(h.history(child))] == ["one", "three"]
        # A replay of the fork reads through two references to the parent's rows.
        again = h.replay(child)
        assert [t.text for t in again.turns] == ["one", "three"] and again.diverged_at == 0
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


def _answered(events: list[Any], turn_id: int) -> list[tuple[Any, ...]]:
    """A turn's events as a replay must reproduce them (without seqs and times)."""
    from projections import thread_from

    turn = thread_from(events).turn(turn_id)
    assert turn is not None
    answers = set(turn.answers)
    return [
        (
            e.kind,
            e.turn,
            e.text,
            e.tool,
            e.tool_use_id,
            e.input,
            e.result,
            e.is_error,
            e.stop_reason,
        )
        for e in events
        if e.seq in answers
    ]


def test_a_replay_serves_every_stored_tool_result_and_runs_no_tool(
    tmp_path: pathlib.Path, no_leftover_processes: object
) -> None:
    """A tool with a side effect and a fresh answer each run: the replay on the scripted
    model reproduces the parent's turns event for event, and the tool ran once in all."""
    from actor_helpers import stamping_tools

    from actors.agents import ModelFactory

    runs = tmp_path / "runs.txt"
    factory = ModelFactory(backoff=0.01, tools=stamping_tools())
    h = Host(tmp_path / "data", base="multiprocTCPBase", timeout=20, factory=factory)
    try:
        sid = h.create()
        ask = h.send(sid, "!tool stamp " + json.dumps({"log": str(runs)}))
        h.wait_turn(sid, ask.seq)
        plain = h.send(sid, "and then")
        h.wait_turn(sid, plain.seq)
        assert runs.read_text() == "stamp\n"
        same = h.replay(sid)
        assert same.diverged_at == 0
        first, _ = same.turns
        assert first.results == first.parent_results and first.results[0][0].startswith("stamp ")
        assert runs.read_text() == "stamp\n"  # nothing ran again
        parent, child = h.history(sid), h.history(same.session_id)
        for t in same.turns:
            assert _answered(child, t.seq) == _answered(parent, t.parent_seq)
        # The fork serves on as any session after its replay: its tools run again.
        again = h.send(same.session_id, "!tool stamp " + json.dumps({"log": str(runs)}))
        h.wait_turn(same.session_id, again.seq)
        assert runs.read_text() == "stamp\nstamp\n"
    finally:
        h.close()


def test_a_replay_serves_the_parents_approvals_and_asks_nobody(
    tmp_path: pathlib.Path, no_leftover_processes: object
) -> None:
    """A tool every call of which needs a human: the parent's call waited and was approved,
    the second call rejected. The replay on the scripted model ends without a human (the
    decisions are served from the parent's), reproduces the turns, and runs nothing."""
    from actor_helpers import _stamp, stamping_tools
    from conftest import wait_for

    from actors.agents import ModelFactory, Tool
    from actors.agents.governance import Requirement

    gated = Tool(
        name="gated_stamp",
        description="Stamp, once a human says so.",
        parameters={"type": "object"},
        fn=_stamp,
        requirement=Requirement(approval=True),
    )
    runs = tmp_path / "runs.txt"
    factory = ModelFactory(backoff=0.01, tools=stamping_tools().with_tool(gated))
    h = Host(tmp_path / "data", base="multiprocTCPBase", timeout=20, factory=factory)
    try:
        sid = h.create()
        for approve, target in ((True, "a"), (False, "b")):
            args = json.dumps({"log": str(runs), "target": target})
            ask = h.send(sid, "!tool gated_stamp " + args)
            (waiting,) = wait_for(lambda: h.pending(sid), 20)
            (h.approve if approve else h.reject)(sid, waiting.call, f"said {target}")
            h.wait_turn(sid, ask.seq)
        assert runs.read_text() == "stamp\n"
        same = h.replay(sid, timeout=20)
        assert same.diverged_at == 0 and len(same.turns) == 2
        assert runs.read_text() == "stamp\n"  # nothing ran again
        parent, child = h.history(sid), h.history(same.session_id)
        for t in same.turns:
            assert _answered(child, t.seq) == _answered(parent, t.parent_seq)
        said = [e for e in child if e.kind == Kind.ACTION_APPROVAL]
        assert [(e.allowed, e.reason, e.extra.get("replayed")) for e in said[-2:]] == [
            (True, "said a", True),
            (False, "said b", True),
        ]
        assert not h.pending(same.session_id)
    finally:
        h.close()


def test_a_replay_refuses_a_call_the_parent_never_made_and_reports_it(mp: Host) -> None:
    """The parent's stored turn called the calculator with other arguments than the new
    run asks for: the call is refused, not run, and the replay diverges there."""
    stored = [
        Event(kind=Kind.LIFECYCLE, phase="opened"),
        Event(kind=Kind.USER_MESSAGE, text='!tool calculator {"expression": "2+3"}'),
        Event(kind=Kind.TURN_STARTED, turn=1),
        Event(
            kind=Kind.TOOL_CALL,
            turn=1,
            tool="calculator",
            tool_use_id="t1",
            input='{"expression": "1+1"}',
        ),
        Event(kind=Kind.TOOL_RESULT, turn=1, tool="calculator", tool_use_id="t1", result="2"),
        Event(kind=Kind.ASSISTANT, turn=1, text="calculator returned 2"),
        Event(kind=Kind.TURN_COMPLETED, turn=1, stop_reason="end_turn"),
    ]
    mp._log.append("crafted", stored)
    out = mp.replay("crafted")
    (t,) = out.turns
    assert out.diverged_at == t.parent_seq
    assert t.parent_calls == (("calculator", '{"expression": "1+1"}'),)
    assert t.calls == (("calculator", '{"expression": "2+3"}'),)
    ((result, is_error),) = t.results
    assert is_error and result.startswith("not run: this is a replay")


def test_a_fork_of_a_long_session_restarts_from_its_snapshot_after_a_sigkill(
    mp: Host, tmp_path: pathlib.Path
) -> None:
    """A fork of 1,200 events folds to its parent's state, snapshots itself past its fork
    seq, and a SIGKILLed fork comes back from that snapshot with its prefix intact; the
    parent's later events never reach it."""
    from projections import turns
    from spine import open_snapshots

    stored: list[Event] = [Event(kind=Kind.LIFECYCLE, phase="opened")]
    for t in range(1, 241):
        stored += [
            Event(kind=Kind.USER_MESSAGE, text=f"q{t}"),
            Event(kind=Kind.TURN_STARTED, turn=t),
            Event(kind=Kind.ASSISTANT, turn=t, text=f"a{t}"),
            Event(kind=Kind.TURN_COMPLETED, turn=t, stop_reason="end_turn"),
            Event(kind=Kind.LIFECYCLE, phase="done", turn=t),
        ]
    mp._log.append("long", stored)
    at = mp._log.last_seq("long")
    child = mp.fork("long", at)
    assert project(mp.history(child)[:at]) == project(mp.history("long"))
    one = mp.send(child, "mine")
    mp.wait_turn(child, one.seq)
    snaps = open_snapshots(str(tmp_path / "data" / "snapshots.db"))
    try:
        snap = snaps.load(child)
        assert snap is not None and snap.seq > at
    finally:
        snaps.close()
    mp._log.append("long", [Event(kind=Kind.USER_MESSAGE, text="the parent's, later")])
    os.kill(mp.session_pid(child), signal.SIGKILL)
    two = mp.send(child, "after the kill")
    mp.wait_turn(child, two.seq)
    texts = [t.text for t in turns(mp.history(child))]
    assert texts[:2] == ["q1", "q2"] and texts[-2:] == ["mine", "after the kill"]
    assert len(texts) == 242 and "the parent's, later" not in texts
