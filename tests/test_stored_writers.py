"""The Runner writes a stream without a process with the session's own rules: its close
is the decider's `CloseStored` over the folded stream, and "a goal run is in flight" is
the session fold's, so a closed run ends and a revived run is the one the session resumes."""

from __future__ import annotations

from actors.host.goals import in_flight
from actors.session.rules import commands as c
from actors.session.rules.decide import decide
from actors.session.rules.state import SessionState, fold
from actors.testing import SessionKit
from spine import Event, Kind, Phase


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
