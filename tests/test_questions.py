"""A server's question during a running call (MCP elicitation) as decision tables (no
processes): always pending, answered with content checked against its schema, declined,
withdrawn by an interrupt, and dead with its call after a crash (the call in doubt)."""

from __future__ import annotations

from typing import Any

import pytest

from actors.agents.governance import Requirement
from actors.session.rules import commands as c
from actors.testing import Outcome, SessionKit
from projections import project
from spine import Event, Kind

SCHEMA = {
    "type": "object",
    "properties": {"color": {"type": "string"}, "sizes": {"type": "array"}},
    "required": ["color"],
}
QUESTION = {
    "server": "notes",
    "tool": "pick",
    "mode": "form",
    "message": "Which color?",
    "requestedSchema": SCHEMA,
}


def _running(kit: SessionKit, md: dict[str, str] | None = None) -> int:
    """A turn whose MCP call ``t1`` is admitted and started; the call's id."""
    if md:
        kit.set_metadata(md)
    kit.send("go")
    kit.progress(events=[Event(kind=Kind.TOOL_CALL, tool="notes.pick", tool_use_id="t1")])
    out = kit.run(c.Govern(turn=1, action="notes.pick", tool_use_id="t1", input="{}"))
    assert out.kinds == [Kind.ACTION_ADMITTED, Kind.ACTION_STARTED]
    return int(out.events[0].call)


def _ask(kit: SessionKit, question: dict[str, Any] = QUESTION) -> Event:
    out = kit.run(c.Govern(turn=1, action="elicitation", tool_use_id="t1", question=question))
    (ev,) = out.events
    assert not out.effects  # the worker waits for a human
    return ev


def _decide(kit: SessionKit, call: int, approve: bool, content: Any = None) -> Outcome:
    return kit.run(c.Decide(request_id="r", key="k", call=call, approve=approve, content=content))


@pytest.mark.parametrize(
    "md", [{}, {"governance.approvals": "off"}, {"governance.max_tool_calls": "1"}]
)
def test_a_question_waits_for_a_human_whatever_the_policy(md: dict[str, str]) -> None:
    kit = SessionKit()
    _running(kit, md)
    ev = _ask(kit)
    assert (ev.kind, ev.action, ev.tool, ev.tool_use_id) == (
        Kind.ACTION_PENDING,
        "elicitation",
        "pick",
        "t1",
    )
    assert ev.extra["elicitation"] == QUESTION and "Which color?" in ev.input
    assert kit.state.stored.pending_actions[ev.call].question == QUESTION


def test_an_accepted_answer_is_stored_and_handed_to_the_worker_once() -> None:
    kit = SessionKit()
    call = _running(kit)
    ask = _ask(kit)
    out = _decide(kit, ask.call, True, {"color": "red", "sizes": ["s"]})
    assert out.kinds == [Kind.ACTION_APPROVAL]  # settled by the decision: it ran nothing
    answer = {"action": "accept", "content": {"color": "red", "sizes": ["s"]}}
    assert out.events[0].extra["elicitation"] == answer
    (eff,) = out.effects
    assert isinstance(eff, c.AnswerWorker)
    assert (eff.action, eff.tool_use_id, eff.answer) == ("elicitation", "t1", answer)
    assert ask.call not in kit.state.stored.pending_actions
    assert not project(kit.events).pending
    # No intent and no key: the answer is not an effect; the call's own intent stands.
    assert set(kit.state.stored.intents) == {call}
    again = _decide(kit, ask.call, True, {"color": "red"})
    assert again.reply.duplicate and not again.events  # type: ignore[union-attr]


def test_a_declined_question_tells_the_worker_decline() -> None:
    kit = SessionKit()
    _running(kit)
    ask = _ask(kit)
    out = _decide(kit, ask.call, False)
    assert out.kinds == [Kind.ACTION_APPROVAL, Kind.ACTION_REJECTED]
    assert out.events[1].fault == "approval_rejected"
    (eff,) = out.effects
    assert eff.answer == {"action": "decline"}  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "needs its content"),
        ({}, "lacks 'color'"),
        ({"color": "red", "shade": "dark"}, "names 'shade'"),
        ({"color": {"r": 1}}, "string, number, boolean or list of strings"),
        ({"color": "red", "sizes": [1, 2]}, "string, number, boolean or list of strings"),
    ],
)
def test_an_answer_that_does_not_fit_the_question_is_refused_and_nothing_stored(
    content: Any, says: str
) -> None:
    kit = SessionKit()
    _running(kit)
    ask = _ask(kit)
    before = len(kit.events)
    out = _decide(kit, ask.call, True, content)
    assert out.error == "InvalidRequest" and says in out.reply.message  # type: ignore[union-attr]
    assert len(kit.events) == before and ask.call in kit.state.stored.pending_actions


def test_a_url_question_is_accepted_without_content() -> None:
    kit = SessionKit()
    _running(kit)
    url = {"server": "notes", "tool": "pick", "mode": "url", "message": "Sign in", "url": "x"}
    ask = _ask(kit, url)
    assert _decide(kit, ask.call, True, {"a": 1}).error == "InvalidRequest"
    out = _decide(kit, ask.call, True)
    assert out.effects[0].answer == {"action": "accept", "content": {}}  # type: ignore[union-attr]


def test_content_on_an_approval_is_refused() -> None:
    kit = SessionKit()
    kit.send("go")
    gated = Requirement(approval=True)
    out = kit.run(c.Govern(turn=1, action="deploy", tool_use_id="g", input="{}", need=gated))
    call = out.events[0].call
    refused = _decide(kit, call, True, {"color": "red"})
    assert refused.error == "InvalidRequest" and "takes no content" in refused.reply.message  # type: ignore[union-attr]


def test_an_interrupt_withdraws_the_question() -> None:
    kit = SessionKit()
    _running(kit)
    ask = _ask(kit)
    out = kit.interrupt()
    (gone,) = [e for e in out.events if e.kind == Kind.ACTION_REJECTED and e.call == ask.call]
    assert gone.fault == "cancelled"
    assert not kit.state.stored.pending_actions


@pytest.mark.parametrize(
    ("md", "resolution"), [({"governance.in_doubt": "fail"}, "fail"), ({}, "ask")]
)
def test_a_crash_while_a_question_waits_withdraws_it_and_the_call_is_in_doubt(
    md: dict[str, str], resolution: str
) -> None:
    """Nobody waits for the answer any more: the question is withdrawn, the call that
    asked it is in doubt by the effect ledger's rules, never sent again silently."""
    kit = SessionKit()
    call = _running(kit, md)
    ask = _ask(kit)
    out = kit.restart()
    withdrawn = [e for e in out.events if e.kind == Kind.ACTION_REJECTED and e.call == ask.call]
    assert [(e.fault, e.reason) for e in withdrawn] == [("cancelled", "crash")]
    (doubt,) = [e for e in out.events if e.kind == Kind.ACTION_IN_DOUBT]
    assert (doubt.call, doubt.extra["resolution"]) == (call, resolution)
    assert not [e for e in out.effects if isinstance(e, c.StartTurn)]
    pending = kit.state.stored.pending_actions
    assert all(p.question is None for p in pending.values())
    if resolution == "fail":
        assert Kind.TURN_CANCELLED in out.kinds and not pending
    else:  # one human question: about the call in doubt
        (p,) = pending.values()
        assert p.key == f"s1/1/{call}"
    late = _decide(kit, ask.call, True, {"color": "red"})
    assert late.error == "InvalidRequest" and not late.events


def test_a_question_whose_call_ended_is_withdrawn_with_it() -> None:
    """The call timed out or its server died while the human had not answered: its
    result is stored, and the question goes with it; a late answer finds nothing."""
    kit = SessionKit()
    call = _running(kit)
    ask = _ask(kit)
    result = Event(kind=Kind.TOOL_RESULT, tool="notes.pick", tool_use_id="t1", result="x")
    ended = Event(kind=Kind.ACTION_COMPLETED, call=call, action="notes.pick", tool_use_id="t1")
    out = kit.progress(events=[ended, result])
    gone = [e for e in out.events if e.kind == Kind.ACTION_REJECTED]
    assert [(e.call, e.fault, e.reason) for e in gone] == [(ask.call, "cancelled", "call ended")]
    assert not kit.state.stored.pending_actions and not project(kit.events).pending
    assert _decide(kit, ask.call, True, {"color": "red"}).error == "InvalidRequest"
