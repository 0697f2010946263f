"""A human giving an in-doubt call's result by hand, as decision tables (no processes):
what is stored, what the turn does next, and what is refused."""

from __future__ import annotations

import json

import attrs
import pytest

from actors.agents.governance import Requirement
from actors.session.rules import commands as c
from actors.testing import Outcome, SessionKit
from spine import Event, Kind

GATED = Requirement(approval=True)
FREE = Requirement()


def _govern(kit: SessionKit, tool: str, use_id: str, need: Requirement = FREE) -> Outcome:
    turn = kit.state.running.turn  # type: ignore[union-attr]
    return kit.run(c.Govern(turn=turn, action=tool, tool_use_id=use_id, input="{}", need=need))


def _call(kit: SessionKit, tool: str, use_id: str) -> None:
    kit.progress(events=[Event(kind=Kind.TOOL_CALL, tool=tool, tool_use_id=use_id, input="{}")])


def _in_doubt(kit: SessionKit, *gated: str) -> tuple[int, int]:
    """A call started, then the session restarted: (the call, the question about it)."""
    kit.send("go")
    _call(kit, "append", "t1")
    call = int(_govern(kit, "append", "t1").events[0].call)
    for use_id in gated:
        _call(kit, "deploy", use_id)
        _govern(kit, "deploy", use_id, GATED)
    ask = next(e for e in kit.restart().events if e.extra and e.extra.get("inDoubt") == call)
    return call, ask.call


def _resolve(kit: SessionKit, call: int, result: str = "it ran: 3 lines", **kw: object) -> Outcome:
    return kit.run(
        c.Decide(
            request_id="r",
            key=str(kw.pop("key", "k")),
            call=call,
            approve=False,
            result=result,
            **kw,
        )  # type: ignore[arg-type]
    )


def test_a_result_given_by_hand_is_stored_as_the_calls_and_the_turn_runs_on() -> None:
    """The question is closed (approval not allowed, completed), the human's text is the
    call's tool.result, the paused turn resumes; the call is never run again."""
    kit = SessionKit()
    call, ask = _in_doubt(kit)
    out = _resolve(kit, ask, note="I checked the file", is_error=False)
    assert out.kinds == [Kind.ACTION_APPROVAL, Kind.ACTION_COMPLETED, Kind.TOOL_RESULT]
    approval, done, result = out.events
    assert (approval.call, approval.allowed, approval.reason) == (ask, False, "I checked the file")
    assert approval.extra["resolution"] == "result" == done.extra["resolution"]
    assert done.call == ask and done.extra["idempotencyKey"] == f"s1/1/{call}"
    assert (result.tool_use_id, result.result, result.is_error) == ("t1", "it ran: 3 lines", False)
    assert out.reply.seq == out.events[-1].seq
    (start,) = [e for e in out.effects if isinstance(e, c.StartTurn)]
    assert start.input.resume and start.turn == 1
    # The resumed turn starts from the log with the result in it: it asks nothing again.
    told = [json.loads(b) for r, b, *_ in start.input.history if r == "tool.result"]
    assert told == [{"id": "t1", "name": "append", "result": "it ran: 3 lines", "isError": False}]
    assert not kit.state.stored.pending_actions
    asked = _govern(kit, "append", "t1")
    assert not asked.events and asked.effects[0].verdict == "reject"


@pytest.mark.parametrize(
    ("which", "kw", "problem"),
    [
        ("own", {}, "no action"),  # the in-doubt call itself asks nothing
        ("gated", {}, "not in doubt"),  # an approval's call never ran: no outcome to tell
        ("ask", {"approve": True}, "neither approves"),
        ("ask", {"raise_by": 1.0}, "neither approves"),
        ("unknown", {}, "no action"),
    ],
)
def test_a_result_by_hand_is_refused_where_there_is_no_doubt_to_settle(
    which: str, kw: dict[str, object], problem: str
) -> None:
    kit = SessionKit()
    call, ask = _in_doubt(kit, "g1")
    gated = next(iter(p for p in kit.state.stored.pending_actions.values() if not p.key)).call
    target = {"own": call, "gated": gated, "ask": ask, "unknown": 999}[which]
    d = c.Decide(request_id="r", key="k", call=target, result="x", approve=False)
    out = kit.run(attrs.evolve(d, **kw))
    assert out.error == "InvalidRequest" and problem in out.reply.message and not out.events


def test_a_decided_question_takes_no_result_and_a_result_no_second_verdict() -> None:
    kit = SessionKit()
    _, ask = _in_doubt(kit)
    kit.run(c.Decide(request_id="r1", key="k1", call=ask, approve=False))
    late = _resolve(kit, ask, key="k2")
    assert late.error == "InvalidRequest" and "already" in late.reply.message
    kit2 = SessionKit()
    _, ask2 = _in_doubt(kit2)
    _resolve(kit2, ask2)
    for approve in (True, False):
        out = kit2.run(c.Decide(request_id="r3", key=f"k3{approve}", call=ask2, approve=approve))
        assert not out.events


def test_a_worker_waiting_on_the_call_gets_the_result_without_storing_it_twice() -> None:
    """A turn resumed by an approval of a sibling, its worker waiting on the in-doubt
    call's question: the result goes to the worker with the verdict (fault resolved);
    no second turn starts."""
    kit = SessionKit()
    _, ask = _in_doubt(kit, "g1")
    gated = next(p.call for p in kit.state.stored.pending_actions.values() if not p.key)
    kit.run(c.Decide(request_id="r1", key="k1", call=gated, approve=True))
    assert kit.state.running is not None
    waiting = _govern(kit, "append", "t1")
    assert not waiting.events and not waiting.effects  # still waiting for a human
    out = _resolve(kit, ask, is_error=True)
    (answer,) = out.effects
    assert isinstance(answer, c.AnswerWorker)
    assert (answer.verdict, answer.fault, answer.result, answer.is_error) == (
        "reject",
        "resolved",
        "it ran: 3 lines",
        True,
    )
    assert [e.kind for e in out.events].count(Kind.TOOL_RESULT) == 1
