"""Conversation control as decision tables: steer a running turn, branch the turn tree
(edit, regenerate, switch), all through `actors.testing.SessionKit` (no processes)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.agents.governance import Requirement
from actors.policy import BusyPolicy
from actors.session.rules import commands as c
from actors.testing import SessionKit
from projections import thread_from
from spine import Event, Kind

DONE = str(Kind.LIFECYCLE)


def _running(**kw: object) -> SessionKit:
    kit = SessionKit(**kw)  # type: ignore[arg-type]
    kit.create()
    kit.send("first")
    assert kit.state.running is not None
    return kit


def _tool_batch(kit: SessionKit) -> None:
    """The running turn asks for a tool and gets its result."""
    call = Event(kind=Kind.TOOL_CALL, tool="calc", tool_use_id="t1", input='{"x":1}')
    kit.progress(events=[call])
    result = Event(kind=Kind.TOOL_RESULT, tool="calc", tool_use_id="t1", result="2")
    kit.progress(events=[result])


def _next_model_call(kit: SessionKit) -> c.AnswerWorker:
    turn = kit.state.running.turn  # type: ignore[union-attr]
    out = kit.run(c.Govern(turn=turn, action="model", tool_use_id="", need=Requirement()))
    (answer,) = [e for e in out.effects if isinstance(e, c.AnswerWorker)]
    return answer


def _user_entries(kit: SessionKit) -> list[str]:
    return [text for role, text, _ in kit.state.stored.history if role == "user"]


# -- steer -------------------------------------------------------------------------------


def test_a_steer_is_stored_when_acknowledged_and_starts_no_turn() -> None:
    """mode=steer mid-turn stores a user.message marked steer; no turn is queued for it."""
    kit = _running()
    out = kit.send("use metric units", mode="steer")
    assert out.kinds == ["user.message"] and out.events[0].extra["steer"] is True
    assert out.reply.seq == out.events[0].seq
    st = kit.state.stored
    assert st.steers == ((out.events[0].seq, "use metric units"),) and st.pending == ()


def test_a_steer_lands_at_the_next_model_call_after_the_tool_batch() -> None:
    """The admission of the next model call delivers it: steer.delivered names the turn
    and the call, the worker gets the text, the model's history has it after the result."""
    kit = _running()
    _tool_batch(kit)
    sent = kit.send("use metric units", mode="steer")
    answer = _next_model_call(kit)
    assert answer.steers == ("use metric units",)
    after = [r.event() for r in kit.log.read(kit.session_id, sent.reply.seq, None)]
    assert [str(e.kind) for e in after] == ["action.admitted", "steer.delivered"]
    ev = after[1]
    assert ev.turn == 1 and ev.call == answer.call and ev.extra["steer"] == sent.reply.seq
    roles = [role for role, _, _ in kit.state.stored.history]
    assert roles[-3:] == ["tool.call", "tool.result", "user"]
    assert kit.state.stored.steers == ()
    # Delivered once: the following call carries nothing.
    assert _next_model_call(kit).steers == ()


def test_a_tool_call_admission_is_no_safe_point() -> None:
    """Only a model call's admission delivers: a tool's admission mid-batch does not."""
    kit = _running()
    kit.send("stop early", mode="steer")
    out = kit.run(c.Govern(turn=1, action="calc", tool_use_id="t1", need=Requirement()))
    (answer,) = [e for e in out.effects if isinstance(e, c.AnswerWorker)]
    assert answer.steers == () and out.kinds == ["action.admitted", "action.started"]
    assert len(kit.state.stored.steers) == 1


@pytest.mark.parametrize(
    ("metadata", "handed", "next_turn"),
    [({}, "next", True), ({"session.steer_dropped": "refuse"}, "refused", False)],
)
def test_a_steer_the_turn_ended_before_is_dropped_and_handed_on_per_policy(
    metadata: dict[str, str], handed: str, next_turn: bool
) -> None:
    """The turn ends with a steer waiting: steer.dropped (reason turn ended) after the
    turn's end; by default it is the next turn's message, with refuse it stays dropped."""
    kit = SessionKit()
    kit.create(metadata)
    kit.send("first")
    sent = kit.send("also say hi", mode="steer")
    out = kit.finish(text="done")
    i = out.kinds.index("turn.completed")
    assert out.kinds[i + 1] == "steer.dropped"
    dropped = out.events[i + 1]
    assert dropped.reason == "turn ended" and dropped.extra == {
        "steer": sent.reply.seq,
        "handed": handed,
    }
    assert ("turn.started" in out.kinds) is next_turn
    if next_turn:
        (start,) = [e for e in out.effects if isinstance(e, c.StartTurn)]
        assert start.input.text == "also say hi"


def test_an_interrupt_drops_the_waiting_steer_with_reason_cancelled() -> None:
    kit = _running()
    kit.send("later", mode="steer")
    out = kit.interrupt()
    dropped = [e for e in out.events if e.kind == Kind.STEER_DROPPED]
    assert [e.reason for e in dropped] == ["interrupted"]
    assert out.kinds.index("turn.cancelled") < out.kinds.index("steer.dropped")


def test_a_crash_between_ack_and_delivery_drops_the_steer_once_and_runs_it_next() -> None:
    """Acknowledged, then the session dies: the new incarnation closes the turn (crash),
    records the steer dropped (crash) and runs it as the next turn; a second restart
    records nothing again (never replayed)."""
    kit = _running()
    sent = kit.send("after the crash", mode="steer")
    out = kit.restart()
    i = out.kinds.index("turn.cancelled")
    assert out.kinds[i : i + 3] == ["turn.cancelled", "steer.dropped", DONE]
    dropped = out.events[i + 1]
    assert dropped.reason == "crash" and dropped.extra["steer"] == sent.reply.seq
    (start,) = [e for e in out.effects if isinstance(e, c.StartTurn)]
    assert start.input.text == "after the crash"
    kit.finish(text="ok")
    again = kit.restart()
    assert "steer.dropped" not in again.kinds


def test_a_message_queued_behind_a_tool_turn_is_heard_after_that_turns_results() -> None:
    """Found by the steer storm: a message enqueued while a turn was between a tool call
    and its result sat there in the history, so every later request held a call whose
    result did not follow it. Its turn hears it after everything said while it waited,
    and so does a restarted session (the order is the fold's)."""
    kit = _running()
    call = Event(kind=Kind.TOOL_CALL, tool="calc", tool_use_id="t1", input='{"x":1}')
    kit.progress(events=[call])
    queued = kit.send("second", mode="enqueue")
    assert queued.kinds == ["user.message"]
    result = Event(kind=Kind.TOOL_RESULT, tool="calc", tool_use_id="t1", result="2")
    kit.progress(events=[result])
    out = kit.finish(text="first answer")
    (start,) = [e for e in out.effects if isinstance(e, c.StartTurn)]
    assert start.input.text == "second"
    roles = [role for role, _ in start.input.history]
    assert roles == ["user", "tool.call", "tool.result", "assistant"]
    expected = ["user", "tool.call", "tool.result", "assistant", "user"]
    assert [role for role, _, _ in kit.state.stored.history] == expected
    kit.restart()
    assert [role for role, _, _ in kit.state.stored.history] == expected


def test_steer_to_an_idle_session_is_an_ordinary_message() -> None:
    kit = SessionKit()
    kit.create()
    out = kit.send("hello", mode="steer")
    assert out.kinds[:2] == ["user.message", "turn.started"]
    assert "steer" not in out.events[0].extra


def test_steer_as_the_session_policy_and_a_bad_mode() -> None:
    """session.busy_policy=steer makes every mid-turn message a steer; a mode that names
    no policy is refused naming the choices, storing nothing."""
    kit = SessionKit(busy_policy=BusyPolicy.STEER)
    kit.create()
    kit.send("first")
    assert kit.send("second").events[0].extra["steer"] is True
    bad = kit.send("third", mode="sideways")
    assert bad.error == "InvalidRequest" and "steer" in bad.reply.message and not bad.events


def test_a_redelivered_steer_is_acknowledged_without_a_second_event() -> None:
    kit = _running()
    first = kit.send("s", mode="steer", key="k")
    again = kit.send("s", mode="steer", key="k")
    assert again.reply.duplicate and again.reply.seq == first.reply.seq and not again.events
    assert len(kit.state.stored.steers) == 1


# -- the turn tree -----------------------------------------------------------------------


def _two_turns() -> tuple[SessionKit, int, int]:
    kit = SessionKit()
    kit.create()
    a = kit.send("one").reply.seq
    kit.finish(text="answer one")
    b = kit.send("two").reply.seq
    kit.finish(text="answer two")
    return kit, a, b


def test_regenerate_answers_the_last_message_again_on_a_sibling_branch() -> None:
    """The model sees the path up to the regenerated message's parent plus its text; the
    old answer stays in the log and in the tree."""
    kit, a, b = _two_turns()
    out = kit.send("", regenerates=-1)
    assert out.kinds[:2] == ["user.message", "turn.started"]
    ev = out.events[0]
    assert ev.text == "two" and ev.extra == {"regenerates": b}
    (start,) = [e for e in out.effects if isinstance(e, c.StartTurn)]
    assert start.input.text == "two"
    assert start.input.history == (("user", "one"), ("assistant", "answer one"))
    kit.finish(text="answer two again")
    thread = thread_from(r.event() for r in kit.log.read(kit.session_id, 0, None))
    assert [t.reply for t in thread.turns()] == ["answer one", "answer two again"]
    assert [t.reply for t in thread.children(a)] == ["answer two", "answer two again"]


def test_edit_branches_from_a_past_message_and_switch_goes_back() -> None:
    """edit SEQ TEXT replaces the first message on a new branch; switching to the old
    branch brings its whole path back as the model's history."""
    kit, a, b = _two_turns()
    out = kit.send("uno", edits=a)
    (start,) = [e for e in out.effects if isinstance(e, c.StartTurn)]
    assert start.input.history == () and start.input.text == "uno"
    kit.finish(text="respuesta")
    assert _user_entries(kit) == ["uno"]
    out = kit.switch_branch(a)
    assert out.kinds == ["branch.switched", DONE] and out.events[0].extra == {"activates": a}
    assert _user_entries(kit) == ["one", "two"]
    assert kit.state.stored.leaf == b
    out = kit.send("three")
    (start,) = [e for e in out.effects if isinstance(e, c.StartTurn)]
    assert start.input.history == (
        ("user", "one"),
        ("assistant", "answer one"),
        ("user", "two"),
        ("assistant", "answer two"),
    )
    thread = thread_from(r.event() for r in kit.log.read(kit.session_id, 0, None))
    assert [t.text for t in thread.turns()] == ["one", "two", "three"]


def test_branch_operations_are_refused_while_busy_or_for_an_unknown_turn() -> None:
    kit = _running()
    assert kit.send("x", edits=1).error == "Rejected"
    assert kit.send("", regenerates=-1).error == "Rejected"
    assert kit.switch_branch(1).error == "Rejected"
    kit.finish()
    bad = kit.send("x", edits=99)
    assert bad.error == "TurnNotFound" and "seq 99" in bad.reply.message and not bad.events
    assert kit.send("", regenerates=99).error == "TurnNotFound"
    assert kit.switch_branch(99).error == "TurnNotFound"
    assert kit.send("x", edits=1, mode="steer").error == "InvalidRequest"


def test_a_branch_survives_a_restart_and_a_redelivered_regenerate_is_a_duplicate() -> None:
    kit, _, b = _two_turns()
    first = kit.send("", regenerates=-1, key="r")
    kit.finish(text="again")
    kit.restart()
    assert _user_entries(kit) == ["one", "two"]
    again = kit.send("", regenerates=-1, key="r")
    assert again.reply.duplicate and again.reply.seq == first.reply.seq
    kit.switch_branch(b)
    assert [t for r, t, _ in kit.state.stored.history if r == "assistant"][-1] == "answer two"


# -- fork (the Host's pure steps, over an in-memory log) ---------------------------------


def test_a_fork_inside_a_turn_closes_it_in_the_fork_and_its_root_is_the_prefix() -> None:
    from actors.host.conversation import fork_events, fork_root, safe_point

    kit = _running()
    kit.send("queued", mode="steer")
    sid = kit.session_id
    records = kit.log.read(sid, 0, None)
    at = records[-1].seq
    events = [r.event() for r in records]
    assert safe_point(events, sid) < at  # the turn is open at the end
    out = fork_events(kit.log, sid, at, {"ore.model.name": "other"})
    prov = out[0]
    assert prov.properties["fork.seq"] == str(at)
    closing = [str(e.kind) for e in out[1:]]
    assert "turn.cancelled" in closing and "steer.dropped" in closing
    assert out[-1].properties == {"ore.model.name": "other"}
    cancelled = next(e for e in out if e.kind == Kind.TURN_CANCELLED)
    assert cancelled.reason == "forked"
    # Stored by reference: the fork reads the prefix, its link, then what closes the turn.
    kit.log.fork("forked", sid, at, out)
    mine = kit.log.read_events("forked")
    assert mine[:at] == events and mine[at].kind == Kind.SESSION_FORKED
    # Its link names the parent's root (the parent was never sealed: read whole).
    assert mine[at].extra["root"] == fork_root(records)
    assert fork_root(kit.log.read("forked", 0, at)) == mine[at].extra["root"]
    # The fork folds as the parent at the fork seq; its own rows then close the turn.
    from actors.session.rules.state import SessionState, fold

    def state(evs: list[Event]) -> SessionState:
        return fold(SessionState(session_id=sid), evs)

    assert state(mine[:at]) == state(events)
    assert state(events).open_turn is not None and state(mine).open_turn is None
    assert not state(mine).steers


def test_a_fork_at_a_safe_point_stores_only_its_provenance() -> None:
    from actors.host.conversation import fork_events

    kit = SessionKit()
    kit.send("one")
    kit.finish(text="answer one")
    at = kit.log.last_seq(kit.session_id)
    out = fork_events(kit.log, kit.session_id, at, {})
    assert [e.kind for e in out] == [Kind.PROPERTIES]
    assert set(out[0].properties) == {"fork.parent", "fork.seq"}


# -- steers under any interleaving -------------------------------------------------------

_OPS = st.lists(
    st.sampled_from(["steer", "tools", "model", "finish", "interrupt", "crash", "message"]),
    max_size=30,
)


def _apply(kit: SessionKit, op: str, n: int) -> None:
    running = kit.state.running is not None
    if op == "steer":
        kit.send(f"steer {n}", mode="steer")
    elif op == "message":
        kit.send(f"message {n}")
    elif op == "tools" and running:
        _tool_batch(kit)
    elif op == "model" and running:
        _next_model_call(kit)
    elif op == "finish" and running:
        kit.finish(text="done")
    elif op == "interrupt":
        kit.interrupt()
    elif op == "crash":
        kit.restart()


@settings(max_examples=150, deadline=None)
@given(_OPS)
def test_every_steer_is_delivered_once_or_dropped_once_whatever_happens(ops: list[str]) -> None:
    """Under any interleaving of steers, tool batches, model calls, ends, interrupts and
    crashes: each stored steer ends up delivered exactly once or dropped exactly once
    (once the session is idle), and a delivery never lands between a tool call and its
    result."""
    kit = _running()
    for n, op in enumerate(ops):
        _apply(kit, op, n)
    for _ in range(len(ops) + 2):  # let every queued turn run to its end
        if kit.state.running is None:
            break
        kit.finish(text="end")
    events = [r.event() for r in kit.log.read(kit.session_id, 0, None)]
    steers = [e.seq for e in events if e.kind == Kind.USER_MESSAGE and e.extra.get("steer")]
    settled = [
        e.extra["steer"] for e in events if e.kind in (Kind.STEER_DELIVERED, Kind.STEER_DROPPED)
    ]
    if kit.state.running is None:
        assert sorted(settled) == steers
    assert len(settled) == len(set(settled))
    open_calls: set[str] = set()
    for e in events:
        if e.kind == Kind.TOOL_CALL:
            open_calls.add(e.tool_use_id)
        elif e.kind == Kind.TOOL_RESULT:
            open_calls.discard(e.tool_use_id)
        elif e.kind == Kind.STEER_DELIVERED:
            assert not open_calls
        elif e.kind in (Kind.TURN_COMPLETED, Kind.TURN_CANCELLED):
            open_calls.clear()


# -- replay: what a replayed turn is answered from (pure) ---------------------------------


def _tool_turn(kit: SessionKit, text: str, calls: list[tuple[str, str, str, bool]]) -> int:
    ack = kit.send(text)
    progress = []
    for i, (tool, args, _result, _err) in enumerate(calls):
        progress.append(Event(kind=Kind.TOOL_CALL, tool=tool, tool_use_id=f"u{i}", input=args))
    for i, (tool, _args, result, err) in enumerate(calls):
        progress.append(
            Event(
                kind=Kind.TOOL_RESULT, tool=tool, tool_use_id=f"u{i}", result=result, is_error=err
            )
        )
    kit.progress(events=progress)
    kit.finish(text="done")
    return ack.reply.seq


@pytest.mark.parametrize(
    ("metadata", "replay"),
    [
        ({}, None),
        ({"replay.of": "parent"}, None),
        ({"replay.of": "parent", "replay.turn": "7"}, ("parent", 7)),
        ({"replay.of": "parent", "replay.turn": "seven"}, None),
        ({"replay.of": "parent", "replay.turn": "0"}, None),
        ({"replay.turn": "7"}, None),
    ],
)
def test_a_turn_names_the_turn_it_replays_from_the_sessions_metadata(
    metadata: dict[str, str], replay: tuple[str, int] | None
) -> None:
    kit = SessionKit()
    if metadata:
        kit.set_metadata(metadata)
    out = kit.send("go")
    (start,) = [e for e in out.effects if isinstance(e, c.StartTurn)]
    assert start.input.replay == replay and start.input.recorded is None


def test_the_recorded_calls_are_the_turns_own_with_their_stored_results() -> None:
    from actors.session.rules.replaying import recorded_calls

    kit = SessionKit()
    one = _tool_turn(kit, "one", [("clock", "{}", "12:00", False), ("calc", '{"e": 1}', "x", True)])
    two = _tool_turn(kit, "two", [("clock", "{}", "12:01", False)])
    events = kit.events
    assert recorded_calls(events, one) == (
        ("clock", "{}", "12:00", False),
        ("calc", '{"e": 1}', "x", True),
    )
    assert recorded_calls(events, two) == (("clock", "{}", "12:01", False),)
    assert recorded_calls(events, 9999) == ()


_RECORDED = (
    ("clock", "{}", "12:00", False),
    ("calc", '{"e": 1, "f": 2}', "3", False),
    ("clock", "{}", "12:05", False),
)


@pytest.mark.parametrize(
    ("asked", "answers"),
    [
        # In order, each recorded call once; equal JSON values match however spelled.
        (
            [("clock", "{}"), ("calc", '{"f":2,"e":1}'), ("clock", "")],
            [("12:00", False), ("3", False), ("12:05", False)],
        ),
        # A third clock call, or other arguments, or another tool: refused, never run.
        ([("clock", "{}")] * 3, [("12:00", False), ("12:05", False), None]),
        ([("calc", '{"e": 2}')], [None]),
        ([("shell", "{}")], [None]),
    ],
)
def test_a_replay_answers_only_the_calls_the_recorded_turn_made(
    asked: list[tuple[str, str]], answers: list[tuple[str, bool] | None]
) -> None:
    from actors.agents.replayed import NOT_RECORDED, Replayed

    r = Replayed(_RECORDED)
    for (tool, args), want in zip(asked, answers, strict=True):
        got = r.answer(tool, args)
        if want is None:
            assert got[1] is True and got[0].startswith(NOT_RECORDED)
        else:
            assert got == want
