"""Goal runs end to end on real processes (multiprocTCPBase, the scripted provider and the
fake OpenAI-compatible server): submit and wait, a budget that stalls the run, an
interrupt, a SIGKILL of the session mid-run and a restart of the whole daemon."""

from __future__ import annotations

import json
import os
import pathlib
import signal
from collections.abc import Iterator

import pytest
from actor_helpers import governed_tools
from conftest import wait_for
from fake_models import FakeModelServer, chunk, tool_delta

from actors.agents import ModelFactory
from actors.errors import GoalInterrupted, GoalStalled, HostTimeout, InvalidRequest
from actors.host import Host
from projections import FanoutChild, FanoutState, RecordState, project
from spine import Event, Kind

pytestmark = pytest.mark.timeout(120)


def _host(data: pathlib.Path, servers: tuple[str, ...] = ()) -> Host:
    return Host(
        data,
        base="multiprocTCPBase",
        timeout=20,
        factory=ModelFactory(tools=governed_tools(), backoff=0.01),
        model_servers=servers,
    )


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    s = FakeModelServer()
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def mp(tmp_path: pathlib.Path, server: FakeModelServer, no_leftover_processes) -> Iterator[Host]:  # type: ignore[no-untyped-def]
    h = _host(tmp_path / "data", (server.url,))
    try:
        yield h
    finally:
        h.close()


def _goal_events(evs: list[Event]) -> list[str]:
    return [
        str(e.kind)
        for e in evs
        if e.kind in (Kind.CONVERGED, Kind.STALLED) or (e.kind == Kind.SESSION_STARTED and e.goal)
    ]


def test_a_goal_with_a_tool_call_converges_and_wait_returns_the_answer(mp: Host) -> None:
    """The session runs the turn on its own: the tool runs, the answer is the run's
    result, Wait returns it (also when asked again after the end) and the projection
    shows it."""
    sid = mp.create()
    mp.submit(sid, '!tool calculator {"expression": "6*7"}', budget={"max_turns": 3})
    assert mp.wait(sid, timeout=30) == "calculator returned 42"
    assert mp.wait(sid, timeout=0) == "calculator returned 42"
    evs = mp.history(sid)
    assert _goal_events(evs) == [Kind.SESSION_STARTED, Kind.CONVERGED]
    assert [e.result for e in evs if e.kind == Kind.TOOL_RESULT] == ["42"]
    assert project(evs).result == "calculator returned 42"


def test_an_exhausted_budget_is_rejected_at_the_gate_then_stalls(mp: Host) -> None:
    """A model that keeps asking for tools (one tool round per turn) with a budget of two
    turns: the third turn's model call is action.rejected budget_exceeded, then the run
    stalls and Wait raises with the reason."""
    sid = mp.create(metadata={"ore.model.max_tool_rounds": "1"})
    mp.submit(sid, '!loop calculator {"expression": "1+1"}', budget={"max_turns": 2})
    with pytest.raises(GoalStalled, match="budget exceeded"):
        mp.wait(sid, timeout=30)
    evs = mp.history(sid)
    rejected = [e for e in evs if e.kind == Kind.ACTION_REJECTED]
    assert [(e.action, e.fault) for e in rejected] == [("model", "budget_exceeded")]
    stalled = evs[-1]
    assert stalled.kind == Kind.STALLED and rejected[0].seq < stalled.seq


def test_an_interrupt_stalls_the_run_as_cancelled(mp: Host) -> None:
    """A run whose model hangs: the interrupt cancels the turn and the run stalls."""
    sid = mp.create()
    ack = mp.submit(sid, "!hang")
    wait_for(lambda: any(e.kind == Kind.TURN_STARTED for e in mp.history(sid)), 20)
    with pytest.raises(HostTimeout):
        mp.wait(sid, timeout=0.2)
    mp.interrupt(sid)
    with pytest.raises(GoalStalled, match="cancelled"):
        mp.wait(sid, timeout=30)
    assert ack.seq > 0


def test_a_second_submit_and_a_wait_without_a_run_are_clear_errors(mp: Host) -> None:
    """A run in flight refuses another; a session with no run cannot be waited on."""
    sid = mp.create()
    with pytest.raises(InvalidRequest, match="run no goal"):
        mp.wait(sid, timeout=1)
    mp.submit(sid, "!slow 0.2 a b c")
    with pytest.raises(InvalidRequest, match="already runs a goal"):
        mp.submit(sid, "again")
    with pytest.raises(InvalidRequest, match="positive"):
        mp.submit(sid, "x", budget={"max_turns": -1})
    assert mp.wait(sid, timeout=30).endswith("a b c")
    assert mp.resume(sid).consumed


def test_a_run_survives_a_sigkill_of_its_session(mp: Host) -> None:
    """The session process is killed mid-turn; the restarted one closes the cut turn and
    continues the run by itself: one session.started, one convergence."""
    sid = mp.create()
    mp.submit(sid, "!slow 0.15 one two three four five six")
    wait_for(lambda: any(e.kind == Kind.TURN_STARTED for e in mp.history(sid)), 20)
    pid = mp.session_pid(sid)
    os.kill(pid, signal.SIGKILL)
    assert mp.wait(sid, timeout=60).endswith("one two three four five six")
    evs = mp.history(sid)
    assert _goal_events(evs) == [Kind.SESSION_STARTED, Kind.CONVERGED]
    assert [e.reason for e in evs if e.kind == Kind.TURN_CANCELLED] == ["crash"]
    assert mp.session_pid(sid) != pid


def test_a_run_cut_off_by_a_daemon_restart_is_resumed(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """The whole actor system goes down mid-turn; a new one resumes the run on the same
    stream (no second session.started) and Wait, from the new Host, gets the answer."""
    data = tmp_path / "data"
    h = _host(data)
    try:
        sid = h.create()
        h.submit(sid, "!slow 0.3 alpha beta gamma delta epsilon")
        wait_for(lambda: any(e.kind == Kind.TURN_STARTED for e in h.history(sid)), 20)
    finally:
        h.close()
    h = _host(data)
    try:
        # Nothing runs it until it is resumed: wait says so at once, with no timeout.
        with pytest.raises(GoalInterrupted, match=f"vertebra resume {sid}") as cut:
            h.wait(sid)
        started = next(e for e in h.history(sid) if e.kind == Kind.SESSION_STARTED and e.goal)
        assert (cut.value.goal, cut.value.seq) == (sid, started.seq)
        assert h.interrupted(sid) is not None and not h.working(sid)
        other = h.create()  # no run: not resumed
        assert h.resume_all() == [sid]
        assert other not in h.resume_all()
        assert h.interrupted(sid) is None  # driven again
        assert h.wait(sid, timeout=60).endswith("alpha beta gamma delta epsilon")
        assert h.interrupted(sid) is None  # ended
        evs = h.history(sid)
        assert _goal_events(evs) == [Kind.SESSION_STARTED, Kind.CONVERGED]
    finally:
        h.close()


def test_a_goal_against_the_fake_openai_server_converges(mp: Host, server: FakeModelServer) -> None:
    """A real wire format: the server asks for a tool, then answers; the run converges
    with the server's answer."""
    sid = mp.create(
        metadata={
            "ore.model.provider": "openai",
            "ore.model.base_url": server.url,
            "ore.model.name": "fake",
        }
    )
    calc = tool_delta(0, "c1", "calculator", json.dumps({"expression": "2*21"}))
    server.queue(
        [("sse", [chunk(tool_calls=[calc]), chunk(finish="tool_calls")]), ("done",)],
        [("sse", [chunk(content="the answer is 42"), chunk(finish="stop")]), ("done",)],
    )
    mp.submit(sid, "what is 2*21?")
    assert mp.wait(sid, timeout=30) == "the answer is 42"
    evs = mp.history(sid)
    assert [e.result for e in evs if e.kind == Kind.TOOL_RESULT] == ["42"]


def _spawns(*objectives: str) -> str:
    return "\n".join("!tool spawn " + json.dumps({"objective": o}) for o in objectives)


def test_a_goal_fans_out_to_two_concurrent_children_that_fold_back(mp: Host) -> None:
    """Two spawns in one response: two child sessions (own streams, own processes) run
    their goal runs concurrently, each with a tool call; the parent records child.spawned
    and child.completed, its model gets the answers, and the parent's projection shows
    the seed's fan-out tree."""
    sid = mp.create()
    a = '!tool calculator {"expression": "6*7"}'
    b = '!tool calculator {"expression": "2+2"}'
    mp.submit(sid, _spawns(a, b))
    answer = mp.wait(sid, timeout=60)
    assert answer == ("spawn returned calculator returned 42; spawn returned calculator returned 4")
    evs = mp.history(sid)
    spawned = [e for e in evs if e.kind == Kind.CHILD_SPAWNED and e.goal == sid]
    assert [e.text for e in spawned] == [a, b]
    kids = [e.child for e in spawned]
    done = {e.child: e.result for e in evs if e.kind == Kind.CHILD_COMPLETED}
    assert done == {kids[0]: "calculator returned 42", kids[1]: "calculator returned 4"}
    p = project(evs)
    assert [(c.id, c.parent, c.objective, c.state, c.turns, c.result) for c in p.fanout] == [
        (kids[0], sid, a, "done", 1, "calculator returned 42"),
        (kids[1], sid, b, "done", 1, "calculator returned 4"),
    ]
    assert all(c.trust == "standard" and c.blocked == 0 for c in p.fanout)
    # Each child is a session of its own: its stream opens its own goal run.
    for kid, objective in zip(kids, (a, b), strict=True):
        own = mp.history(kid)
        assert (own[0].kind, own[0].goal, own[0].text) == (Kind.SESSION_STARTED, kid, objective)
        assert own[-1].kind == Kind.CONVERGED
    # Usage rolls up: the parent's projection counts its own turns and its children's.
    spent = [
        e.usage.output_tokens
        for e in (*evs, *mp.history(kids[0]), *mp.history(kids[1]))
        if e.kind == Kind.TURN_COMPLETED and e.usage is not None and not e.goal
    ]
    assert p.usage.output_tokens == sum(spent) > 0
    # Sealing the parent seals what its children wrote (mirrored onto its stream).
    mp.seal(sid)
    assert mp.verify(sid).ok
    p = project(mp.history(sid))
    assert [c.seal for c in p.fanout] == ["verified", "verified"]


def test_a_delegating_run_leaves_no_action_of_its_children_running_in_its_ledger(
    mp: Host,
) -> None:
    """One child converges with a tool call, the other's model fails three turns in a row
    and it stalls: every admission on the parent's stream (its own and its children's,
    whose call ids collide with its own) is paired with its outcome, admitted == completed,
    and the failing child's mirrored turns keep its own numbers 1, 2, 3."""
    sid = mp.create()
    mp.submit(sid, _spawns('!tool calculator {"expression": "6*7"}', "!fail boom"))
    answer = mp.wait(sid, timeout=60)
    assert "calculator returned 42" in answer and "stalled" in answer
    evs = mp.history(sid)
    kids = [e.child for e in evs if e.kind == Kind.CHILD_SPAWNED and e.goal == sid]
    for p in (project(evs), mp.status(sid)):
        assert [a for a in p.actions if a.state == "running"] == []
        assert p.admitted == p.completed > 0
        assert [(c.state, c.in_flight) for c in p.fanout] == [("done", 0), ("failed", 0)]
        # The parent's own calls and its children's: each row paired with its own goal.
        own = {(a.goal, a.call) for a in p.actions}
        assert len(own) == len(p.actions) and {a.goal for a in p.actions} == {"", *kids}
    failed = [(e.call, e.fault) for e in evs if e.goal == kids[1] and e.action == "model"]
    assert [f for _, f in failed if f] == ["error"] * 3
    turns = [e.turn for e in evs if e.kind == Kind.TURN_COMPLETED and e.goal == kids[1]]
    assert turns == [e.turn for e in mp.history(kids[1]) if e.kind == Kind.TURN_COMPLETED]
    assert turns == [1, 2, 3]


def _started(h: Host, sid: str) -> bool:
    return any(e.kind == Kind.TURN_STARTED for e in h.history(sid))


def test_interrupting_the_parent_cancels_its_running_children(mp: Host) -> None:
    """Two slow children run at the same time (both have started before either ends);
    an interrupt of the parent stalls it and both children with reason cancelled, and the
    tree shows them failed with that result."""
    sid = mp.create()
    slow = "!slow 0.3 a b c d e f g h i j"
    mp.submit(sid, _spawns(slow, slow))
    kids = wait_for(
        lambda: (
            [e.child for e in mp.history(sid) if e.kind == Kind.CHILD_SPAWNED]
            if sum(e.kind == Kind.CHILD_SPAWNED for e in mp.history(sid)) == 2
            else None
        ),
        30,
    )
    wait_for(lambda: all(_started(mp, k) for k in kids), 30)
    assert not any(e.kind == Kind.CONVERGED for k in kids for e in mp.history(k))
    mp.interrupt(sid)
    with pytest.raises(GoalStalled, match="cancelled"):
        mp.wait(sid, timeout=30)
    for kid in kids:
        with pytest.raises(GoalStalled, match="cancelled"):
            mp.wait(kid, timeout=30)
    p = project(mp.history(sid))
    assert [(c.state, c.result) for c in p.fanout] == [("failed", "cancelled")] * 2


def test_a_child_killed_mid_run_is_restarted_and_its_sibling_undisturbed(mp: Host) -> None:
    """SIGKILL of one child's process: the Runner restarts it, its run continues and
    folds back; the sibling and the parent see nothing of it; nothing is spawned twice."""
    sid = mp.create()
    slow = "!slow 0.2 one two three four five"
    mp.submit(sid, _spawns(slow, '!tool calculator {"expression": "1+2"}'))
    kid = wait_for(
        lambda: next((e.child for e in mp.history(sid) if e.kind == Kind.CHILD_SPAWNED), ""), 30
    )
    wait_for(lambda: _started(mp, kid), 30)
    pid = mp.session_pid(kid)
    os.kill(pid, signal.SIGKILL)
    answer = mp.wait(sid, timeout=60)
    assert "one two three four five" in answer and "calculator returned 3" in answer
    evs = mp.history(sid)
    assert sum(e.kind == Kind.CHILD_SPAWNED and e.goal == sid for e in evs) == 2
    assert [c.state for c in project(evs).fanout] == ["done", "done"]
    assert [e.reason for e in mp.history(kid) if e.kind == Kind.TURN_CANCELLED] == ["crash"]


def test_children_with_an_approval_and_a_blocked_egress_fold_into_the_tree(
    mp: Host, tmp_path: pathlib.Path
) -> None:
    """One child's tool needs a human: it waits until its own action is approved (the tool
    runs once); the other's fetch of a loopback address is refused by the egress guard.
    Both fold back; the parent's tree and egress ledger show what each did."""
    log = tmp_path / "deploys.txt"
    deploy = "!tool deploy " + json.dumps({"log": str(log), "target": "prod"})
    fetch = "!tool http_get " + json.dumps({"url": "http://127.0.0.1:9/"})
    sid = mp.create()
    mp.submit(sid, _spawns(deploy, fetch))
    kids = wait_for(
        lambda: (
            [e.child for e in mp.history(sid) if e.kind == Kind.CHILD_SPAWNED]
            if sum(e.kind == Kind.CHILD_SPAWNED for e in mp.history(sid)) == 2
            else None
        ),
        30,
    )
    waiting = wait_for(lambda: mp.pending(kids[0]), 30)[0]
    with pytest.raises(HostTimeout):
        mp.wait(sid, timeout=0.2)  # the parent waits for its child's approval
    mp.approve(kids[0], waiting.call)
    answer = mp.wait(sid, timeout=60)
    assert "deployed prod" in answer and "refused by governance (egress_refused)" in answer
    assert log.read_text() == "deploy prod\n"
    evs = mp.history(sid)
    p = project(evs)
    # The seed's FanoutChild, field by field: each result is what the child's own run
    # converged with.
    assert list(p.fanout) == [
        FanoutChild(
            id=kid,
            parent=sid,
            objective=objective,
            state=FanoutState.DONE,
            turns=1,
            result=mp.wait(kid, timeout=0),
            trust="standard",
            # The fetch is refused by the gate (egress first): a blocked action.
            blocked=blocked,
            seal=RecordState.RECORDING,
        )
        for kid, objective, blocked in zip(kids, (deploy, fetch), (0, 1), strict=True)
    ]
    assert [(e.host, e.allowed, e.reason) for e in p.egress] == [("127.0.0.1", False, "loopback")]
    approvals = [e for e in evs if e.kind == Kind.ACTION_APPROVAL]
    assert approvals == []  # the approval is the child's own, on its stream
    assert any(e.kind == Kind.ACTION_APPROVAL for e in mp.history(kids[0]))


def test_a_fan_out_cut_off_by_a_daemon_restart_completes_without_duplicates(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """The daemon goes down while two children run; after a restart, resuming the parent
    resumes its turn, which finds the same two children (none spawned twice), brings them
    back, and the run completes with both answers."""
    data = tmp_path / "data"
    h = _host(data)
    try:
        sid = h.create()
        slow = ("!slow 0.2 one two three four five", "!slow 0.2 six seven eight nine ten")
        h.submit(sid, _spawns(*slow))
        kids = wait_for(
            lambda: (
                [e.child for e in h.history(sid) if e.kind == Kind.CHILD_SPAWNED]
                if sum(e.kind == Kind.CHILD_SPAWNED for e in h.history(sid)) == 2
                else None
            ),
            30,
        )
        wait_for(lambda: all(_started(h, k) for k in kids), 30)
    finally:
        h.close()
    h = _host(data)
    try:
        h.resume(sid)
        answer = h.wait(sid, timeout=60)
        assert "one two three four five" in answer and "six seven eight nine ten" in answer
        evs = h.history(sid)
        assert [e.child for e in evs if e.kind == Kind.CHILD_SPAWNED and e.goal == sid] == kids
        assert _goal_events(evs) == [Kind.SESSION_STARTED, Kind.CONVERGED]
        for kid in kids:
            assert _goal_events(h.history(kid)) == [Kind.SESSION_STARTED, Kind.CONVERGED]
        assert [c.state for c in project(evs).fanout] == ["done", "done"]
    finally:
        h.close()


def test_a_parent_killed_while_its_children_run_follows_the_same_children(mp: Host) -> None:
    """SIGKILL of the parent's process mid fan-out: the restarted parent resumes its run,
    its spawn calls find the children already running (none is spawned twice, none is
    disturbed) and the run converges with both answers."""
    sid = mp.create()
    slow = ("!slow 0.2 one two three four five", "!slow 0.2 six seven eight nine ten")
    mp.submit(sid, _spawns(*slow))
    kids = wait_for(
        lambda: (
            [e.child for e in mp.history(sid) if e.kind == Kind.CHILD_SPAWNED]
            if sum(e.kind == Kind.CHILD_SPAWNED for e in mp.history(sid)) == 2
            else None
        ),
        30,
    )
    wait_for(lambda: all(_started(mp, k) for k in kids), 30)
    pid = mp.session_pid(sid)
    os.kill(pid, signal.SIGKILL)
    answer = mp.wait(sid, timeout=60)
    assert "one two three four five" in answer and "six seven eight nine ten" in answer
    evs = mp.history(sid)
    assert [e.child for e in evs if e.kind == Kind.CHILD_SPAWNED and e.goal == sid] == kids
    # The spawns were in doubt and are idempotent (a child is named after its call): the
    # cut turn runs on and asks again under the same keys, finding the same children.
    assert not [e for e in evs if e.kind == Kind.TURN_CANCELLED and not e.goal]
    doubts = [e for e in evs if e.kind == Kind.ACTION_IN_DOUBT and not e.goal]
    assert [e.extra["resolution"] for e in doubts] == ["retry", "retry"]
    for kid in kids:
        own = mp.history(kid)
        assert _goal_events(own) == [Kind.SESSION_STARTED, Kind.CONVERGED]
        assert not [e for e in own if e.kind == Kind.TURN_CANCELLED]
    assert [c.state for c in project(evs).fanout] == ["done", "done"]


def _kids(h: Host, sid: str, n: int = 2) -> list[str]:
    return wait_for(  # type: ignore[no-any-return]
        lambda: (
            [e.child for e in h.history(sid) if e.kind == Kind.CHILD_SPAWNED and e.goal == sid]
            if sum(e.kind == Kind.CHILD_SPAWNED and e.goal == sid for e in h.history(sid)) == n
            else None
        ),
        30,
    )


def _text(msg: dict[str, object]) -> str:
    content = msg.get("content") or ""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


def test_a_fan_out_with_an_approval_and_a_blocked_egress_against_the_fake_openai_server(
    mp: Host, tmp_path: pathlib.Path, server: FakeModelServer
) -> None:
    """The issue's whole run on a real wire format: the parent's model spawns two
    children in one response; each child's model makes a tool call (one needs a human's
    approval, the other's fetch is refused by the egress guard); both fold back, the
    parent's model answers with both results, Wait returns it and the parent's projection
    is the seed's tree, field by field."""
    log = tmp_path / "deploys.txt"
    calls = {
        "plan": [
            tool_delta(0, "s1", "spawn", json.dumps({"objective": "deploy"})),
            tool_delta(1, "s2", "spawn", json.dumps({"objective": "fetch"})),
        ],
        "deploy": [tool_delta(0, "d1", "deploy", json.dumps({"log": str(log), "target": "prod"}))],
        "fetch": [tool_delta(0, "h1", "http_get", json.dumps({"url": "http://127.0.0.1:9/"}))],
    }

    def route(body):  # type: ignore[no-untyped-def]
        msgs = body["messages"]
        if msgs[-1]["role"] == "tool":
            # The tools have answered: say what they returned, as the answer.
            n = 0
            while msgs[-1 - n]["role"] == "tool":
                n += 1
            said = "; ".join(_text(m) for m in msgs[len(msgs) - n :])
            return [("sse", [chunk(content=f"done: {said}"), chunk(finish="stop")]), ("done",)]
        asked = _text(next(m for m in reversed(msgs) if m["role"] == "user"))
        deltas = calls[asked]
        return [("sse", [chunk(tool_calls=deltas), chunk(finish="tool_calls")]), ("done",)]

    server.route = route
    try:
        sid = mp.create(
            metadata={
                "ore.model.provider": "openai",
                "ore.model.base_url": server.url,
                "ore.model.name": "fake",
            }
        )
        mp.submit(sid, "plan", budget={"max_turns": 3})
        kids = _kids(mp, sid)
        waiting = wait_for(lambda: mp.pending(kids[0]), 30)[0]
        assert waiting.action == "deploy"
        mp.approve(kids[0], waiting.call)
        answer = mp.wait(sid, timeout=60)
        assert answer.startswith("done: ") and "deployed prod" in answer
        assert "refused by governance (egress_refused)" in answer
        assert log.read_text() == "deploy prod\n"  # approved once, run once
        evs = mp.history(sid)
        assert _goal_events(evs) == [Kind.SESSION_STARTED, Kind.CONVERGED]
        p = project(evs)
        assert list(p.fanout) == [
            FanoutChild(
                id=kids[0],
                parent=sid,
                objective="deploy",
                state=FanoutState.DONE,
                turns=1,
                result="done: deployed prod",
                trust="standard",
                blocked=0,
                seal=RecordState.RECORDING,
            ),
            FanoutChild(
                id=kids[1],
                parent=sid,
                objective="fetch",
                state=FanoutState.DONE,
                turns=1,
                result=p.fanout[1].result,
                trust="standard",
                blocked=1,
                seal=RecordState.RECORDING,
            ),
        ]
        assert "egress_refused" in p.fanout[1].result
        assert [(e.host, e.allowed, e.reason) for e in p.egress] == [
            ("127.0.0.1", False, "loopback")
        ]
        # Every model call went to the server: the parent's two, and two per child.
        assert len(server.requests) == 6
        offered = {t["function"]["name"] for t in server.requests[0]["body"]["tools"]}
        assert "spawn" in offered and "finish" not in offered
        mp.seal(sid)
        assert mp.verify(sid).ok
        p = project(mp.history(sid))
        assert [c.seal for c in p.fanout] == [RecordState.VERIFIED] * 2
    finally:
        server.route = None


def test_a_goal_that_ends_with_the_finish_tool_converges_with_its_argument(mp: Host) -> None:
    """goal.finish = tool: the finish call passes the gate like any tool, ends the turn,
    and its answer is the run's result; a model that only answers is reminded, then the
    run stalls."""
    sid = mp.create(metadata={"goal.finish": "tool"})
    mp.submit(sid, '!tool finish {"answer": "forty-two"}')
    assert mp.wait(sid, timeout=30) == "forty-two"
    evs = mp.history(sid)
    admitted = [e.action for e in evs if e.kind == Kind.ACTION_ADMITTED]
    assert admitted == ["model", "finish"]  # no model call after finish
    assert [e.stop_reason for e in evs if e.kind == Kind.TURN_COMPLETED] == ["finish"]
    assert project(evs).result == "forty-two"

    other = mp.create(metadata={"goal.finish": "tool"})
    mp.submit(other, "just talking")
    with pytest.raises(GoalStalled, match="without calling finish"):
        mp.wait(other, timeout=30)
    reminders = [e for e in mp.history(other) if e.kind == Kind.USER_MESSAGE and e.extra]
    assert len(reminders) == 3


def test_a_run_cut_off_by_a_stop_then_closed_by_close_all_stalls(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """close_all on a session with no process stalls its cut-off run before closed, so
    wait answers GoalStalled at once instead of timing out."""
    data = tmp_path / "data"
    h = _host(data)
    try:
        sid = h.create()
        h.submit(sid, "!slow 0.3 alpha beta gamma delta epsilon")
        wait_for(lambda: any(e.kind == Kind.TURN_STARTED for e in h.history(sid)), 20)
    finally:
        h.close()
    h = _host(data)
    try:
        h.close_all()
        with pytest.raises(GoalStalled):
            h.wait(sid, timeout=10)
        assert _goal_events(h.history(sid)) == [Kind.SESSION_STARTED, Kind.STALLED]
        assert h.resume_all() == []
    finally:
        h.close()


def test_a_fan_out_cut_off_by_a_stop_then_closed_by_close_all_ends_every_run(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """Parent and children cut off by a daemon stop, then close_all with no process up:
    each child's run stalls before closed, the parent records both children completed
    (cancelled) and stalls, so wait answers at once for every one of them and nothing is
    left to resume."""
    data = tmp_path / "data"
    h = _host(data)
    try:
        sid = h.create()
        slow = ("!slow 0.3 one two three four five", "!slow 0.3 six seven eight nine ten")
        h.submit(sid, _spawns(*slow))
        kids = wait_for(
            lambda: (
                [e.child for e in h.history(sid) if e.kind == Kind.CHILD_SPAWNED]
                if sum(e.kind == Kind.CHILD_SPAWNED for e in h.history(sid)) == 2
                else None
            ),
            30,
        )
        wait_for(lambda: all(_started(h, k) for k in kids), 30)
    finally:
        h.close()
    h = _host(data)
    try:
        h.close_all()
        for s in (sid, *kids):
            with pytest.raises(GoalStalled):
                h.wait(s, timeout=10)
            evs = h.history(s)
            assert _goal_events(evs) == [Kind.SESSION_STARTED, Kind.STALLED]
            assert evs[-1].phase == "closed"
        done = [e for e in h.history(sid) if e.kind == Kind.CHILD_COMPLETED]
        assert sorted(e.child for e in done) == sorted(kids)
        assert all(e.is_error for e in done)
        assert h.resume_all() == []
    finally:
        h.close()


def test_a_revived_session_has_its_cut_off_run_resumed(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """Failed past its budget mid-run, then revived: resume_all continues that run."""
    h = Host(
        tmp_path / "data",
        base="multiprocTCPBase",
        timeout=20,
        max_restarts=0,
        factory=ModelFactory(tools=governed_tools(), backoff=0.01),
    )
    try:
        sid = h.create()
        h.submit(sid, "!slow 0.3 alpha beta gamma delta epsilon")
        wait_for(lambda: any(e.kind == Kind.TURN_STARTED for e in h.history(sid)), 20)
        os.kill(h.session_pid(sid), signal.SIGKILL)
        wait_for(lambda: h.history(sid)[-1].phase == "failed", 20)
        with pytest.raises(GoalInterrupted, match=f"vertebra revive {sid}"):
            h.wait(sid)  # failed: nothing drives the run
        assert h.resume_all() == []
        h.revive(sid, "test")
        assert h.resume_all() == [sid]
        assert h.wait(sid, timeout=60).endswith("alpha beta gamma delta epsilon")
        assert _goal_events(h.history(sid)) == [Kind.SESSION_STARTED, Kind.CONVERGED]
    finally:
        h.close()
