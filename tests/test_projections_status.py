"""The status fold: every rule of the seed's Projection, and its algebraic properties."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import properties as property_changes
from strategies import unknown_kinds, usages

from projections import (
    HANDLERS,
    MAX_ACTIONS,
    MAX_EGRESS,
    MODEL_NAME,
    ActionEntry,
    ActionState,
    EgressEntry,
    FanoutState,
    Outcome,
    Projection,
    RecordState,
    StatusFolder,
    new_projection,
    project,
    record_rank,
    reduce,
)
from spine import Event, Kind, MemoryLog, Phase, Usage, encode_event, history
from spine.seal import SigningKey, seal_stream, verified_event, verify_records, verify_stream

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
T0 = datetime(2026, 3, 1, tzinfo=UTC)

# -- strategies: events that exercise the rules (small id pools so that they collide) ----

_goals = st.sampled_from(["", "run", "c1", "c2", "c3"])
_children = st.sampled_from(["", "c1", "c2", "c3"])
_small = st.sampled_from(["", "a", "b", "sandboxed"])


def _verification_records() -> list[dict[str, Any]]:
    """The record of each record.verified event the spine writes: a pass, a finding, no seal."""
    key = SigningKey.generate()
    log = MemoryLog()
    log.append("s", [Event(kind=Kind.ASSISTANT, text=t) for t in "abc"])
    seal_stream(log, "s", key)
    records = log.read("s", 0, None)
    forged = [*records[:1], records[1]._replace(payload=b'{"seq":2,"kind":"x"}'), *records[2:]]
    reports = [
        verify_records("s", records, key.public_key),
        verify_records("s", forged, key.public_key),
        verify_records("s", records, SigningKey.generate().public_key),
        verify_records("s", records[:3], key.public_key),
    ]
    return [dict(verified_event(r).record) for r in reports]


#: Verification records: the ones the spine writes (pass, tampered, forged, unsealed) and
#: other spellings of a pass or a failure.
VERIFIED_RECORDS = _verification_records()
_records = st.sampled_from(
    [
        {},
        {"ok": True, "first": 1},
        {"ok": False},
        {"outcome": "tampered"},
        {"outcome": "ok"},
        *VERIFIED_RECORDS,
    ]
)
_status_kinds = st.sampled_from([str(k) for k in HANDLERS]) | st.sampled_from(
    [str(Kind.TURN_STARTED), str(Kind.ASSISTANT), str(Kind.TOOL_CALL), str(Kind.INTERRUPT)]
)
#: Fields the context rules read (``context.*`` and a model call's measure), usable or not.
_context_extra = st.sampled_from(
    [
        {},
        {"fromSeq": 1, "toSeq": 5},
        {"fromSeq": 3, "toSeq": 2},
        {"fromSeq": 2.0, "toSeq": 9},
        {"fromSeq": True, "toSeq": 4},
        {"tokens": 1024, "source": "llama.cpp /props", "key": "openai|http://x/v1|m"},
        {"tokens": 0, "source": "table"},
        {"context": {"chars": 400, "inputTokens": 100}},
        {"context": {"chars": 0, "inputTokens": 7}},
        {"context": "not a measure"},
    ]
)
#: Metadata changes that move the window: its setting, the model its answer is about.
_context_properties = st.sampled_from(
    [
        {"ore.model.context_window": "2048"},
        {"ore.model.context_window": None},
        {"ore.model.context_window": "tiny"},
        {
            "ore.model.provider": "openai",
            "ore.model.base_url": "http://x/v1",
            "ore.model.name": "m",
        },
        {"ore.model.name": "other"},
    ]
)
#: Kinds this version has never heard of: a few fixed ones, and any from the shared pool.
_unknown = st.sampled_from(["future.kind", "x", "session.merged"]) | unknown_kinds


@st.composite
def status_events(draw: st.DrawFn, kinds: st.SearchStrategy[str] | None = None) -> Event:
    """An event whose fields hit the fold's branches often (shared goals, calls, hosts)."""
    return Event(
        kind=draw(kinds if kinds is not None else _status_kinds | _unknown),
        goal=draw(_goals),
        child=draw(_children),
        text=draw(_small),
        result=draw(_small),
        is_error=draw(st.booleans()),
        usage=draw(st.none() | usages),
        error=draw(_small),
        action=draw(_small),
        call=draw(st.integers(0, 4)),
        trust=draw(_small),
        fault=draw(_small),
        host=draw(st.sampled_from(["", "h1", "h2"])),
        allowed=draw(st.booleans()),
        reason=draw(_small),
        phase=draw(st.sampled_from(["", *[str(p) for p in Phase]])),
        properties=draw(property_changes | _context_properties),
        record=draw(_records),
        extra=draw(_context_extra),
    )


event_lists = st.lists(status_events(), max_size=60)


def stored(events: list[Event]) -> list[Event]:
    """The events as the log gives them back (seq and time assigned, JSON round trip)."""
    log = MemoryLog()
    for ev in events:
        log.append("s", [ev])
    return history(log, "s")


def fold_rows(events: list[Event], start: Projection | None = None) -> Projection:
    """The dict-row path over the stored JSON of ``events``."""
    f = StatusFolder.thaw(start) if start is not None else StatusFolder()
    for ev in events:
        f.feed(orjson.loads(encode_event(ev)))
    return f.freeze()


def ev(kind: str, **kw: Any) -> Event:
    return Event(kind=kind, **kw)


# -- the seed's rules, one by one ---------------------------------------------------------


def test_a_new_projection_is_recording_and_otherwise_zero() -> None:
    """NewProjection: recording, no objective, no turns, no usage, nothing in any ledger."""
    p = new_projection()
    assert p.record == RecordState.RECORDING
    assert (p.objective, p.result, p.turns, p.usage) == ("", "", 0, Usage())
    assert (p.actions, p.egress, p.fanout, p.terminal, p.error) == ((), (), (), False, "")
    assert project([]) == p


def test_session_started_sets_the_objective() -> None:
    """session.started carries the run's objective in its text."""
    assert project([ev(Kind.SESSION_STARTED, text="find the bug")]).objective == "find the bug"


def test_turn_completed_counts_turns_and_sums_usage() -> None:
    """Each turn.completed adds a turn and its usage to the cumulative usage."""
    u1 = Usage(input_tokens=10, output_tokens=2, cache_read_tokens=4)
    u2 = Usage(input_tokens=5, cache_write_tokens=1, reasoning_tokens=3)
    p = project([ev(Kind.TURN_COMPLETED, usage=u1), ev(Kind.TURN_COMPLETED, usage=u2)])
    assert p.turns == 2
    assert p.usage == u1 + u2


def test_converged_is_terminal_with_the_final_answer() -> None:
    """session.converged makes the run terminal with its text as the result and no error."""
    p = project([ev(Kind.SESSION_STARTED, text="o"), ev(Kind.CONVERGED, text="42")])
    assert (p.terminal, p.result, p.error, p.outcome) == (True, "42", "", Outcome.CONVERGED)


def test_stalled_is_terminal_with_the_stall_reason() -> None:
    """session.stalled makes the run terminal with its error as the reason."""
    p = project([ev(Kind.STALLED, error="out of budget")])
    assert (p.terminal, p.error, p.outcome) == (True, "out of budget", Outcome.STALLED)


def test_containment_is_the_trust_of_the_latest_governed_action() -> None:
    """Containment is empty until an admission, then follows each admitted or rejected action."""
    assert new_projection().containment == ""
    p = project([ev(Kind.ACTION_ADMITTED, call=1, trust="sandboxed")])
    assert p.containment == "sandboxed"
    p = reduce(p, ev(Kind.ACTION_REJECTED, call=2, trust="network"))
    assert p.containment == "network"


def test_admitted_completed_and_rejected_are_counted() -> None:
    """Each governed action outcome increments its own counter."""
    p = project(
        [
            ev(Kind.ACTION_ADMITTED, call=1),
            ev(Kind.ACTION_ADMITTED, call=2),
            ev(Kind.ACTION_COMPLETED, call=1),
            ev(Kind.ACTION_REJECTED, call=3, fault="budget_exceeded"),
        ]
    )
    assert (p.admitted, p.completed, p.rejected) == (2, 1, 1)


def test_an_outcome_updates_the_ledger_entry_its_admission_created() -> None:
    """A completion or rejection paired by call updates that row instead of adding one."""
    p = project(
        [
            ev(Kind.ACTION_ADMITTED, call=7, action="read", trust="ws"),
            ev(Kind.ACTION_ADMITTED, call=8, action="send", trust="ws"),
            ev(Kind.ACTION_COMPLETED, call=7, fault="transient"),
            ev(Kind.ACTION_REJECTED, call=8, fault="needs_approval"),
        ]
    )
    assert p.actions == (
        ActionEntry(call=7, action="read", trust="ws", state=ActionState.DONE, fault="transient"),
        ActionEntry(
            call=8, action="send", trust="ws", state=ActionState.BLOCKED, fault="needs_approval"
        ),
    )


def test_an_outcome_without_its_admission_gets_its_own_row() -> None:
    """A rejection with no admission in the ledger (refused outright) is still named."""
    p = project([ev(Kind.ACTION_REJECTED, call=3, action="rm", fault="capability_denied")])
    assert p.actions == (
        ActionEntry(call=3, action="rm", state=ActionState.BLOCKED, fault="capability_denied"),
    )


def test_the_action_ledger_keeps_the_most_recent_entries_newest_last() -> None:
    """Past MAX_ACTIONS entries the oldest fall off the front."""
    p = project([ev(Kind.ACTION_ADMITTED, call=i) for i in range(1, MAX_ACTIONS + 11)])
    assert len(p.actions) == MAX_ACTIONS
    assert [a.call for a in p.actions] == list(range(11, MAX_ACTIONS + 11))
    assert p.admitted == MAX_ACTIONS + 10


def test_egress_decisions_are_counted_and_named_in_a_bounded_ledger() -> None:
    """net.egress counts allowed and blocked dials; the ledger keeps the newest MAX_EGRESS."""
    evs = [ev(Kind.EGRESS, host=f"h{i}", allowed=i % 3 != 0, reason="r") for i in range(100)]
    p = project(evs)
    assert p.egress_allowed == 66 and p.egress_blocked == 34
    assert len(p.egress) == MAX_EGRESS
    assert p.egress[-1] == EgressEntry(host="h99", allowed=False, reason="r")
    assert project([ev(Kind.EGRESS, allowed=False)]) == new_projection()


def test_fanout_children_are_kept_in_spawn_order_with_parent_and_objective() -> None:
    """child.spawned appends a running child under the goal that spawned it."""
    p = project(
        [
            ev(Kind.CHILD_SPAWNED, goal="run", child="a", text="first"),
            ev(Kind.CHILD_SPAWNED, goal="a", child="b", text="nested"),
            ev(Kind.CHILD_SPAWNED, goal="run", child="a", text="duplicate spawn"),
        ]
    )
    assert [(c.id, c.parent, c.objective, c.state) for c in p.fanout] == [
        ("a", "run", "first", FanoutState.RUNNING),
        ("b", "a", "nested", FanoutState.RUNNING),
    ]


def test_a_child_folds_back_done_or_failed_with_its_result() -> None:
    """child.completed flips the child to done (or failed when is_error) with its result."""
    p = project(
        [
            ev(Kind.CHILD_SPAWNED, child="a"),
            ev(Kind.CHILD_SPAWNED, child="b"),
            ev(Kind.CHILD_COMPLETED, child="a", result="ok"),
            ev(Kind.CHILD_COMPLETED, child="b", result="boom", is_error=True),
            ev(Kind.CHILD_COMPLETED, child="a", result="late duplicate", is_error=True),
        ]
    )
    assert [(c.state, c.result) for c in p.fanout] == [
        (FanoutState.DONE, "ok"),
        (FanoutState.FAILED, "boom"),
    ]


def test_a_childs_turns_trust_and_blocked_count_come_from_its_own_events() -> None:
    """Events whose goal names a child feed its turns, trust and blocked count."""
    p = project(
        [
            ev(Kind.CHILD_SPAWNED, child="a"),
            ev(Kind.CHILD_SPAWNED, child="b"),
            ev(Kind.TURN_COMPLETED, goal="a"),
            ev(Kind.TURN_COMPLETED, goal="a"),
            ev(Kind.ACTION_ADMITTED, goal="a", call=1, trust="sandboxed"),
            ev(Kind.ACTION_REJECTED, goal="b", call=2, trust="network"),
            ev(Kind.ACTION_REJECTED, goal="b", call=3),
        ]
    )
    a, b = p.fanout
    assert (a.turns, a.trust, a.blocked) == (2, "sandboxed", 0)
    assert (b.turns, b.trust, b.blocked) == (0, "network", 2)
    assert p.turns == 2  # the run counts every turn on its stream, the children's included


def _fan_out(mirror_outcomes: bool) -> list[Event]:
    """A parent that spawns child ``k`` (its spawn is the parent's call 5) whose own calls
    3 and 5 are mirrored onto the parent's stream when it folds back: the admissions only
    (a log written before outcomes were mirrored) or with their completions."""
    child = [
        ev(Kind.ACTION_ADMITTED, goal="k", call=3, action="model", trust="standard"),
        ev(Kind.ACTION_COMPLETED, goal="k", call=3, action="model"),
        ev(Kind.ACTION_ADMITTED, goal="k", call=5, action="calculator", trust="standard"),
        ev(Kind.ACTION_COMPLETED, goal="k", call=5, action="calculator", fault="tool_error"),
        ev(Kind.TURN_COMPLETED, goal="k", turn=1),
    ]
    if not mirror_outcomes:
        child = [e for e in child if e.kind != Kind.ACTION_COMPLETED]
    return [
        ev(Kind.SESSION_STARTED, goal="p", text="plan"),
        ev(Kind.ACTION_ADMITTED, call=3, action="model", trust="standard"),
        ev(Kind.ACTION_COMPLETED, call=3, action="model"),
        ev(Kind.ACTION_ADMITTED, call=5, action="spawn", trust="standard"),
        ev(Kind.CHILD_SPAWNED, goal="p", child="k", text="sub"),
        *child,
        ev(Kind.CHILD_COMPLETED, goal="p", child="k", result="ok"),
        ev(Kind.ACTION_COMPLETED, call=5, action="spawn"),
        ev(Kind.ACTION_ADMITTED, call=9, action="model", trust="standard"),
        ev(Kind.ACTION_COMPLETED, call=9, action="model"),
        ev(Kind.CONVERGED, goal="p", text="done"),
    ]


@pytest.mark.parametrize("mirror_outcomes", [True, False], ids=["outcomes", "older log"])
def test_a_childs_mirrored_actions_pair_by_child_and_call_and_settle_by_its_fold_back(
    mirror_outcomes: bool,
) -> None:
    """A child's call ids collide with the parent's: each outcome settles the row of its
    own goal, nothing is left running after a converged run and admitted == completed,
    also in a log that mirrored only a child's admissions (its fold-back settles them)."""
    evs = stored(_fan_out(mirror_outcomes))
    p = project(evs)
    assert fold_rows(evs) == p
    assert [(a.goal, a.call, a.action, a.state) for a in p.actions] == [
        ("", 3, "model", ActionState.DONE),
        ("", 5, "spawn", ActionState.DONE),
        ("k", 3, "model", ActionState.DONE),
        ("k", 5, "calculator", ActionState.DONE),
        ("", 9, "model", ActionState.DONE),
    ]
    assert [a.fault for a in p.actions][3] == ("tool_error" if mirror_outcomes else "")
    assert p.admitted == p.completed == 5 and p.rejected == 0
    (child,) = p.fanout
    assert (child.state, child.in_flight, child.turns) == (FanoutState.DONE, 0, 1)


def test_a_childs_actions_are_in_flight_until_their_outcomes_or_its_fold_back() -> None:
    """Before the fold-back, a child's unanswered admission counts as in flight (admitted
    minus completed) and its own running row names the child; the parent's row with the
    same call is not touched by the child's outcome."""
    evs = _fan_out(mirror_outcomes=False)
    cut = next(i for i, e in enumerate(evs) if e.kind == Kind.CHILD_COMPLETED)
    p = project(evs[:cut])
    assert p.admitted - p.completed == 3  # the parent's spawn and the child's two calls
    assert p.child("k") is not None and p.child("k").in_flight == 2  # type: ignore[union-attr]
    spawn = next(a for a in p.actions if a.action == "spawn")
    assert (spawn.goal, spawn.state) == ("", ActionState.RUNNING)
    p = reduce(p, ev(Kind.ACTION_COMPLETED, goal="k", call=5, action="calculator"))
    spawn = next(a for a in p.actions if a.action == "spawn")
    assert spawn.state == ActionState.RUNNING
    assert p.child("k").in_flight == 1  # type: ignore[union-attr]


def test_a_childs_approved_admission_leaves_the_parents_waiting_action_alone() -> None:
    """A mirrored admission with the same call as one of the run's own pending actions
    does not settle it: only the run's own events answer its approvals."""
    evs = [
        ev(Kind.CHILD_SPAWNED, goal="p", child="k"),
        ev(Kind.ACTION_PENDING, call=4, action="deploy", turn=1),
        ev(Kind.ACTION_ADMITTED, goal="k", call=4, action="deploy"),
        ev(Kind.ACTION_REJECTED, goal="k", call=4, action="deploy", fault="x"),
    ]
    p = project(evs)
    assert [x.call for x in p.pending] == [4]
    assert fold_rows(stored(evs)) == p


def test_an_older_checkpoint_without_goals_or_in_flight_slots_loads() -> None:
    """A status checkpoint dumped before ledger rows named their goal (and children their
    in-flight count) loads as the run's own actions and children with nothing in flight."""
    f = StatusFolder()
    for e in stored(_fan_out(mirror_outcomes=True)[:5]):
        f.feed(orjson.loads(encode_event(e)))
    old = orjson.loads(orjson.dumps(f.dump()))
    old["actions"] = [a[:5] for a in old["actions"]]
    old["fanout"] = [c[:9] for c in old["fanout"]]
    p = StatusFolder.load(old).freeze()
    assert [(a.goal, a.call) for a in p.actions] == [("", 3), ("", 5)]
    assert [c.in_flight for c in p.fanout] == [0]


def test_a_childs_own_terminal_event_does_not_end_the_run() -> None:
    """A converged or stalled event whose goal names a child leaves the run live."""
    p = project(
        [ev(Kind.CHILD_SPAWNED, child="a"), ev(Kind.CONVERGED, goal="a", text="child answer")]
    )
    assert not p.terminal and p.result == ""


def test_record_state_moves_recording_sealed_verified() -> None:
    """record.sealed then record.verified move the badge forward."""
    p = reduce(new_projection(), ev(Kind.RECORD_SEALED))
    assert p.record == RecordState.SEALED
    p = reduce(p, ev(Kind.RECORD_VERIFIED, record={"ok": True}))
    assert p.record == RecordState.VERIFIED
    assert reduce(p, ev(Kind.RECORD_SEALED)).record == RecordState.VERIFIED


def test_a_verification_needs_a_seal_and_a_pass() -> None:
    """Verifying an unsealed record, or a failed verification, leaves the state unchanged."""
    assert project([ev(Kind.RECORD_VERIFIED)]).record == RecordState.RECORDING
    sealed = project([ev(Kind.RECORD_SEALED)])
    for bad in ({"ok": False}, {"outcome": "tampered"}):
        assert reduce(sealed, ev(Kind.RECORD_VERIFIED, record=bad)) == sealed
    assert reduce(sealed, ev(Kind.RECORD_VERIFIED, error="bad signature")) == sealed


def test_the_spines_verification_records_pass_only_when_verification_passed() -> None:
    """A sealed record moves to verified on the spine's passing record.verified and stays
    sealed on each failing one (tampered, forged, unsealed), on both fold paths."""
    passed, *failed = VERIFIED_RECORDS
    assert passed["ok"] is True and all(r["ok"] is False for r in failed)
    sealed = [ev(Kind.CHILD_SPAWNED, child="c"), ev(Kind.CHILD_COMPLETED, child="c")]
    sealed.append(ev(Kind.RECORD_SEALED))
    for record, state in [(passed, RecordState.VERIFIED)] + [
        (r, RecordState.SEALED) for r in failed
    ]:
        evs = stored([*sealed, ev(Kind.RECORD_VERIFIED, record=record)])
        p = project(evs)
        assert p.record == state and p.fanout[0].seal == state
        assert fold_rows(evs) == p


def test_a_failed_verification_then_a_pass_moves_the_badge_once_on_replay() -> None:
    """verify_stream records every run; replaying the stream shows sealed after the failed
    run and verified only after the passing one."""
    key = SigningKey.generate()
    log = MemoryLog()
    log.append("s", [ev(Kind.USER_MESSAGE, text="hi")])
    seal_stream(log, "s", key)
    failed = verify_stream(log, "s", SigningKey.generate().public_key)
    assert not failed.ok and failed.verified_seq == 3
    assert project(history(log, "s")).record == RecordState.SEALED
    passed = verify_stream(log, "s", key.public_key)
    assert passed.ok and passed.verified_seq == 4
    evs = history(log, "s")
    assert [project(evs[:n]).record for n in range(1, 5)] == [
        RecordState.RECORDING,
        RecordState.SEALED,
        RecordState.SEALED,
        RecordState.VERIFIED,
    ]
    assert fold_rows(evs) == project(evs)


def test_a_child_still_running_when_a_seal_lands_stays_recording() -> None:
    """Only finished children are sealed; a running one stays recording until a later seal."""
    p = project(
        [
            ev(Kind.CHILD_SPAWNED, child="done"),
            ev(Kind.CHILD_SPAWNED, child="running"),
            ev(Kind.CHILD_COMPLETED, child="done", result="r"),
            ev(Kind.RECORD_SEALED),
        ]
    )
    assert [c.seal for c in p.fanout] == [RecordState.SEALED, RecordState.RECORDING]
    p = reduce(p, ev(Kind.RECORD_VERIFIED))
    assert [c.seal for c in p.fanout] == [RecordState.VERIFIED, RecordState.RECORDING]
    p = reduce(p, ev(Kind.CHILD_COMPLETED, child="running", result="r"))
    p = reduce(p, ev(Kind.RECORD_SEALED))
    assert [c.seal for c in p.fanout] == [RecordState.VERIFIED, RecordState.SEALED]


def test_unknown_kinds_leave_the_projection_unchanged() -> None:
    """A kind with no rule (a newer writer's, or one the status ignores) changes nothing."""
    p = project([ev(Kind.SESSION_STARTED, text="o"), ev(Kind.ACTION_ADMITTED, call=1)])
    for kind in ("future.kind", Kind.ASSISTANT, Kind.TOOL_CALL, Kind.TURN_STARTED):
        assert reduce(p, ev(kind, text="x", call=1, host="h")) is p


# -- the session vocabulary -----------------------------------------------------------------


def test_a_user_message_counts_opens_the_objective_and_resumes_a_terminal_run() -> None:
    """user.message: counted; the first is the objective; new input makes the run live again."""
    p = project([ev(Kind.USER_MESSAGE, text="hi"), ev(Kind.CONVERGED, text="hello")])
    assert p.objective == "hi" and p.terminal
    p = reduce(p, ev(Kind.USER_MESSAGE, text="and then?"))
    assert (p.messages, p.objective, p.terminal, p.outcome, p.result) == (
        2,
        "hi",
        False,
        "",
        "hello",
    )


def test_a_cancelled_turn_keeps_its_usage_but_is_not_a_completed_turn() -> None:
    """turn.cancelled adds its usage (tokens were spent) and counts as cancelled."""
    u = Usage(input_tokens=9, output_tokens=1)
    p = project([ev(Kind.TURN_CANCELLED, usage=u, text="partial", reason="interrupt")])
    assert (p.turns, p.cancelled, p.usage) == (0, 1, u)


def test_lifecycle_records_the_phase_and_a_failure_is_terminal_until_reopened() -> None:
    """Lifecycle sets phase; failed ends the run with its error; opened revives a failed one."""
    p = project([ev(Kind.LIFECYCLE, phase=Phase.DONE)])
    assert p.phase == Phase.DONE and not p.terminal
    p = reduce(p, ev(Kind.LIFECYCLE, phase=Phase.FAILED, error="restart budget spent"))
    assert (p.terminal, p.outcome, p.error) == (True, Outcome.FAILED, "restart budget spent")
    p = reduce(p, ev(Kind.LIFECYCLE, phase=Phase.OPENED))
    assert (p.terminal, p.outcome, p.phase) == (False, "", Phase.OPENED)
    closed = reduce(p, ev(Kind.LIFECYCLE, phase=Phase.CLOSED))
    assert not closed.terminal and closed.phase == Phase.CLOSED


def test_properties_events_fold_into_the_metadata() -> None:
    """session.properties sets keys and deletes those mapped to None."""
    p = project(
        [
            ev(Kind.PROPERTIES, properties={MODEL_NAME: "m1", "x": "1"}),
            ev(Kind.PROPERTIES, properties={MODEL_NAME: "m2", "x": None}),
        ]
    )
    assert p.metadata == {MODEL_NAME: "m2"}


# -- properties -----------------------------------------------------------------------------


@SETTINGS
@given(event_lists, event_lists)
def test_projecting_a_concatenation_equals_folding_the_tail_over_the_head(
    a: list[Event], b: list[Event]
) -> None:
    """project(a + b) == reduce-fold of b over project(a)."""
    p = project(a)
    for e in b:
        p = reduce(p, e)
    assert project(a + b) == p
    assert project(b, start=project(a)) == p


@SETTINGS
@given(event_lists)
def test_a_live_fold_equals_a_fold_of_history(events: list[Event]) -> None:
    """Folding events as they are appended equals projecting history read back from the log."""
    log = MemoryLog()
    live = new_projection()
    for e in events:
        res = log.append("s", [e])
        for r in res.records:
            live = reduce(live, r.event())
    assert live == project(history(log, "s"))


@SETTINGS
@given(event_lists)
def test_the_dict_row_path_equals_the_event_path(events: list[Event]) -> None:
    """StatusFolder fed the stored JSON of any events freezes to exactly project(events)."""
    evs = stored(events)
    assert fold_rows(evs) == project(evs)


@SETTINGS
@given(event_lists, event_lists)
def test_the_dict_row_path_continues_from_a_thawed_or_loaded_projection(
    a: list[Event], b: list[Event]
) -> None:
    """thaw(project(a)) and load(dump()) continue exactly where the Event path would."""
    evs = stored(a + b)
    head, tail = evs[: len(a)], evs[len(a) :]
    assert fold_rows(tail, project(head)) == project(evs)
    f = StatusFolder()
    for e in head:
        f.feed(orjson.loads(encode_event(e)))
    g = StatusFolder.load(orjson.loads(orjson.dumps(f.dump())))
    for e in tail:
        g.feed(orjson.loads(encode_event(e)))
    assert g.freeze() == project(evs)


@SETTINGS
@given(event_lists)
def test_ledgers_never_exceed_their_bounds(events: list[Event]) -> None:
    """At every step the action and egress ledgers stay within MAX_ACTIONS and MAX_EGRESS."""
    p = new_projection()
    for e in events * 3:
        p = reduce(p, e)
        assert len(p.actions) <= MAX_ACTIONS
        assert len(p.egress) <= MAX_EGRESS


@SETTINGS
@given(event_lists)
def test_record_state_never_moves_backwards(events: list[Event]) -> None:
    """Neither the run's record state nor any child's seal state ever decreases."""
    p = new_projection()
    for e in events:
        q = reduce(p, e)
        assert record_rank(q.record) >= record_rank(p.record)
        before = {c.id: c.seal for c in p.fanout}
        for c in q.fanout:
            assert record_rank(c.seal) >= record_rank(before.get(c.id, RecordState.RECORDING))
            if c.state == FanoutState.RUNNING:
                assert c.seal == RecordState.RECORDING
        p = q


@SETTINGS
@given(st.lists(status_events(_unknown), max_size=10), event_lists)
def test_unknown_kinds_anywhere_change_nothing(noise: list[Event], events: list[Event]) -> None:
    """Interleaving events of unknown kinds does not change the projection."""
    mixed = [x for pair in zip(events, noise, strict=False) for x in pair] + events[len(noise) :]
    assert project(mixed) == project(events)


def test_projections_are_frozen_values() -> None:
    """A Projection cannot be mutated in place; evolving gives a new value."""
    p = new_projection()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        p.turns = 3  # type: ignore[misc]
    assert attrs.evolve(p, turns=1) != p


def test_times_do_not_affect_the_status() -> None:
    """The status is a function of event content, not of when events were stamped."""
    evs = [ev(Kind.USER_MESSAGE, text="a"), ev(Kind.TURN_COMPLETED)]
    timed = [attrs.evolve(e, time=T0 + timedelta(seconds=i)) for i, e in enumerate(evs)]
    assert project(evs) == project(timed)
