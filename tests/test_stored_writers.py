"""The Runner writes a stream without a process with the session's own rules: its close
is the decider's `CloseStored` over the folded stream, and "a goal run is in flight" is
the session fold's, so a closed run ends and a revived run is the one the session resumes."""

from __future__ import annotations

import pathlib
from typing import Any

import attrs

from actors import messages as m
from actors._runtime.histogram import Histogram
from actors.host.goals import in_flight
from actors.runner.shell.stored import StoredWriter
from actors.session.rules import commands as c
from actors.session.rules.decide import decide
from actors.session.rules.state import SessionState, fold
from actors.testing import SessionKit
from spine import Event, Kind, Phase, open_log


def _cut_off_run() -> list[Event]:
    """A stream as a stop leaves it: a goal run open, its first turn started, no end."""
    kit = SessionKit()
    kit.create()
    kit.run(c.Submit(request_id="rs", key="goal-x", objective="find x", budget={}, now=0.0))
    assert kit.events[-1].kind == Kind.TURN_STARTED
    return list(kit.events)


def _close_stored(events: list[Event]) -> list[Event]:
    state = fold(SessionState(session_id="s1"), events)
    return list(decide(c.Session(stored=state), c.CloseStored()).events)


def test_closing_a_stored_run_stalls_it_before_closed() -> None:
    """The cut-off turn is cancelled, then session.stalled for the run, then closed."""
    out = _close_stored(_cut_off_run())
    assert [e.kind for e in out] == [
        Kind.TURN_CANCELLED,
        Kind.LIFECYCLE,
        Kind.STALLED,
        Kind.LIFECYCLE,
    ]
    assert (out[1].phase, out[-1].phase) == (Phase.DONE, Phase.CLOSED)
    assert out[2].goal == "s1"


def test_a_stored_close_ends_the_run_a_waiter_or_a_parent_follows() -> None:
    """After it the fold has no run in flight and the stream holds the end a parent's
    worker turns into its child.completed (session.stalled naming the run)."""
    events = _cut_off_run()
    closed = events + _close_stored(events)
    assert not in_flight("s1", closed)
    ends = [e for e in closed if e.kind in (Kind.CONVERGED, Kind.STALLED)]
    assert [e.goal for e in ends] == ["s1"]


def test_closing_a_stream_already_closed_stores_nothing() -> None:
    """A second close (a race the retry loop refolds) adds no events."""
    events = _cut_off_run()
    closed = events + _close_stored(events)
    assert _close_stored(closed) == []


def test_a_revived_run_is_in_flight_as_the_session_would_continue_it() -> None:
    """failed then recovered: the session resumes its run, so resume_all must see it."""
    events = [
        *_cut_off_run(),
        Event(kind=Kind.LIFECYCLE, phase=Phase.FAILED, error="crashed"),
        Event(kind=Kind.LIFECYCLE, phase=Phase.RECOVERED, reason="revived by an operator"),
    ]
    assert in_flight("s1", events)


def test_a_failed_run_is_not_in_flight() -> None:
    """A failed session is nobody's to resume until it is revived."""
    events = [*_cut_off_run(), Event(kind=Kind.LIFECYCLE, phase=Phase.FAILED, error="x")]
    assert not in_flight("s1", events)


# -- the Runner's writes as tables of the session's rules ----------------------------------


def _decide(events: list[Event], command: c.Command) -> c.Decision:
    return decide(c.Session(stored=fold(SessionState(session_id="s1"), events)), command)


def test_failing_a_stored_run_closes_its_turn_before_failed_and_only_once() -> None:
    """Past the restart budget: the cut-off turn is cancelled (reason failed), then
    ``failed``; a stream failed already with nothing open stores nothing more."""
    events = _cut_off_run()
    out = list(_decide(events, c.FailStored(reason="budget")).events)
    assert [(e.kind, e.phase, e.reason) for e in out] == [
        (Kind.TURN_CANCELLED, "", "failed"),
        (Kind.LIFECYCLE, Phase.DONE, "failed"),
        (Kind.LIFECYCLE, Phase.FAILED, ""),
    ]
    assert out[-1].error == "budget"
    assert not _decide(events + out, c.FailStored(reason="again")).events


def test_reviving_refuses_an_unknown_or_a_healthy_session_and_records_a_failed_one() -> None:
    """Unknown: SessionNotFound; not failed: InvalidRequest; failed: ``recovered`` naming
    the operator's reason, acknowledged with its seq."""
    revive = c.ReviveStored(request_id="r", reason="fixed")
    nothing = _decide([], revive)
    assert (nothing.reply.error, nothing.events) == ("SessionNotFound", ())
    healthy = _decide(_cut_off_run(), revive)
    assert (healthy.reply.error, healthy.events) == ("InvalidRequest", ())
    run = _cut_off_run()
    failed = [*run, Event(kind=Kind.LIFECYCLE, phase=Phase.FAILED, error="x", seq=len(run) + 1)]
    d = _decide(failed, revive)
    (ev,) = d.events
    assert (ev.phase, ev.reason) == (Phase.RECOVERED, "revived by an operator: fixed")
    assert isinstance(d.reply, m.Ack) and d.reply.seq == len(failed) + 1


def _parent_with_a_running_child() -> list[Event]:
    kit = SessionKit(session_id="p")
    kit.create()
    kit.run(c.Submit(request_id="rs", key="goal-p", objective="find x", budget={}, now=0.0))
    run = kit.state.running
    assert run is not None
    kit.run(c.Spawn(turn=run.turn, tool_use_id="a", objective="sub"))
    return list(kit.events)


def test_closing_a_stored_parent_folds_its_children_back_and_asks_to_stop_them() -> None:
    """A stored close of a parent: its running child folds back as cancelled and the
    decision asks for the child's stop (`CancelChildren`), as a live close does."""
    events = _parent_with_a_running_child()
    d = decide(c.Session(stored=fold(SessionState(session_id="p"), events)), c.CloseStored())
    gone = [(e.child, e.result) for e in d.events if e.kind == Kind.CHILD_COMPLETED]
    assert gone == [("p-a", "cancelled")]
    (stop,) = [e for e in d.effects if isinstance(e, c.CancelChildren)]
    assert stop.children == ("p-a",)


class _Runner:
    """What `StoredWriter` reaches of the Runner: its sends, routing and publishing, kept."""

    myAddress = "runner"

    def __init__(self) -> None:
        self.appends = Histogram()
        self.sent: list[tuple[Any, Any]] = []
        self.published_seqs: list[int] = []

    def send(self, to: Any, msg: Any) -> None:
        self.sent.append((to, msg))

    def published(self, sid: str, records: Any) -> None:
        self.published_seqs += [r.seq for r in records]


def _stored(tmp_path: pathlib.Path, sid: str, events: list[Event]) -> tuple[StoredWriter, _Runner]:
    log = open_log(str(tmp_path / "spine.db"))
    log.append(sid, [attrs.evolve(e, seq=0) for e in events])
    runner = _Runner()
    return StoredWriter(log, str(tmp_path), runner), runner


def test_the_runner_closes_a_stored_parent_and_routes_its_childrens_stop(
    tmp_path: pathlib.Path,
) -> None:
    """On a real spine: the close is stored after the folded seq, published, timed, and
    the child's interrupt goes to the Runner to be routed (it used to be dropped)."""
    events = _parent_with_a_running_child()
    writer, runner = _stored(tmp_path, "p", events)
    try:
        assert writer.close("p") == ("closed", writer.log.last_seq("p"))
        stored = list(writer.log.read_events("p", len(events)))
        assert stored[-1].phase == Phase.CLOSED and any(e.kind == Kind.STALLED for e in stored)
        assert runner.published_seqs == [e.seq for e in stored]
        ((to, stop),) = runner.sent
        assert (to, type(stop), stop.session_id, stop.reason) == (
            "runner",
            m.Interrupt,
            "p-a",
            "cancelled",
        )
        assert sum(runner.appends.counts) == 1
        assert writer.close("p") == ("closed", writer.log.last_seq("p"))  # nothing more
        assert len(runner.sent) == 1
    finally:
        writer.log.close()


def test_the_runner_revives_through_the_decider_and_answers_the_operator(
    tmp_path: pathlib.Path,
) -> None:
    """A failed stream on a real spine: revived once (recovered, acknowledged with its
    seq); asked again, the decider's refusal is the answer and nothing is stored."""
    writer, runner = _stored(tmp_path, "s1", _cut_off_run())
    try:
        writer.fail("s1", "budget")
        failed_at = writer.log.last_seq("s1")
        assert list(writer.log.read_events("s1", failed_at - 1))[-1].phase == Phase.FAILED
        msg = m.ReviveSession(request_id="r", session_id="s1", reason="fixed")
        assert writer.revive(msg, "operator")
        assert runner.sent[-1][0] == "operator"
        ack = runner.sent[-1][1]
        assert isinstance(ack, m.Ack) and ack.seq == failed_at + 1 == writer.log.last_seq("s1")
        assert in_flight("s1", list(writer.log.read_events("s1", 0)))
        assert not writer.revive(msg, "operator")
        assert runner.sent[-1][1].error == "InvalidRequest"
        assert writer.log.last_seq("s1") == failed_at + 1
    finally:
        writer.log.close()


def test_a_session_the_runner_holds_failed_is_revived_though_its_failure_was_never_stored(
    tmp_path: pathlib.Path,
) -> None:
    """The Runner marked the session failed while the spine was away, so the stream does
    not say failed: the revival stores that failure first (its reason), then recovered;
    without the Runner's word a healthy stream is still refused."""
    writer, runner = _stored(tmp_path, "s1", _cut_off_run())
    try:
        before = writer.log.last_seq("s1")
        msg = m.ReviveSession(request_id="r", session_id="s1", reason="db back")
        assert not writer.revive(msg, "operator")
        assert runner.sent[-1][1].error == "InvalidRequest"
        assert writer.revive(msg, "operator", held_failed="restart budget exhausted")
        stored = list(writer.log.read_events("s1", before))
        failed = [e for e in stored if e.phase == Phase.FAILED]
        assert [e.error for e in failed] == ["restart budget exhausted"]
        assert stored[-1].phase == Phase.RECOVERED and "db back" in stored[-1].reason
        ack = runner.sent[-1][1]
        assert isinstance(ack, m.Ack) and ack.seq == writer.log.last_seq("s1")
    finally:
        writer.log.close()
