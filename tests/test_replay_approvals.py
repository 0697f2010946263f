"""A replay serves the human decisions its parent's calls got (pure tables): the decisions
read from the parent's turn, the gate deciding an equal call as the human did then (and
only under the operator's replay metadata), and a session unable to claim it is a replay."""

from __future__ import annotations

import pytest

from actors.agents.governance import Requirement
from actors.agents.replayed import Decisions
from actors.authority import Authority
from actors.session.rules import commands as c
from actors.session.rules.replaying import recorded_approvals
from actors.testing import Outcome, SessionKit
from spine import Event, Kind

GATED = Requirement(approval=True)
DEPLOY_A = '{"target": "a"}'


def _ask(kit: SessionKit, use_id: str, args: str, recorded: tuple[bool, str] | None) -> Outcome:
    turn = kit.state.running.turn  # type: ignore[union-attr]
    kit.progress(events=[Event(kind=Kind.TOOL_CALL, tool="deploy", tool_use_id=use_id, input=args)])
    ask = c.Govern(
        turn=turn, action="deploy", tool_use_id=use_id, input=args, need=GATED, recorded=recorded
    )
    return kit.run(ask)


def _parent() -> tuple[SessionKit, int]:
    """A turn with three calls that waited: approved with a note, rejected, and one still
    waiting when the turn ended; and a budget pause, which no human decided as a call."""
    kit = SessionKit()
    seq = kit.send("go").reply.seq
    decided = []
    for use_id, args, ok in (("d1", DEPLOY_A, True), ("d2", '{"target": "b"}', False)):
        call = _ask(kit, use_id, args, None).events[0].call
        kit.run(c.Decide(request_id=use_id, key=use_id, call=call, approve=ok, note=f"n-{use_id}"))
        decided.append(call)
    _ask(kit, "d3", '{"target": "c"}', None)
    kit.finish(text="done")
    return kit, seq


def test_the_decisions_a_turn_got_are_read_in_order_and_only_those_a_human_gave() -> None:
    kit, seq = _parent()
    assert recorded_approvals(kit.events, seq) == (
        ("deploy", DEPLOY_A, True, "n-d1"),
        ("deploy", '{"target": "b"}', False, "n-d2"),
    )
    assert recorded_approvals(kit.events, 9999) == ()
    assert recorded_approvals(kit.events, seq + 1) == ()  # the pending event opens no turn


def _replay(md: dict[str, str] | None = None) -> SessionKit:
    kit = SessionKit()
    kit.set_metadata(md if md is not None else {"replay.of": "parent", "replay.turn": "2"})
    kit.send("go")
    return kit


@pytest.mark.parametrize(
    ("recorded", "kinds", "verdict", "fault"),
    [
        (
            (True, "ok"),
            [Kind.ACTION_PENDING, Kind.ACTION_APPROVAL, Kind.ACTION_ADMITTED, Kind.ACTION_STARTED],
            "admit",
            "",
        ),
        (
            (False, "no"),
            [Kind.ACTION_PENDING, Kind.ACTION_APPROVAL, Kind.ACTION_REJECTED],
            "reject",
            "approval_rejected",
        ),
    ],
)
def test_a_replay_decides_an_equal_call_as_the_human_did_then(
    recorded: tuple[bool, str], kinds: list[str], verdict: str, fault: str
) -> None:
    """One append holds what a live approval stores, the decision marked as served; the
    worker is answered at once and nothing waits for a human."""
    kit = _replay()
    out = _ask(kit, "d1", DEPLOY_A, recorded)
    assert out.kinds == kinds
    call = out.events[0].call
    assert {e.call for e in out.events} == {call}
    said = out.events[1]
    assert (said.allowed, said.reason, said.extra["replayed"]) == (recorded[0], recorded[1], True)
    (answer,) = [e for e in out.effects if isinstance(e, c.AnswerWorker)]
    assert (answer.verdict, answer.fault, answer.call) == (verdict, fault, call)
    assert bool(answer.key) == recorded[0]
    if recorded[0]:
        assert out.events[-1].extra["idempotencyKey"] == answer.key
    st = kit.state.stored
    assert not st.pending_actions and st.decided[call] is recorded[0]


@pytest.mark.parametrize(
    ("md", "recorded"),
    [
        (None, None),  # a replay, but the parent's call was never decided by a human
        ({}, (True, "ok")),  # a claim outside a replay is not heeded
        ({"replay.of": "parent"}, (True, "ok")),  # no turn replayed now
    ],
)
def test_without_a_recorded_decision_or_outside_a_replay_the_call_waits_for_a_human(
    md: dict[str, str] | None, recorded: tuple[bool, str] | None
) -> None:
    kit = _replay(md)
    out = _ask(kit, "d1", DEPLOY_A, recorded)
    assert out.kinds == [Kind.ACTION_PENDING] and not out.effects
    assert list(kit.state.stored.pending_actions) == [out.events[0].call]


def test_only_the_operator_makes_a_session_a_replay() -> None:
    """``replay.*`` names another session whose stored results and decisions the turn
    serves: a session's own write of it is refused and stores nothing."""
    kit = SessionKit()
    out = kit.set_metadata(
        {"replay.of": "someone-else", "replay.turn": "2"}, authority=Authority.SESSION
    )
    assert out.reply.error == "NotAuthorized" and "replay." in out.reply.message
    assert not out.events and "replay.of" not in kit.state.stored.metadata


@pytest.mark.parametrize(
    ("asked", "want"),
    [
        # In order among equals, each once; equal JSON values match however spelled.
        (
            [("deploy", '{"target":"a"}'), ("deploy", DEPLOY_A), ("deploy", DEPLOY_A)],
            [(True, "first"), (False, "second"), None],
        ),
        ([("deploy", '{"target": "z"}')], [None]),
        ([("other", DEPLOY_A)], [None]),
    ],
)
def test_each_recorded_decision_serves_one_equal_call(
    asked: list[tuple[str, str]], want: list[tuple[bool, str] | None]
) -> None:
    d = Decisions([("deploy", DEPLOY_A, True, "first"), ("deploy", DEPLOY_A, False, "second")])
    assert [d.take(tool, args) for tool, args in asked] == want
