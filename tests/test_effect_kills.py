"""The effect ledger under fault injection, on real processes: tools that append a line
to a file on every run (counted outside the runtime), goal runs calling them, sessions and
whole actor systems SIGKILLed at random points of a call's run, between "effect done" and
"result stored". For every call: at most one run unless the tool is declared idempotent
(then every run under one key), a ledger entry that ends completed or in doubt, no tool
run past max_turns, and an approval given across a restart never runs a sibling twice."""

from __future__ import annotations

import contextlib
import pathlib
import random
from collections.abc import Iterator

import pytest
from effect_storm import (
    end_of,
    kill_session_mid_call,
    kill_system,
    objective,
    started_call,
    storm_tools,
    tally,
    wait_for,
)

from actors.agents import ModelFactory
from actors.host import Host
from spine import Kind

pytestmark = pytest.mark.timeout(300)

#: A run that must not need a human: an in-doubt call fails back to the model.
NO_HUMAN = {"governance.in_doubt": "fail"}
MAX_TURNS = 2


def _host(data: pathlib.Path) -> Host:
    return Host(
        data,
        base="multiprocTCPBase",
        timeout=20,
        factory=ModelFactory(tools=storm_tools(), backoff=0.01),
    )


@pytest.fixture
def mp(tmp_path: pathlib.Path, no_leftover_processes) -> Iterator[Host]:  # type: ignore[no-untyped-def]
    h = _host(tmp_path / "data")
    try:
        yield h
    finally:
        h.close()


def test_session_kills_mid_call_run_no_tool_twice_and_lose_no_call(
    mp: Host, tmp_path: pathlib.Path
) -> None:
    """20 sessions, each SIGKILLed once at a random point of its goal run's two concurrent
    calls (one runs-once tool, one idempotent)."""
    log = tmp_path / "effects.log"
    rng = random.Random(25)
    sids = []
    for i in range(20):
        sid = mp.create(metadata=NO_HUMAN)
        mp.submit(sid, objective(log, f"s{i}", "append", "append_idem"), budget={"max_turns": 2})
        kill_session_mid_call(mp, sid, rng)
        sids.append(sid)
    ends = {sid: end_of(mp, sid) for sid in sids}
    t = tally(log, {sid: mp.history(sid) for sid in sids}, MAX_TURNS)
    print(t.report())
    assert "append" not in t.doubled, t.report()
    assert t.rekeyed == 0 and t.lost == 0 and t.past_budget == 0, t.report()
    assert set(ends.values()) <= {"converged", "stalled"}, ends
    assert t.in_doubt, "no kill landed in a call: the storm tested nothing"


def test_daemon_kills_mid_call_run_no_tool_twice_and_lose_no_call(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """Two rounds of four goal runs each; every process of the actor system SIGKILLed at a
    random point of a call's run; a new system on the same data resumes the runs."""
    log = tmp_path / "effects.log"
    rng = random.Random(7)
    data = tmp_path / "data"
    sids: list[str] = []
    for rnd in range(2):
        h = _host(data)
        try:
            fresh = []
            for i in range(4):
                sid = h.create(metadata=NO_HUMAN)
                obj = objective(log, f"d{rnd}{i}", "append", "append_idem")
                h.submit(sid, obj, budget={"max_turns": 1})
                fresh.append(sid)
            wait_for(lambda: all(_called(h, s) for s in fresh), 30)  # noqa: B023
            kill_at = rng.uniform(0, 0.2)
            wait_for(lambda: _ran_for(h, fresh[-1], kill_at), 30)  # noqa: B023
            kill_system(h)
        finally:
            with contextlib.suppress(Exception):
                h.close()
        sids += fresh
    h = _host(data)
    try:
        h.resume_all()
        for sid in sids:
            end_of(h, sid)
        t = tally(log, {sid: h.history(sid) for sid in sids}, 1)
    finally:
        h.close()
    print(t.report())
    assert "append" not in t.doubled, t.report()
    assert t.rekeyed == 0 and t.lost == 0 and t.past_budget == 0, t.report()


def _called(h: Host, sid: str) -> bool:
    return started_call(h, sid) is not None


def _ran_for(h: Host, sid: str, seconds: float) -> bool:
    """The session's first intent is at least ``seconds`` old (by the log's clock)."""
    import datetime

    first = started_call(h, sid)
    if first is None or first.time is None:
        return False
    now = datetime.datetime.now(datetime.UTC)
    return (now - first.time).total_seconds() >= seconds


def test_an_approval_across_a_restart_never_runs_the_free_sibling_twice(
    mp: Host, tmp_path: pathlib.Path
) -> None:
    """A free call and a gated one in one response: the session is killed while the free
    call runs or after, with the gated one waiting; after the restart the human approves
    the gated call and declines to re-run a call in doubt: each call ran at most once."""
    log = tmp_path / "effects.log"
    rng = random.Random(3)
    sids = []
    for i in range(4):
        sid = mp.create()
        mp.submit(sid, objective(log, f"a{i}", "append", "append_gated"))
        wait_for(lambda: mp.pending(sid), 30)  # noqa: B023
        kill_session_mid_call(mp, sid, rng)
        sids.append(sid)
    for sid in sids:
        for _ in range(3):
            asked = wait_for(lambda: mp.pending(sid) or _over(mp, sid), 30)  # noqa: B023
            if asked is True:
                break
            for ev in asked:
                if ev.extra.get("inDoubt"):
                    mp.reject(sid, ev.call, "it may have run: leave it")
                else:
                    mp.approve(sid, ev.call)
        assert end_of(mp, sid) == "converged"
    t = tally(log, {sid: mp.history(sid) for sid in sids}, MAX_TURNS)
    print(t.report())
    assert not t.doubled and t.lost == 0, t.report()
    assert t.runs["append_gated"] == len(sids)


def _over(h: Host, sid: str) -> bool:
    return any(e.kind in (Kind.CONVERGED, Kind.STALLED) for e in h.history(sid))


def test_a_human_gives_an_in_doubt_calls_result_by_hand_and_the_run_goes_on_with_it(
    mp: Host, tmp_path: pathlib.Path
) -> None:
    """A session SIGKILLed while its runs-once tool runs: the human asked about the call
    in doubt answers with its outcome; the run converges on that result, the tool ran at
    most once, and the result is the call's tool.result in the log."""
    log = tmp_path / "effects.log"
    sid = mp.create()
    mp.submit(sid, objective(log, "h0", "append"))
    kill_session_mid_call(mp, sid, random.Random(11))
    asked = wait_for(lambda: [e for e in mp.pending(sid) if e.extra.get("inDoubt")], 30)
    ack = mp.resolve(sid, asked[0].call, "appended (checked by hand)", note="saw the line")
    assert ack.seq > 0
    assert end_of(mp, sid) == "converged"
    evs = mp.history(sid)
    results = [
        e for e in evs if e.kind == Kind.TOOL_RESULT and e.tool_use_id == asked[0].tool_use_id
    ]
    assert [r.result for r in results] == ["appended (checked by hand)"]
    t = tally(log, {sid: evs}, MAX_TURNS)
    assert not t.doubled and t.runs["append"] <= 1, t.report()
