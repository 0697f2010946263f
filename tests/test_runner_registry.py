"""The Runner's registry and supervision as decision tables: given a registry, when an
input arrives, then these actions and this new state. No actor processes."""

from __future__ import annotations

from typing import Any

import pytest

from actors import messages as m
from actors._runtime.shell import requester_of
from actors.policy import RestartPolicy
from actors.runner import EntryState, Registry
from actors.runner.protocol import PassivationDue, RestartDue
from actors.runner.rules import supervision as sv
from actors.runner.rules.actions import (
    Action,
    CloseStored,
    Deliver,
    Fail,
    Forward,
    RecordFailure,
    RecordPoison,
    Reply,
    Schedule,
    Spawn,
    Stop,
    WakeProjection,
)
from actors.session.protocol import (
    SPINE_UNAVAILABLE,
    WAITING,
    Appended,
    Behind,
    FindRequest,
    RequestWhere,
    Routed,
    SessionReady,
    SessionStopping,
)

SID = "s1"
CALLER = "caller"


def _registry(**policy: Any) -> Registry:
    return Registry(policy=RestartPolicy(**policy), idle_timeout=10.0, own_address="runner")


def _ready(r: Registry, incarnation: int, now: float = 0.0, **kw: Any) -> list[Action]:
    """Bind the incarnation to an address and report it ready."""
    r.bind(SID, incarnation, f"addr-{incarnation}")
    msg = SessionReady(
        session_id=SID, incarnation=incarnation, last_seq=kw.pop("last_seq", 1), **kw
    )
    return r.session_ready(msg, now)


def _live(**policy: Any) -> Registry:
    """A registry holding one live session, incarnation 1 at ``addr-1``."""
    r = _registry(**policy)
    r.create(SID, "c0", CALLER, {})
    _ready(r, 1)
    return r


def _send(key: str = "k1", rid: str = "r1") -> m.SendMessage:
    return m.SendMessage(request_id=rid, session_id=SID, key=key, text="hi")


def _crash_and_restart(r: Registry, now: float) -> list[Action]:
    """Crash the live incarnation at ``now``; run the restart (at once, or when its
    backoff is due) to ready."""
    e = r.entries[SID]
    out = r.child_exited(e.address, now)
    for action in list(out):
        if isinstance(action, Schedule):
            out += r.restart_due(action.payload)
        if isinstance(action, Schedule | Spawn):
            out += _ready(r, r.entries[SID].incarnation, now)
    return out


def _errors(actions: list[Action]) -> list[str]:
    return [x.error for x in actions if isinstance(x, Fail)]


# -- create, register, get -----------------------------------------------------------------


def test_create_spawns_the_session_and_answers_once_it_is_ready() -> None:
    """create spawns a creating incarnation; its SessionReady answers the creator with live."""
    r = _registry()
    assert r.create(SID, "c1", CALLER, {"k": "v"}) == [
        Spawn(session_id=SID, incarnation=1, create=True, metadata={"k": "v"})
    ]
    assert r.entries[SID].state == EntryState.STARTING
    [reply] = _ready(r, 1)
    assert isinstance(reply, Reply) and reply.to == CALLER
    assert reply.message.info.state == "live" and r.counters["created"] == 1


def test_create_of_an_existing_id_is_refused_and_leaves_it_untouched() -> None:
    """create on a known id answers SessionAlreadyExists and spawns nothing."""
    r = _live()
    before = r.entries[SID].incarnation
    out = r.create(SID, "c2", CALLER, {})
    assert _errors(out) == ["SessionAlreadyExists"] and len(out) == 1
    assert r.entries[SID].incarnation == before and r.entries[SID].state == EntryState.LIVE


def test_create_of_a_stream_only_the_log_knows_is_refused() -> None:
    """A stream loaded from the log counts as existing for create."""
    r = _registry()
    r.load(SID, 4)
    assert _errors(r.create(SID, "c1", CALLER, {})) == ["SessionAlreadyExists"]


def test_create_that_loses_a_race_in_the_log_answers_already_exists() -> None:
    """A creating incarnation that finds the stream written answers SessionAlreadyExists."""
    r = _registry()
    r.create(SID, "c1", CALLER, {})
    assert _errors(_ready(r, 1, already_exists=True)) == ["SessionAlreadyExists"]


def test_last_seq_comes_from_the_log_not_from_a_coalesced_report() -> None:
    """register, get and list answer the last seq the shell read from the log."""
    r = _live()
    r.appended(Appended(session_id=SID, incarnation=1, records=((3, "x", b"{}"),)), 1.0)
    r.load(SID, 7)
    [reply] = r.register(SID, "g1", CALLER)
    assert isinstance(reply, Reply) and reply.message.info.last_seq == 7
    [listed] = r.list_sessions("l1", CALLER)
    assert isinstance(listed, Reply) and listed.message.sessions[0].last_seq == 7


def _working(r: Registry, sid: str = SID) -> list[bool]:
    """What a one-session ListSessions answers: [working] for a known entry, [] if none."""
    [listed] = r.list_sessions("w", CALLER, sid)
    assert isinstance(listed, Reply)
    assert [i.session_id for i in listed.message.sessions] in ([sid], [])
    return [i.working for i in listed.message.sessions]


def test_working_says_whether_a_process_is_on_the_session_or_about_to_be() -> None:
    """Starting, live and restarting after a crash are working (a goal run goes on);
    passivated, failed and an entry the registry does not hold are not (a run in flight
    there is interrupted). One id answers that entry alone."""
    r = _registry(max_restarts=2, window=60.0)
    r.load("other", 3)
    assert _working(r) == [] and _working(r, "other") == [False]
    r.create(SID, "c1", CALLER, {})
    assert _working(r) == [True]  # starting
    _ready(r, 1)
    assert _working(r) == [True]  # live
    [spawn] = r.child_exited("addr-1", 0.0)  # the first crash restarts at once
    assert isinstance(spawn, Spawn) and r.entries[SID].state == EntryState.STARTING
    _ready(r, 2)
    [due] = r.child_exited("addr-2", 0.5)  # the second after a backoff
    assert r.entries[SID].state == EntryState.RESTARTING and _working(r) == [True]
    r.restart_due(due.payload)
    r.bind(SID, 3, "addr-3")
    r.child_exited("addr-3", 1.0)  # over the budget
    assert r.entries[SID].state == EntryState.FAILED and _working(r) == [False]
    [everyone] = r.list_sessions("l", CALLER)
    assert isinstance(everyone, Reply) and len(everyone.message.sessions) == 2


def test_register_inserts_an_unknown_id_without_checking() -> None:
    """register of an id with no stream inserts a passivated entry and answers it."""
    r = _registry()
    [reply] = r.register("fresh", "g1", CALLER)
    assert isinstance(reply, Reply) and reply.message.info.state == "passivated"
    assert "fresh" in r.entries


# -- routing in each state -----------------------------------------------------------------


def test_a_live_session_gets_requests_forwarded_and_keyed_ingress_tracked() -> None:
    """Live: the request is forwarded to its address; its key stays in flight until committed."""
    r = _live()
    [fwd] = r.route(SID, _send(), CALLER, 5.0)
    assert isinstance(fwd, Forward) and fwd.address == "addr-1" and fwd.routed.reply_to == CALLER
    assert "k1" in r.entries[SID].in_flight
    r.appended(Appended(session_id=SID, incarnation=1, keys=("k1",)), 6.0)
    assert r.entries[SID].in_flight == {}


def test_a_passivated_session_is_spawned_and_the_request_queued_until_ready() -> None:
    """Passivated: a request spawns an incarnation and waits; ready forwards it."""
    r = _registry()
    r.load(SID, 3)
    assert r.route(SID, _send(), CALLER, 0.0) == [Spawn(session_id=SID, incarnation=1)]
    assert r.route(SID, _send("k2", "r2"), CALLER, 0.0) == []
    out = _ready(r, 1, last_seq=3)
    assert [x.routed.message.key for x in out if isinstance(x, Forward)] == ["k1", "k2"]
    assert r.counters["rehydrated"] == 1


@pytest.mark.parametrize(
    ("msg", "expected"),
    [
        (m.GetSession(request_id="r", session_id=SID), "reply"),
        (m.CloseSession(request_id="r", session_id=SID), "done"),
        (_send(), "SessionClosed"),
        (m.SealSession(request_id="r", session_id=SID), "SessionClosed"),
    ],
)
def test_a_closed_session_answers_reads_and_repeated_closes_and_refuses_ingress(
    msg: Any, expected: str
) -> None:
    """Closed: get is answered, close again is done, ingress is refused SessionClosed."""
    r = _registry()
    r.load(SID, 2)
    r.stored_terminal(SID, "closed", 2)
    [out] = r.route(SID, msg, CALLER, 0.0)
    if expected == "reply":
        assert isinstance(out, Reply) and out.message.info.state == "closed"
    elif expected == "done":
        assert out == Reply(to=CALLER, message=m.Done(request_id="r"))
    else:
        assert isinstance(out, Fail) and out.error == expected


def test_subscribing_to_a_closed_session_spawns_it_to_serve_the_replay() -> None:
    """Closed + Subscribe: an incarnation comes back, gets the subscription, and is stopped."""
    r = _registry()
    r.load(SID, 2)
    r.stored_terminal(SID, "closed", 2)
    sub = m.Subscribe(request_id="r", session_id=SID)
    assert r.route(SID, sub, CALLER, 0.0) == [Spawn(session_id=SID, incarnation=1)]
    fwd, stop = _ready(r, 1, last_seq=2, closed=True)
    assert isinstance(fwd, Forward) and fwd.routed.message == sub
    assert stop == Stop(session_id=SID, address="addr-1")
    assert r.child_exited("addr-1", 1.0) == [] and r.entries[SID].state == EntryState.CLOSED


@pytest.mark.parametrize(
    "msg",
    [
        _send(),
        m.CloseSession(request_id="r1", session_id=SID),
    ],
)
def test_a_failed_session_refuses_everything_but_reads_with_session_failed(msg: Any) -> None:
    """Failed: every request except reads is answered SessionFailed; nothing is spawned."""
    r = _registry()
    r.load(SID, 2)
    r.stored_terminal(SID, "failed", 2)
    assert _errors(r.route(SID, msg, CALLER, 0.0)) == ["SessionFailed"]


def test_a_subscription_to_a_failed_session_is_replayed_from_the_log_after_its_failure() -> None:
    """A Subscribe to a failed session, sent before or after it failed, is served from the
    stored rows (ReplayStored) after the failure is recorded; nothing is spawned."""
    from actors.runner.rules.actions import ReplayStored

    r = _live(max_restarts=0, window=60.0)
    early = m.Subscribe(request_id="s1", session_id=SID, after_seq=1)
    out = r.child_exited("addr-1", 0.0)
    assert out[0] == RecordFailure(session_id=SID, reason=sv.BUDGET_EXHAUSTED)
    late = m.Subscribe(request_id="s2", session_id=SID)
    assert r.route(SID, late, CALLER, 1.0) == [
        ReplayStored(session_id=SID, request=late, reply_to=CALLER)
    ]
    r2 = _live(max_restarts=1, window=60.0)
    [spawn] = r2.child_exited("addr-1", 0.0)
    assert isinstance(spawn, Spawn)
    assert r2.route(SID, early, CALLER, 0.005) == []  # waits for the next incarnation
    r2.bind(SID, 2, "addr-2")
    out = r2.child_exited("addr-2", 1.0)
    assert out == [
        RecordFailure(session_id=SID, reason=sv.BUDGET_EXHAUSTED),
        ReplayStored(session_id=SID, request=early, reply_to=CALLER),
    ]


def test_an_unknown_session_is_not_found_and_a_bad_id_is_invalid() -> None:
    """An id no stream has is SessionNotFound; a malformed id is InvalidRequest."""
    r = _registry()
    assert _errors(r.route("nobody", _send(), CALLER, 0.0)) == ["SessionNotFound"]
    assert _errors(r.route("a.b", _send(), CALLER, 0.0)) == ["InvalidRequest"]
    get = m.GetSession(request_id="g", session_id="a.b")
    assert _errors(r.route("a.b", get, CALLER, 0.0)) == ["SessionNotFound"]


def test_requests_to_a_starting_or_restarting_session_wait() -> None:
    """Starting, stopping and restarting sessions queue requests without a second spawn."""
    r = _registry()
    r.create(SID, "c1", CALLER, {})
    assert r.route(SID, _send(), CALLER, 0.0) == []
    assert len(r.entries[SID].pending) == 1


def _find(r: Registry, about: str, sid: str = SID) -> Any:
    [reply] = r.find(FindRequest(request_id="f", session_id=sid, about=about), CALLER)
    assert isinstance(reply, Reply)
    return reply.to, reply.message


def test_the_host_is_told_where_a_request_without_a_reply_stands() -> None:
    """Queued for a loading incarnation: waiting (no copy needed); keyed ingress forwarded
    and not committed: asked of the incarnation, behind it; committed, never seen, a
    forwarded read, or another session's: held nowhere."""
    nowhere = (CALLER, RequestWhere(request_id="f", where=""))
    r = _registry()
    r.load(SID, 3)
    r.route(SID, _send(), CALLER, 0.0)
    r.route(SID, m.GetSession(request_id="g1", session_id=SID), CALLER, 0.0)
    waiting = (CALLER, RequestWhere(request_id="f", where=WAITING))
    assert _find(r, "r1") == _find(r, "g1") == waiting
    assert _find(r, "lost") == _find(r, "r1", "other") == nowhere
    _ready(r, 1, last_seq=3)
    assert _find(r, "r1") == ("addr-1", Behind(request_id="f", reply_to=CALLER))
    assert _find(r, "g1") == nowhere
    r.appended(Appended(session_id=SID, incarnation=1, keys=("k1",)), 1.0)
    assert _find(r, "r1") == nowhere


# -- supervision ---------------------------------------------------------------------------


def test_crashes_within_the_budget_restart_at_once_then_with_doubling_backoff() -> None:
    """The first crash in the window restarts at once (no timer), the next ones after
    0.01, 0.02, 0.04 s; restarts are counted."""
    r = _live(max_restarts=4, window=60.0)
    delays = []
    for i in range(4):
        out = _crash_and_restart(r, float(i))
        delays += [x.delay for x in out if isinstance(x, Schedule)]
        if i == 0:
            assert Spawn(session_id=SID, incarnation=2) in out
    assert delays == [0.01, 0.02, 0.04]
    assert r.entries[SID].total_restarts == 4 and r.counters["restarts"] == 4
    assert r.entries[SID].state == EntryState.LIVE


def test_a_crash_over_the_budget_marks_the_session_failed_and_answers_what_waits() -> None:
    """Crash max_restarts + 1 in the window: FAILED, RecordFailure, pending refused."""
    r = _live(max_restarts=1, window=60.0)
    [spawn] = r.child_exited("addr-1", 0.0)
    assert isinstance(spawn, Spawn) and r.entries[SID].state == EntryState.STARTING
    assert r.route(SID, _send(), CALLER, 0.005) == []  # waits for the next incarnation
    r.bind(SID, 2, "addr-2")
    out = r.child_exited("addr-2", 1.0)  # dies before it is ready
    assert out[0] == RecordFailure(session_id=SID, reason=sv.BUDGET_EXHAUSTED)
    assert _errors(out) == ["SessionFailed"]
    assert r.entries[SID].state == EntryState.FAILED and r.counters["failed"] == 1


def test_crashes_that_left_the_window_do_not_count() -> None:
    """A crash older than the window no longer counts against the budget."""
    r = _live(max_restarts=2, window=10.0)
    _crash_and_restart(r, 0.0)
    assert [x.delay for x in _crash_and_restart(r, 5.0) if isinstance(x, Schedule)] == [0.01]
    # The crashes at 0 and 5 s have left the window: this one is a first one again.
    out = _crash_and_restart(r, 20.0)
    assert not [x for x in out if isinstance(x, Schedule)]
    assert Spawn(session_id=SID, incarnation=4) in out
    assert r.entries[SID].state == EntryState.LIVE


def test_in_flight_ingress_is_redelivered_first_after_a_crash() -> None:
    """Uncommitted keyed ingress goes to the next incarnation before anything else."""
    r = _live()
    r.route(SID, _send("k1"), CALLER, 0.0)
    out = _crash_and_restart(r, 1.0)
    [fwd] = [x for x in out if isinstance(x, Forward)]
    assert fwd.address == "addr-2" and fwd.routed.message.key == "k1"
    assert r.counters["redelivered"] == 1


def test_ingress_in_flight_through_two_crashes_is_poison() -> None:
    """The second crash with the same key in flight answers PoisonMessageError and records it."""
    r = _live()
    r.route(SID, _send("k1"), CALLER, 0.0)
    _crash_and_restart(r, 1.0)
    out = _crash_and_restart(r, 2.0)
    assert _errors(out) == ["PoisonMessageError"]
    assert not [x for x in out if isinstance(x, Forward)]
    [rec] = [x for x in out if isinstance(x, RecordPoison)]
    assert rec.address == "addr-3" and rec.key == "k1"
    assert r.counters["poisoned"] == 1 and r.entries[SID].crashes == {}


def test_a_restart_timer_for_an_older_incarnation_does_nothing() -> None:
    """A RestartDue that something overtook (another spawn) is ignored."""
    r = _live()
    r.child_exited("addr-1", 0.0)
    assert r.restart_due(RestartDue(session_id=SID, incarnation=0)) == []


def test_a_session_stopping_on_purpose_is_not_restarted() -> None:
    """SessionStopping(closed): the Runner stops it; its exit is not a crash."""
    r = _live()
    out = r.stopping(SessionStopping(session_id=SID, incarnation=1, reason="closed"))
    assert out == [Stop(session_id=SID, address="addr-1")]
    assert r.child_exited("addr-1", 1.0) == []
    assert r.entries[SID].state == EntryState.CLOSED and r.counters["restarts"] == 0


def test_a_stale_incarnations_reports_are_ignored() -> None:
    """Reports from an incarnation that is not the current one change nothing."""
    r = _live()
    assert r.session_ready(SessionReady(session_id=SID, incarnation=7, last_seq=9), 0.0) == []
    r.appended(Appended(session_id=SID, incarnation=7, records=((9, "x", b"{}"),)), 0.0)
    assert r.entries[SID].last_seq == 1


def test_a_request_that_poisons_the_session_handler_is_answered_and_recorded() -> None:
    """Thespian's PoisonMessage for a routed request answers PoisonMessageError to its sender."""
    r = _live()
    r.route(SID, _send("k1"), CALLER, 0.0)
    routed = Routed(message=_send("k1"), reply_to=CALLER, session_id=SID)
    out = r.poison(routed, "boom")
    assert _errors(out) == ["PoisonMessageError"]
    assert isinstance(out[1], RecordPoison) and r.entries[SID].in_flight == {}


def test_a_stop_requested_before_ready_keeps_requests_for_the_next_incarnation() -> None:
    """An incarnation that asked to stop before it was ready gets no requests."""
    r = _registry()
    r.load(SID, 2)
    r.route(SID, _send(), CALLER, 0.0)
    r.bind(SID, 1, "addr-1")
    r.stopping(SessionStopping(session_id=SID, incarnation=1, reason="stale incarnation"))
    assert _ready(r, 1, last_seq=2) == []
    assert r.child_exited("addr-1", 1.0) == [Spawn(session_id=SID, incarnation=2)]


# -- passivation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "eligible"),
    [
        ({}, True),
        ({"live": False}, False),
        ({"busy": True}, False),
        ({"in_flight": 1}, False),
        ({"subscribers": 1}, False),
        ({"idle_for": 9.9}, False),
        ({"idle_timeout": None}, False),
        ({"timer_soon": True}, False),
    ],
)
def test_passivation_eligibility(kw: dict[str, Any], eligible: bool) -> None:
    """Live, not busy, nothing in flight, no subscribers, no timer due soon (it would be
    brought back for it at once), idle >= idle_timeout."""
    args: dict[str, Any] = {"live": True, "busy": False, "in_flight": 0, "subscribers": 0}
    args |= {"idle_for": 10.0, "idle_timeout": 10.0} | kw
    assert sv.may_passivate(**args) is eligible


def test_an_idle_session_is_passivated_and_the_next_request_brings_it_back() -> None:
    """The tick stops idle sessions and schedules the next; the exit counts as passivation."""
    r = _live()
    out = r.passivation_due(now=100.0)
    assert out == [
        Stop(session_id=SID, address="addr-1"),
        Schedule(delay=5.0, payload=PassivationDue()),
    ]
    assert r.child_exited("addr-1", 100.1) == []
    assert r.entries[SID].state == EntryState.PASSIVATED and r.counters["passivated"] == 1
    assert r.route(SID, _send(), CALLER, 101.0) == [Spawn(session_id=SID, incarnation=2)]


def test_a_session_with_a_subscriber_is_not_passivated() -> None:
    """A protocol subscription keeps its session live however idle it is."""
    r = _live()
    r.route(SID, m.Subscribe(request_id="r", session_id=SID), CALLER, 0.0)
    assert r.passivation_due(now=100.0) == [Schedule(delay=5.0, payload=PassivationDue())]


def test_a_session_with_a_timer_due_soon_is_not_passivated() -> None:
    """The shell names the sessions with a timer due within the lead: they stay live."""
    r = _live()
    assert r.passivation_due(now=100.0, keep={SID}) == [
        Schedule(delay=5.0, payload=PassivationDue())
    ]
    assert r.passivation_due(now=100.0, keep={"other"})[0] == Stop(session_id=SID, address="addr-1")


# -- sinks, projection, close-all ----------------------------------------------------------


def test_appended_records_wake_the_projection_and_reach_the_sinks() -> None:
    """New records wake the projection; records and live items are delivered as they came."""
    r = _live()
    live = ((1, "notice", "info", "hello"),)
    msg = Appended(session_id=SID, incarnation=1, records=((2, "x", b"{}"),), live=live)
    assert r.appended(msg, 0.0) == [
        WakeProjection(),
        Deliver(session_id=SID, records=((2, "x", b"{}"),), live=live),
    ]
    assert r.appended(Appended(session_id=SID, incarnation=1, keys=("k",)), 0.0) == []


def test_close_all_closes_unloaded_streams_in_the_log_and_live_sessions_by_request() -> None:
    """close_all: CloseStored for sessions without a process (loaded from the log just
    before), CloseSession to live ones, nothing for closed ones; then the Runner is closed."""
    r = _live()
    r.load("stored", 5)
    r.load("done", 3)
    r.stored_terminal("done", "closed", 3)
    out = r.close_all("all", CALLER, 0.0)
    assert CloseStored(session_id="stored") in out
    assert not [x for x in out if isinstance(x, CloseStored) and x.session_id != "stored"]
    [fwd] = [x for x in out if isinstance(x, Forward)]
    assert isinstance(fwd.routed.message, m.CloseSession) and fwd.routed.reply_to == "runner"
    assert out[-1] == Reply(to=CALLER, message=m.Done(request_id="all"))
    r.stored_terminal("stored", "closed", 7)
    assert r.entries["stored"].state == EntryState.CLOSED
    assert _errors(r.route(SID, _send(), CALLER, 0.0)) == ["RunnerClosed"]
    assert isinstance(
        r.route(SID, m.GetSession(request_id="g", session_id=SID), CALLER, 0.0)[0], Forward
    )


def test_stats_count_live_and_known_sessions() -> None:
    """stats adds live and known counts to the counters."""
    r = _live()
    r.load("other", 2)
    st = r.stats()
    assert st["live"] == 1 and st["known"] == 2 and st["created"] == 1


# -- the guarded shell ---------------------------------------------------------------------


def test_a_failing_handler_is_answered_to_the_requester_not_to_a_reply() -> None:
    """A routed request is answered to its reply_to; replies are never answered."""
    routed = Routed(message=_send(), reply_to=CALLER, session_id=SID)
    found = requester_of(routed, "runner")
    assert found is not None and found[0] == CALLER
    assert requester_of(m.Done(request_id="x"), "someone") is None
    assert requester_of(object(), "someone") is None


def test_a_request_bounced_by_a_stopping_incarnation_is_served_once() -> None:
    """Forwarded while live (so in flight), bounced back by the stopping incarnation: the
    next incarnation gets it once, not from both the queue and the in-flight list."""
    r = _live()
    r.route(SID, _send("k1", "r1"), CALLER, 0.0)
    assert "k1" in r.entries[SID].in_flight
    r.stopping(SessionStopping(session_id=SID, incarnation=1, reason="passivate"))
    r.route(SID, _send("k1", "r1"), CALLER, 0.0)  # the bounce
    out = r.child_exited("addr-1", 0.0)
    out += _ready(r, r.entries[SID].incarnation)
    forwarded = [a for a in out if isinstance(a, Forward)]
    assert [f.routed.message.key for f in forwarded] == ["k1"]


def test_a_stream_that_does_not_decode_fails_the_session_at_once_naming_the_seq() -> None:
    """SessionUnreadable: no restart (it cannot help), the failure is recorded with its
    reason, what waited is refused naming the seq, and a verification is still served
    from the stored rows (VerifyStored), also once its exit was first taken for a crash."""
    from actors.runner.rules.actions import VerifyStored
    from actors.session.protocol import SessionUnreadable

    r = _registry()
    r.load(SID, 5)
    verify = m.VerifySession(request_id="v1", session_id=SID)
    assert r.route(SID, _send(), CALLER, 0.0) == [
        Spawn(session_id=SID, incarnation=1, create=False, metadata={})
    ]
    r.route(SID, verify, CALLER, 0.0)
    r.bind(SID, 1, "addr-1")
    why = "its stream does not decode at seq 3: not JSON"
    # Its exit arrives first: taken for a crash, the next incarnation starts at once, and
    # the report of the one that died is stale by then...
    assert Spawn(session_id=SID, incarnation=2) in r.child_exited("addr-1", 0.0)
    stale = SessionUnreadable(session_id=SID, incarnation=1, seq=3, reason=why)
    assert r.unreadable(stale) == []
    # ...the next finds the same row; its exit comes first too, and is taken for a crash:
    r.bind(SID, 2, "addr-2")
    assert any(isinstance(x, Schedule) for x in r.child_exited("addr-2", 0.0))
    out = r.unreadable(SessionUnreadable(session_id=SID, incarnation=2, seq=3, reason=why))
    assert RecordFailure(session_id=SID, reason=why) in out
    assert _errors(out) == ["SessionFailed"]
    assert "seq 3" in next(x.message for x in out if isinstance(x, Fail))
    assert VerifyStored(session_id=SID, request_id="v1", reply_to=CALLER) in out
    # ...and the restart scheduled then finds the session failed and starts nothing.
    assert r.restart_due(RestartDue(session_id=SID, incarnation=2)) == []
    info = r.entries[SID].info()
    assert info.state == "failed" and info.error == why
    assert r.route(SID, verify, CALLER, 1.0) == [
        VerifyStored(session_id=SID, request_id="v1", reply_to=CALLER)
    ]


def _spine_down(r: Registry, incarnation: int, now: float) -> list[Action]:
    """Incarnation ``incarnation`` reports the spine unreachable and its process exits."""
    r.bind(SID, incarnation, f"addr-{incarnation}")
    stop = SessionStopping(session_id=SID, incarnation=incarnation, reason=SPINE_UNAVAILABLE)
    assert r.stopping(stop) == [Stop(session_id=SID, address=f"addr-{incarnation}")]
    return r.child_exited(f"addr-{incarnation}", now)


def test_a_spine_outage_restarts_with_a_backoff_of_its_own_and_spends_no_budget() -> None:
    """Eight incarnations in a row find the spine away (a budget of one crash): each is
    started again after 0.1, 0.2 ... up to the cap, the session never fails, what was in
    flight waits for the incarnation that finds the spine back, and the count resets."""
    r = _live(max_restarts=1, window=60.0, backoff_max=1.0)
    r.route(SID, _send("k1"), CALLER, 0.0)
    delays = []
    for inc in range(1, 9):
        [due] = _spine_down(r, inc, float(inc))
        assert isinstance(due, Schedule) and r.entries[SID].state == EntryState.RESTARTING
        delays.append(due.delay)
        assert r.restart_due(due.payload) == [
            Spawn(session_id=SID, incarnation=inc + 1, create=False, metadata={})
        ]
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0]
    out = _ready(r, 9)
    [fwd] = [x for x in out if isinstance(x, Forward)]
    assert fwd.routed.message.key == "k1" and fwd.address == "addr-9"
    e = r.entries[SID]
    assert e.state == EntryState.LIVE and e.crash_times == () and e.outages == 0
    assert r.counters["outages"] == 8 and r.counters["restarts"] == 0 == r.counters["failed"]
    [again] = _spine_down(r, 9, 10.0)
    assert isinstance(again, Schedule) and again.delay == 0.1
