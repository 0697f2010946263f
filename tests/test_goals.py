"""Goal runs as decision tables: submit opens a run, the session drives its own turns,
and the run converges with the answer or stalls with the reason (budgets through the
governance gate, repeated failures, an interrupt, a close); a restart continues it."""

from __future__ import annotations

import pytest

from actors import messages as m
from actors.session.rules import commands as c
from actors.session.shell.warmup import warm_up
from actors.testing import Outcome, SessionKit
from projections import project
from spine import Event, Kind, Usage


def _submit(kit: SessionKit, objective: str = "find x", now: float = 0.0, **budget: int) -> Outcome:
    return kit.run(
        c.Submit(
            request_id="rs", key=f"goal-{objective}", objective=objective, budget=budget, now=now
        )
    )


def _starts(out: Outcome) -> list[c.StartTurn]:
    return [e for e in out.effects if isinstance(e, c.StartTurn)]


def _model(kit: SessionKit, now: float = 0.0) -> Outcome:
    run = kit.state.running
    assert run is not None
    return kit.run(c.Govern(turn=run.turn, action="model", now=now))


def test_submit_opens_a_run_and_starts_its_first_turn_on_the_objective() -> None:
    """session.started (goal = the session, objective as text, budget kept) and the
    objective as a user message are stored with the Ack; the first turn starts on it."""
    kit = SessionKit()
    kit.create()
    out = _submit(kit, "find x", max_turns=3)
    assert out.kinds[:3] == [Kind.SESSION_STARTED, Kind.USER_MESSAGE, Kind.TURN_STARTED]
    started = out.events[0]
    assert (started.goal, started.text, dict(started.extra["budget"])) == (
        "s1",
        "find x",
        {"max_turns": 3},
    )
    (start,) = _starts(out)
    assert start.input.text == "find x" and not start.input.resume
    assert out.reply.seq == out.events[1].seq


def test_a_turn_that_ends_with_an_answer_converges_the_run() -> None:
    """end_turn: session.converged with the turn's answer; no further turn starts."""
    kit = SessionKit()
    kit.create()
    _submit(kit)
    out = kit.finish(text="x is 4")
    assert out.kinds[-1] == Kind.CONVERGED
    assert out.events[-1].text == "x is 4" and out.events[-1].goal == "s1"
    assert not _starts(out) and kit.state.stored.goal is not None
    assert kit.state.stored.goal.outcome == "converged"
    p = project(kit.events)
    assert (p.result, p.error) == ("x is 4", "")


def test_a_failed_turn_is_followed_by_another_and_three_in_a_row_stall() -> None:
    """An error is retried by a continuation turn (resume, no new input); the third
    failure in a row stalls the run naming the error."""
    kit = SessionKit()
    kit.create()
    _submit(kit)
    out = kit.finish("error", error="boom 1")
    (start,) = _starts(out)
    assert start.input.resume and start.input.text == ""
    kit.finish("error", error="boom 2")
    out = kit.finish("error", error="boom 3")
    assert out.kinds[-1] == Kind.STALLED
    assert "repeated failures" in out.events[-1].error and "boom 3" in out.events[-1].error
    assert kit.state.running is None


def test_a_clean_turn_resets_the_failure_count() -> None:
    """Two failures, then an answer: converged."""
    kit = SessionKit()
    kit.create()
    _submit(kit)
    kit.finish("error", error="a")
    kit.finish("error", error="b")
    out = kit.finish(text="done")
    assert out.kinds[-1] == Kind.CONVERGED


def test_the_turn_budget_refuses_the_model_call_then_stalls() -> None:
    """max_turns = 1: the second turn's model call is action.rejected (budget_exceeded),
    and its end stalls the run with the reason; the session's own budget is untouched."""
    kit = SessionKit()
    kit.create()
    _submit(kit, max_turns=1)
    assert _model(kit).events[0].kind == Kind.ACTION_ADMITTED
    kit.finish("max_tool_rounds")
    out = _model(kit)
    (ev,) = out.events
    assert (ev.kind, ev.fault) == (Kind.ACTION_REJECTED, "budget_exceeded")
    assert "goal turns" in ev.error
    out = kit.finish("budget_exceeded")
    assert out.kinds[-1] == Kind.STALLED and "budget exceeded" in out.events[-1].error
    p = project(kit.events)
    assert p.error == out.events[-1].error


def test_token_and_tool_call_budgets_count_from_the_runs_start() -> None:
    """Tokens spent before the run do not count; tool calls over the budget are refused."""
    kit = SessionKit()
    kit.create()
    kit.send("warm up")
    kit.finish(usage=Usage(input_tokens=500, output_tokens=500))
    _submit(kit, max_tokens=100, max_tool_calls=1)
    assert _model(kit).events[0].kind == Kind.ACTION_ADMITTED
    run = kit.state.running
    assert run is not None
    ok = kit.run(c.Govern(turn=run.turn, action="calculator", tool_use_id="a"))
    assert ok.events[0].kind == Kind.ACTION_ADMITTED
    no = kit.run(c.Govern(turn=run.turn, action="calculator", tool_use_id="b"))
    assert (no.events[0].fault, no.events[0].error) == ("budget_exceeded", "goal tool calls")
    kit.progress(usage=Usage(input_tokens=90, output_tokens=20))
    no = _model(kit)
    assert (no.events[0].fault, no.events[0].error) == ("budget_exceeded", "goal tokens")


def test_the_wall_time_budget_is_checked_at_the_gate() -> None:
    """max_seconds = 10: an action asked 11 s after the run opened is refused."""
    kit = SessionKit()
    kit.create()
    _submit(kit, now=1000.0, max_seconds=10)
    assert _model(kit, now=1005.0).events[0].kind == Kind.ACTION_ADMITTED
    ev = _model(kit, now=1011.0).events[0]
    assert (ev.fault, ev.error) == ("budget_exceeded", "goal wall time of 10s")


def test_an_interrupt_cancels_the_turn_and_stalls_the_run() -> None:
    """interrupt: turn.cancelled, then session.stalled with reason cancelled."""
    kit = SessionKit()
    kit.create()
    _submit(kit)
    out = kit.interrupt()
    assert Kind.TURN_CANCELLED in out.kinds and out.kinds[-1] == Kind.STALLED
    assert out.events[-1].error == "cancelled"
    assert kit.state.running is None and not _starts(out)


def test_closing_the_session_stalls_its_run_as_cancelled() -> None:
    """close: session.stalled (cancelled) before the closing lifecycle."""
    kit = SessionKit()
    kit.create()
    _submit(kit)
    out = kit.close()
    assert out.kinds[-2:] == [Kind.STALLED, Kind.LIFECYCLE]


def test_a_second_submit_while_a_run_is_in_flight_is_refused() -> None:
    """InvalidRequest; nothing stored. After the run ends a new one may open."""
    kit = SessionKit()
    kit.create()
    _submit(kit, "one")
    out = _submit(kit, "two")
    assert out.error == "InvalidRequest" and not out.events
    kit.finish(text="1")
    assert _submit(kit, "three").kinds[0] == Kind.SESSION_STARTED


def test_a_retried_submit_is_answered_as_the_first_even_while_its_run_goes_on() -> None:
    """A Submit whose key the log already holds gets the first Ack again (duplicate, same
    seq), not the refusal a second run would get; nothing more is stored."""
    kit = SessionKit()
    kit.create()
    first = _submit(kit, "one")
    stored = tuple((e.seq, str(e.kind)) for e in first.events)
    again = kit.run(c.Submit(request_id="r2", key="goal-one", objective="one", stored=stored))
    assert isinstance(again.reply, m.Ack) and again.reply.duplicate
    assert again.reply.seq == first.reply.seq and not again.events


@pytest.mark.parametrize(
    ("objective", "budget", "words"),
    [
        ("", {}, "objective"),
        ("x", {"max_turns": 0}, "positive"),
        ("x", {"turns": 1}, "unknown budget"),
    ],
)
def test_a_bad_submit_is_refused_with_its_reason(
    objective: str, budget: dict[str, int], words: str
) -> None:
    """An empty objective, a non-positive or unknown budget: InvalidRequest naming it."""
    kit = SessionKit()
    kit.create()
    out = kit.run(c.Submit(request_id="r", key="k", objective=objective, budget=budget))
    assert out.error == "InvalidRequest" and words in out.reply.message and not out.events


def test_a_run_cut_off_by_a_crash_continues_in_the_next_incarnation() -> None:
    """The crashed turn is cancelled (crash) and a continuation turn starts at once, with
    no second session.started; its answer converges the run."""
    kit = SessionKit()
    kit.create()
    _submit(kit)
    kit.progress("half an ans")
    out = kit.restart()
    assert Kind.SESSION_STARTED not in out.kinds
    assert out.kinds[:3] == [Kind.TURN_CANCELLED, Kind.LIFECYCLE, Kind.TURN_STARTED]
    (start,) = _starts(out)
    assert start.input.resume
    out = kit.finish(text="the answer")
    assert out.kinds[-1] == Kind.CONVERGED
    assert sum(e.kind == Kind.SESSION_STARTED and bool(e.goal) for e in kit.events) == 1


def test_resume_answers_whether_a_run_is_in_flight() -> None:
    """Resume with no run: consumed with a notice; with one: an Ack, nothing stored."""
    kit = SessionKit()
    kit.create()
    out = kit.run(c.Resume(request_id="r", key="k"))
    assert out.reply.consumed and not out.events
    _submit(kit)
    out = kit.run(c.Resume(request_id="r2", key="k2"))
    assert not out.reply.consumed and not out.events


def test_a_setting_no_agent_can_use_stalls_the_run_instead_of_looping() -> None:
    """A turn that cannot start fails at once; three such turns stall the run."""
    kit = SessionKit()
    kit.create({"ore.model.temperature": "hot"})
    out = _submit(kit)
    assert out.kinds[-1] == Kind.STALLED and "repeated failures" in out.events[-1].error
    assert sum(e.kind == Kind.TURN_STARTED for e in out.events) == 3


# -- fan-out -----------------------------------------------------------------------------


def _spawn(kit: SessionKit, use_id: str = "t1", objective: str = "sub") -> Outcome:
    run = kit.state.running
    assert run is not None
    return kit.run(c.Spawn(turn=run.turn, tool_use_id=use_id, objective=objective))


def test_a_spawn_records_the_edge_and_asks_for_the_child_with_its_objective() -> None:
    """child.spawned (goal = the parent, child = its id, objective as text) and a
    CreateChild whose metadata opens the child's run one level deeper; asked again (a
    resumed turn) it records nothing new and follows the same child."""
    kit = SessionKit(session_id="p")
    kit.create({"ore.model.name": "m", "governance.trust": "elevated"})
    _submit(kit)
    out = _spawn(kit, "t1", "find y")
    (ev,) = out.events
    assert (ev.kind, ev.goal, ev.child, ev.text) == (Kind.CHILD_SPAWNED, "p", "p-t1", "find y")
    (make,) = [e for e in out.effects if isinstance(e, c.CreateChild)]
    assert make.child == "p-t1"
    assert make.metadata["goal.objective"] == "find y" and make.metadata["goal.parent"] == "p"
    assert make.metadata["goal.depth"] == "1" and make.metadata["ore.model.name"] == "m"
    again = _spawn(kit, "t1", "find y")
    assert not again.events and isinstance(again.effects[0], c.CreateChild)


def test_a_child_opens_its_goal_run_as_it_is_created() -> None:
    """goal.objective in the creation metadata: session.started (goal = the child) and
    the objective as its first message, and the first turn starts."""
    kit = SessionKit(session_id="p-t1")
    out = kit.create({"goal.objective": "find y", "goal.parent": "p", "goal.depth": "1"})
    assert out.kinds[:4] == [
        Kind.SESSION_STARTED,
        Kind.PROPERTIES,
        Kind.USER_MESSAGE,
        Kind.TURN_STARTED,
    ]
    assert (out.events[0].goal, out.events[0].text) == ("p-t1", "find y")
    assert kit.state.stored.running_goal is not None


@pytest.mark.parametrize(
    ("md", "error"),
    [
        ({"governance.max_children": "1"}, "budget_exceeded"),
        ({"governance.max_depth": "1", "goal.depth": "1"}, "budget_exceeded"),
        ({"governance.capabilities": "clock"}, "capability_denied"),
    ],
)
def test_breadth_depth_and_capability_govern_spawn(md: dict[str, str], error: str) -> None:
    """A second child over max_children, any child at max_depth, or a session without
    the spawn capability: the spawn call is action.rejected with its fault."""
    from actors.agents.governance import Requirement

    kit = SessionKit(session_id="p")
    kit.create(md)
    _submit(kit)
    if "max_children" in str(md):
        _spawn(kit, "t0")
    run = kit.state.running
    assert run is not None
    need = Requirement(capabilities=frozenset({"spawn"}))
    out = kit.run(c.Govern(turn=run.turn, action="spawn", tool_use_id="t9", need=need))
    (ev,) = out.events
    assert (ev.kind, ev.fault) == (Kind.ACTION_REJECTED, error)


def test_interrupting_the_parent_folds_running_children_back_as_cancelled() -> None:
    """Running children get child.completed (cancelled, an error) and a CancelChildren
    effect; finished ones are left alone; the parent's run stalls."""
    kit = SessionKit(session_id="p")
    kit.create()
    _submit(kit)
    _spawn(kit, "a")
    _spawn(kit, "b")
    kit.progress(events=[Event(kind=Kind.CHILD_COMPLETED, goal="p", child="p-a", result="ok")])
    out = kit.interrupt()
    gone = [(e.child, e.result, e.is_error) for e in out.events if e.kind == Kind.CHILD_COMPLETED]
    assert gone == [("p-b", "cancelled", True)]
    (stop,) = [e for e in out.effects if isinstance(e, c.CancelChildren)]
    assert stop.children == ("p-b",)
    assert out.kinds[-1] == Kind.STALLED


def test_a_childs_mirrored_events_do_not_touch_the_parents_state() -> None:
    """turn.completed and actions attributed to a child leave the parent's open turn,
    budgets and run alone, and the projection counts them under the child."""
    kit = SessionKit(session_id="p")
    kit.create()
    _submit(kit)
    _spawn(kit, "a")
    before = kit.state.stored
    mirrored = [
        Event(kind=Kind.ACTION_ADMITTED, goal="p-a", action="calculator", call=3, trust="standard"),
        Event(kind=Kind.TURN_COMPLETED, goal="p-a", stop_reason="end_turn"),
        Event(kind=Kind.CONVERGED, goal="p-a", text="ok"),
        Event(kind=Kind.CHILD_COMPLETED, goal="p", child="p-a", result="ok"),
    ]
    kit.progress(events=mirrored)
    after = kit.state.stored
    assert after.open_turn == before.open_turn and after.tool_calls == before.tool_calls
    assert after.running_goal is not None and after.children == {"p-a": False}
    (child,) = project(kit.events).fanout
    assert (child.state, child.turns, child.result, child.trust) == ("done", 1, "ok", "standard")


def test_a_childs_mirrored_events_keep_the_childs_own_turn_numbers() -> None:
    """The child's turns 1, 2 and 3 are stored on the parent as 1, 2 and 3 (not all as
    the parent's running turn 1), while the worker's own events get the running turn."""
    kit = SessionKit(session_id="p")
    kit.create()
    _submit(kit)
    _spawn(kit, "a")
    mirrored = [Event(kind=Kind.TURN_COMPLETED, goal="p-a", turn=n) for n in (1, 2, 3)]
    out = kit.progress(events=[*mirrored, Event(kind=Kind.TOOL_CALL, tool="x", tool_use_id="u")])
    assert [(e.goal, e.turn) for e in out.events if e.kind == Kind.TURN_COMPLETED] == [
        ("p-a", 1),
        ("p-a", 2),
        ("p-a", 3),
    ]
    assert [e.turn for e in out.events if e.kind == Kind.TOOL_CALL] == [1]


# -- how a run ends: the provider's answer or the finish tool (goal.finish) ---------------


def _finish_call(answer: str, is_error: bool = False) -> tuple[Event, Event]:
    call = Event(kind=Kind.TOOL_CALL, tool="finish", tool_use_id="f1", input='{"answer": "x"}')
    done = Event(
        kind=Kind.TOOL_RESULT, tool="finish", tool_use_id="f1", result=answer, is_error=is_error
    )
    return call, done


@pytest.mark.parametrize(
    ("mode", "offered"),
    [({}, False), ({"goal.finish": "answer"}, False), ({"goal.finish": "tool"}, True)],
)
def test_the_finish_tool_is_offered_only_when_the_run_ends_with_it(
    mode: dict[str, str], offered: bool
) -> None:
    """goal.finish = tool: the run's turns get the finish tool; otherwise (the default,
    answer) they do not."""
    kit = SessionKit()
    kit.create(mode)
    (start,) = _starts(_submit(kit))
    assert start.input.finish is offered


@pytest.mark.parametrize(
    ("mode", "turn", "outcome", "text"),
    [
        # The default: the provider's final answer ends the run.
        ({}, "answer", Kind.CONVERGED, "it is 4"),
        ({"goal.finish": "answer"}, "answer", Kind.CONVERGED, "it is 4"),
        # tool: an answer without finish is reminded, not converged.
        ({"goal.finish": "tool"}, "answer", Kind.USER_MESSAGE, "call the finish tool"),
        # tool: the finish call's argument is the result, not the text around it.
        ({"goal.finish": "tool"}, "finish", Kind.CONVERGED, "the answer is 4"),
        # tool: a finish call that failed ends nothing.
        ({"goal.finish": "tool"}, "finish failed", Kind.USER_MESSAGE, "call the finish tool"),
        # answer: a finish result (a tool of the caller's own named so) is just a result.
        ({"goal.finish": "answer"}, "finish", Kind.CONVERGED, "it is 4"),
    ],
)
def test_how_a_turn_ends_the_run_depends_on_goal_finish(
    mode: dict[str, str], turn: str, outcome: str, text: str
) -> None:
    """The run ends as goal.finish says: with the provider's answer, or only with a
    finish call that ran (its answer the result); otherwise the model is reminded."""
    kit = SessionKit()
    kit.create(mode)
    _submit(kit)
    if turn.startswith("finish"):
        kit.progress(events=_finish_call("the answer is 4", is_error=turn.endswith("failed")))
    stop = "finish" if turn == "finish" else "end_turn"
    out = kit.finish(stop, text="it is 4")
    last = out.events[-1] if outcome == Kind.CONVERGED else out.events[-2]
    assert last.kind == outcome and text in last.text.lower()
    if outcome == Kind.USER_MESSAGE:
        # The reminder is the next turn's input, and the run goes on.
        assert last.goal == "s1" and last.extra["finishReminder"] is True
        (start,) = _starts(out)
        assert start.input.text == last.text and start.input.finish


def test_a_model_that_never_calls_finish_stalls_after_three_reminders() -> None:
    """goal.finish = tool and a model that keeps answering: three reminders, then the run
    stalls naming why instead of looping for ever."""
    kit = SessionKit()
    kit.create({"goal.finish": "tool"})
    _submit(kit)
    kinds = []
    for _ in range(4):
        out = kit.finish(text="done, I think")
        kinds.append(out.kinds[-1] if out.kinds[-1] == Kind.STALLED else out.kinds[-2])
    assert kinds == [Kind.USER_MESSAGE] * 3 + [Kind.STALLED]
    assert "4 times without calling finish" in out.events[-1].error
    assert kit.state.running is None


def test_a_restarted_session_remembers_the_finish_answer_and_the_reminders() -> None:
    """The answer of a finish call and the count of reminders are folded from the stream:
    a new incarnation sees what the old one did."""
    kit = SessionKit()
    kit.create({"goal.finish": "tool"})
    _submit(kit)
    kit.finish(text="not yet")
    kit.progress(events=_finish_call("42"))
    g = kit.state.stored.goal
    assert g is not None and (g.reminders, g.answer) == (1, "42")
    kit.restart()
    g = kit.state.stored.goal
    assert g is not None and (g.reminders, g.answer) == (1, "42")


@pytest.mark.parametrize("value", ["finish", "TOOL", "both"])
def test_a_submit_with_an_unknown_finish_mode_is_refused(value: str) -> None:
    """goal.finish other than tool or answer: the submit is refused naming the key."""
    kit = SessionKit()
    kit.create({"goal.finish": value})
    out = _submit(kit)
    assert isinstance(out.reply, m.RequestFailed) and "goal.finish" in out.reply.message
    assert not out.events


def test_a_child_ends_its_run_as_its_parent_does() -> None:
    """A spawned child is created with its parent's goal.finish."""
    kit = SessionKit()
    kit.create({"goal.finish": "tool"})
    _submit(kit)
    run = kit.state.running
    assert run is not None
    out = kit.run(c.Spawn(turn=run.turn, tool_use_id="t1", objective="sub"))
    (create,) = [e for e in out.effects if isinstance(e, c.CreateChild)]
    assert create.metadata["goal.finish"] == "tool"


def test_a_spare_process_warm_up_runs_a_goal_run_with_a_tool_call_in_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The warm-up drives the decider, the gate, the turn worker and the tool loop through
    one scripted goal run (a calculator call, then the answer) to convergence, then one
    chat turn (the path most sessions take)."""
    seen: list[str] = []
    run = SessionKit.run

    def recording(kit: SessionKit, command: c.Command) -> Outcome:
        out = run(kit, command)
        seen.extend(out.kinds)
        return out

    monkeypatch.setattr(SessionKit, "run", recording)
    assert warm_up()
    converged = seen.index("session.converged")
    assert seen[:converged].count("action.admitted") == 3  # two model calls, the tool call
    assert "tool.result" in seen[:converged]
    assert seen[converged:].count("turn.started") == 1 and "turn.completed" in seen[converged:]
