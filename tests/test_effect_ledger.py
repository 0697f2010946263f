"""The effect ledger's decisions as tables (no processes): intents, calls in doubt after a
restart, idempotent re-runs under the same key, approvals bound to one call, and the turn
budget held before a resumed tool runs."""

from __future__ import annotations

import attrs
import pytest

from actors.agents.governance import Requirement
from actors.session.rules import commands as c
from actors.testing import Outcome, SessionKit
from projections import project
from spine import Event, Kind

FREE = Requirement()
ONCE_IDEMPOTENT = Requirement(idempotent=True)
GATED = Requirement(approval=True)


def _govern(
    kit: SessionKit, tool: str, use_id: str, need: Requirement = FREE, args: str = "{}"
) -> Outcome:
    turn = kit.state.running.turn  # type: ignore[union-attr]
    return kit.run(c.Govern(turn=turn, action=tool, tool_use_id=use_id, input=args, need=need))


def _call(kit: SessionKit, tool: str, use_id: str, args: str = "{}") -> None:
    """The worker stores the model's tool call (as the loop does before asking the gate)."""
    kit.progress(events=[Event(kind=Kind.TOOL_CALL, tool=tool, tool_use_id=use_id, input=args)])


def _done(kit: SessionKit, call: int, tool: str, use_id: str, result: str = "ok") -> Outcome:
    """The call ended: its outcome and result, stored as it ends."""
    return kit.progress(
        events=[
            Event(
                kind=Kind.ACTION_COMPLETED, call=call, action=tool, tool=tool, tool_use_id=use_id
            ),
            Event(kind=Kind.TOOL_RESULT, tool=tool, tool_use_id=use_id, result=result),
        ]
    )


def _started(kit: SessionKit, md: dict[str, str] | None = None, need: Requirement = FREE) -> int:
    if md:
        kit.set_metadata(md)
    kit.send("go")
    _call(kit, "append", "t1")
    out = _govern(kit, "append", "t1", need)
    assert out.kinds == [Kind.ACTION_ADMITTED, Kind.ACTION_STARTED]
    return int(out.events[0].call)


def _of(out: Outcome, kind: str) -> list[Event]:
    return [e for e in out.events if e.kind == kind]


def _starts(out: Outcome) -> list[c.StartTurn]:
    return [e for e in out.effects if isinstance(e, c.StartTurn)]


@pytest.mark.parametrize(
    ("md", "need", "resolution", "open_after"),
    [
        ({"governance.in_doubt": "fail"}, FREE, "fail", False),
        ({"governance.approvals": "off"}, FREE, "fail", False),
        ({}, FREE, "ask", True),
        ({"governance.in_doubt": "ask"}, FREE, "ask", True),
        ({"governance.in_doubt": "fail"}, ONCE_IDEMPOTENT, "retry", True),
        ({}, ONCE_IDEMPOTENT, "retry", True),
    ],
)
def test_a_started_call_cut_by_a_crash_is_in_doubt_and_resolved_by_declaration_and_policy(
    md: dict[str, str], need: Requirement, resolution: str, open_after: bool
) -> None:
    """Intent stored, no outcome, restart: action.in_doubt with the resolution the tool's
    declaration (idempotent: retry) or governance.in_doubt (ask where approvals are on,
    else fail) gives; never a silent second admission."""
    kit = SessionKit()
    call = _started(kit, md, need)
    out = kit.restart()
    (doubt,) = _of(out, Kind.ACTION_IN_DOUBT)
    assert (doubt.call, doubt.reason, doubt.extra["resolution"]) == (call, "crash", resolution)
    assert doubt.extra["idempotencyKey"] == f"s1/1/{call}"
    assert not _of(out, Kind.ACTION_ADMITTED) and not _of(out, Kind.ACTION_STARTED)
    assert (kit.state.stored.open_turn is not None) == open_after
    if resolution == "fail":
        (told,) = _of(out, Kind.TOOL_RESULT)
        assert told.is_error and "outcome unknown" in told.result and told.tool_use_id == "t1"
        assert Kind.TURN_CANCELLED in out.kinds
    if resolution == "retry":
        # The turn runs on where it stopped, in this very decision: the same turn.
        (start,) = _starts(out)
        assert start.turn == 1 and start.input.resume
    if resolution == "ask":
        (ask,) = _of(out, Kind.ACTION_PENDING)
        assert (ask.call, ask.extra["inDoubt"], ask.reason) == (ask.seq, call, "in_doubt")
        assert not _starts(out)
    assert call not in [e.call for e in _of(out, Kind.ACTION_COMPLETED)]
    again = kit.restart()
    assert not _of(again, Kind.ACTION_IN_DOUBT)  # recovery records a call in doubt once


def test_an_idempotent_call_in_doubt_runs_again_once_under_the_same_key() -> None:
    """Retry: the resumed worker's question is answered admit with the same call and key,
    storing only a second intent; a third question is refused (in doubt), not run."""
    kit = SessionKit()
    call = _started(kit, need=ONCE_IDEMPOTENT)
    kit.restart()
    asked = _govern(kit, "append", "t1", ONCE_IDEMPOTENT)
    (intent,) = asked.events
    assert (intent.kind, intent.call) == (Kind.ACTION_STARTED, call)
    (ans,) = asked.effects
    assert (ans.verdict, ans.call, ans.key) == ("admit", call, f"s1/1/{call}")
    twice = _govern(kit, "append", "t1", ONCE_IDEMPOTENT)
    assert not twice.events and (twice.effects[0].verdict, twice.effects[0].fault) == (
        "reject",
        "in_doubt",
    )
    _done(kit, call, "append", "t1")
    out = kit.finish()
    assert Kind.TURN_COMPLETED in out.kinds
    states = {a.call: str(a.state) for a in project(kit.events).actions}
    assert states[call] == "done"


def test_a_human_decides_a_call_in_doubt_approved_it_runs_once_under_its_key() -> None:
    """Ask: the question is an action.pending of its own call; approving it resumes the
    turn, the worker's question runs it once under the in-doubt call's key; the in-doubt
    call itself can never be approved."""
    kit = SessionKit()
    call = _started(kit)
    ask = _of(kit.restart(), Kind.ACTION_PENDING)[0]
    own = kit.run(c.Decide(request_id="r0", key="k0", call=call, approve=True))
    assert own.error == "InvalidRequest" and not own.events
    out = kit.run(c.Decide(request_id="r1", key="k1", call=ask.call, approve=True))
    assert [e.kind for e in out.events] == [Kind.ACTION_APPROVAL, Kind.ACTION_ADMITTED]
    assert _starts(out)[0].input.resume
    asked = _govern(kit, "append", "t1")
    assert asked.kinds == [Kind.ACTION_STARTED]
    assert asked.effects[0].key == f"s1/1/{call}" and asked.effects[0].call == ask.call
    again = _govern(kit, "append", "t1")
    assert again.effects[0].verdict == "reject" and not again.events


def test_a_human_rejects_a_call_in_doubt_and_the_model_hears_it() -> None:
    kit = SessionKit()
    _started(kit)
    ask = _of(kit.restart(), Kind.ACTION_PENDING)[0]
    kit.run(c.Decide(request_id="r1", key="k1", call=ask.call, approve=False))
    asked = _govern(kit, "append", "t1")
    assert not asked.events
    assert (asked.effects[0].verdict, asked.effects[0].fault) == ("reject", "approval_rejected")


def test_a_free_call_beside_a_gated_one_never_runs_twice_after_restart_and_approval() -> None:
    """A response with a free and a gated call: the free one ran and its result is stored
    at once; restart; the approval resumes the turn; the gated call runs once, and a
    question about the free call (a log from before, without its result) is refused."""
    kit = SessionKit()
    kit.send("go")
    _call(kit, "append", "free")
    _call(kit, "deploy", "gated")
    free = _govern(kit, "append", "free").events[0].call
    pending = _govern(kit, "deploy", "gated", GATED).events[0].call
    _done(kit, free, "append", "free")
    kit.restart()
    out = kit.run(c.Decide(request_id="r1", key="k1", call=pending, approve=True))
    assert _starts(out)
    free_again = _govern(kit, "append", "free")
    assert free_again.effects[0].verdict == "reject" and not free_again.events
    gated = _govern(kit, "deploy", "gated", GATED)
    assert gated.kinds == [Kind.ACTION_STARTED] and gated.effects[0].verdict == "admit"
    admitted = [e for e in kit.events if e.kind == Kind.ACTION_ADMITTED and e.action != "model"]
    started = [e.call for e in kit.events if e.kind == Kind.ACTION_STARTED]
    assert [e.call for e in admitted] == [free, pending] and started == [free, pending]


def test_an_approval_admits_its_own_call_with_its_own_arguments_only() -> None:
    """Bound to the call and its arguments: a sibling is judged on its own (it waits for
    its own approval), the same call with other arguments is refused."""
    kit = SessionKit()
    kit.send("go")
    p = _govern(kit, "deploy", "d1", GATED, '{"to": "staging"}').events[0].call
    kit.restart()
    kit.run(c.Decide(request_id="r1", key="k1", call=p, approve=True))
    sibling = _govern(kit, "deploy", "d2", GATED, '{"to": "staging"}')
    assert sibling.kinds == [Kind.ACTION_PENDING]
    other = _govern(kit, "deploy", "d1", GATED, '{"to": "prod"}')
    assert (other.effects[0].verdict, other.effects[0].fault) == ("reject", "approval_mismatch")
    assert not other.events


def test_an_approved_call_not_yet_run_when_a_crash_hit_runs_once_after_recovery() -> None:
    """Approved while the turn waited, cut before the worker asked: the next incarnation
    runs the turn on (no turn.cancelled), and the call runs once."""
    kit = SessionKit()
    kit.send("go")
    p = _govern(kit, "deploy", "d1", GATED).events[0].call
    kit.restart()
    kit.run(c.Decide(request_id="r1", key="k1", call=p, approve=True))
    out = kit.restart()
    assert Kind.TURN_CANCELLED not in out.kinds and not _of(out, Kind.ACTION_IN_DOUBT)
    assert _starts(out) and _starts(out)[0].turn == 1
    asked = _govern(kit, "deploy", "d1", GATED)
    assert asked.kinds == [Kind.ACTION_STARTED] and asked.effects[0].verdict == "admit"
    assert _govern(kit, "deploy", "d1", GATED).effects[0].verdict == "reject"


def test_a_log_from_before_the_ledger_folds_as_it_always_did() -> None:
    """An admission without a key or an intent (stored before this ledger): a crash closes
    it with action.completed fault crash and cancels the turn, as before."""
    kit = SessionKit()
    kit.send("go")
    old = Event(kind=Kind.ACTION_ADMITTED, turn=1, action="calculator", call=5, tool="calculator")
    kit.log.append("s1", [old], expected_seq=kit.log.last_seq("s1"))
    out = kit.restart()
    ends = [(e.call, e.fault) for e in _of(out, Kind.ACTION_COMPLETED)]
    assert (5, "crash") in ends and Kind.TURN_CANCELLED in out.kinds
    assert not _of(out, Kind.ACTION_IN_DOUBT)


def _goal(kit: SessionKit, **budget: int) -> Outcome:
    return kit.run(c.Submit(request_id="rs", key="goal", objective="do it", budget=budget))


def test_a_resumed_turn_past_max_turns_runs_no_tool() -> None:
    """Goal run with max_turns 1: turn 1 stored a tool call and was cut before asking the
    gate; turn 2 resumes and its first question, about that call, is refused by the budget
    before anything runs."""
    kit = SessionKit()
    _goal(kit, max_turns=1)
    kit.run(c.Govern(turn=1, action="model"))  # the turn's model call
    _call(kit, "append", "t1")
    out = kit.restart()
    assert Kind.TURN_CANCELLED in out.kinds
    (start,) = _starts(out)
    assert start.turn == 2 and start.input.resume
    asked = _govern(kit, "append", "t1")
    assert asked.kinds[0] == Kind.ACTION_REJECTED
    assert asked.events[0].fault == "budget_exceeded" and asked.effects[0].verdict == "reject"
    assert not [e for e in kit.events if e.kind == Kind.ACTION_STARTED]


def test_an_interrupt_while_a_tool_runs_leaves_it_in_doubt() -> None:
    kit = SessionKit()
    call = _started(kit)
    out = kit.interrupt()
    (doubt,) = _of(out, Kind.ACTION_IN_DOUBT)
    assert (doubt.call, doubt.reason, doubt.extra["resolution"]) == (call, "cancelled", "fail")


def test_an_approved_call_is_held_to_the_budgets_when_it_is_about_to_run() -> None:
    """Approved after the goal's wall time ran out: when the resumed worker asks, the call
    ends refused (budget_exceeded), its approval used up; nothing runs."""
    kit = SessionKit()
    kit.run(
        c.Submit(request_id="rs", key="g", objective="x", budget={"max_seconds": 10}, now=1000.0)
    )
    kit.run(c.Govern(turn=1, action="model", now=1001.0))
    turn = kit.state.running.turn  # type: ignore[union-attr]
    ask = c.Govern(turn=turn, action="deploy", tool_use_id="d1", input="{}", need=GATED, now=1002.0)
    p = kit.run(ask).events[0].call
    kit.restart()
    kit.run(c.Decide(request_id="r1", key="k1", call=p, approve=True))
    late = kit.run(attrs.evolve(ask, now=2000.0))
    assert late.kinds == [Kind.ACTION_REJECTED] and late.events[0].fault == "budget_exceeded"
    assert late.effects[0].verdict == "reject"
    assert not [e for e in kit.events if e.kind == Kind.ACTION_STARTED]


def test_both_status_folds_show_a_call_in_doubt_and_a_spawn_run_on() -> None:
    """The event fold and the row fold agree: a call in doubt is state in_doubt (a child's
    too, settling its node's in-flight count); an intent alone changes nothing."""
    from test_projections_status import fold_rows, stored

    from projections import ActionState

    evs = stored(
        [
            Event(kind=Kind.SESSION_STARTED, goal="p", text="plan"),
            Event(kind=Kind.ACTION_ADMITTED, call=3, action="append", trust="standard"),
            Event(kind=Kind.ACTION_STARTED, call=3, action="append"),
            Event(kind=Kind.ACTION_IN_DOUBT, call=3, action="append", reason="crash"),
            Event(kind=Kind.CHILD_SPAWNED, goal="p", child="k", text="sub"),
            Event(kind=Kind.ACTION_ADMITTED, goal="k", call=4, action="append"),
            Event(kind=Kind.ACTION_IN_DOUBT, goal="k", call=4, action="append"),
        ]
    )
    p = project(evs)
    assert fold_rows(evs) == p
    assert [(a.goal, a.call, a.state) for a in p.actions] == [
        ("", 3, ActionState.IN_DOUBT),
        ("k", 4, ActionState.IN_DOUBT),
    ]
    assert [c.in_flight for c in p.fanout] == [0]
