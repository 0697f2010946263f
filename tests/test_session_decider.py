"""The session decider as tables: given events, when a command, then events and reply.

Everything here runs without processes through `actors.testing.SessionKit`.
"""

from __future__ import annotations

import attrs
import pytest

from actors.interceptors import Emitter, Ingress, InterceptResult, SessionView, SlashCommands
from actors.policy import BusyPolicy
from actors.session.rules import commands as c
from actors.spec import AgentSpec
from actors.testing import SessionKit
from projections import project
from spine import Event, Kind, Phase, Usage

DONE = str(Kind.LIFECYCLE)


def _running(policy: BusyPolicy = BusyPolicy.ENQUEUE, **kw: object) -> SessionKit:
    kit = SessionKit(busy_policy=policy, **kw)  # type: ignore[arg-type]
    kit.create()
    kit.send("first")
    assert kit.state.running is not None
    return kit


# -- ingress and busy policies -----------------------------------------------------------


def test_a_message_to_an_idle_session_is_stored_and_starts_a_turn() -> None:
    """The message and its turn.started are one append; the ack names the message's seq;
    the turn starts with a StartTurn effect."""
    kit = SessionKit()
    kit.create()
    out = kit.send("hello")
    assert out.kinds == ["user.message", "turn.started", "action.admitted"]
    assert out.reply.seq == out.events[0].seq and not out.reply.consumed
    (start,) = [e for e in out.effects if isinstance(e, c.StartTurn)]
    assert start.turn == 1 and start.input.text == "hello"


@pytest.mark.parametrize(
    ("policy", "kinds", "error"),
    [
        (BusyPolicy.ENQUEUE, ["user.message"], ""),
        (BusyPolicy.REJECT, [], "Rejected"),
        (
            BusyPolicy.INTERRUPT,
            [
                "action.completed",
                "turn.cancelled",
                DONE,
                "user.message",
                "turn.started",
                "action.admitted",
            ],
            "",
        ),
    ],
)
def test_a_message_mid_turn_follows_the_busy_policy(
    policy: BusyPolicy, kinds: list[str], error: str
) -> None:
    """enqueue stores it for later, reject refuses it, interrupt supersedes the turn."""
    kit = _running(policy)
    out = kit.send("second")
    assert out.kinds == kinds
    assert out.error == error
    if policy == BusyPolicy.INTERRUPT:
        assert out.events[1].reason == "superseded"
        assert any(isinstance(e, c.CancelTurn) for e in out.effects)
        assert kit.state.running is not None and kit.state.running.turn == 2


def test_the_session_metadata_overrides_the_runner_busy_policy() -> None:
    """session.busy_policy in metadata wins over the Runner's policy."""
    kit = SessionKit(busy_policy=BusyPolicy.ENQUEUE)
    kit.create({"session.busy_policy": "reject"})
    kit.send("first")
    assert kit.send("second").error == "Rejected"


def test_an_enqueued_message_runs_when_the_turn_ends() -> None:
    """The next stored message starts its turn as soon as the running one completes."""
    kit = _running()
    kit.send("second")
    out = kit.finish(text="one")
    assert out.kinds == [
        "assistant.message",
        "action.completed",
        "turn.completed",
        DONE,
        "turn.started",
        "action.admitted",
    ]
    assert kit.state.running is not None and kit.state.running.turn == 2


def test_a_redelivered_key_is_acknowledged_again_without_a_second_event() -> None:
    """The same idempotency key stores nothing twice and answers with the first seq."""
    kit = SessionKit()
    kit.create()
    first = kit.send("hello", key="k1")
    kit.finish()
    again = kit.send("hello", key="k1")
    assert again.events == () and again.reply.duplicate
    assert again.reply.seq == first.reply.seq


def _first(kit: SessionKit, what: str) -> None:
    if what == "message":
        kit.send("hello", key="k1")
        kit.finish()
    elif what == "interrupt":
        kit.send("go")
        kit.interrupt("stop", key="k1")
    elif what == "switch":
        kit.switch("other", key="k1")
    else:
        kit.send("/set a 1", key="k1")


@pytest.mark.parametrize(
    ("first", "again", "conflict"),
    [
        ("message", ("send", "hello"), False),
        ("message", ("send", "hello, but longer"), True),
        ("message", ("send", ""), True),
        ("message", ("interrupt", "hello"), True),
        ("message", ("switch", "other"), True),
        ("interrupt", ("interrupt", "stop"), False),
        ("interrupt", ("interrupt", "halt"), True),
        ("interrupt", ("send", "stop"), True),
        ("switch", ("switch", "other"), False),
        ("switch", ("switch", "elsewhere"), True),
        # A consumed slash command stored only what it changed: nothing to compare.
        ("slash", ("send", "/set a 1"), False),
    ],
)
def test_a_reused_key_with_a_different_body_is_a_conflict_and_stores_nothing(
    first: str, again: tuple[str, str], conflict: bool
) -> None:
    """Same key, same request: the first ack again. Same key, another body or kind: an
    IdempotencyConflict naming the key, and nothing is stored."""
    kit = SessionKit()
    kit.create()
    _first(kit, first)
    before = kit.events
    how, arg = again
    if how == "send":
        out = kit.send(arg, key="k1")
    elif how == "interrupt":
        out = kit.interrupt(arg, key="k1")
    else:
        out = kit.switch(arg, key="k1")
    assert kit.events == before and out.events == ()
    if conflict:
        assert out.error == "IdempotencyConflict"
        assert "'k1'" in out.reply.message and "nothing was stored" in out.reply.message
    else:
        assert out.error == "" and out.reply.duplicate


@pytest.mark.parametrize("terminal", ["closed", "failed"])
@pytest.mark.parametrize("command", ["send", "interrupt", "set_metadata", "switch", "seal"])
def test_a_closed_or_failed_session_refuses_ingress(terminal: str, command: str) -> None:
    """Nothing is stored; the error names the session's state."""
    phase = Phase.CLOSED if terminal == "closed" else Phase.FAILED
    kit = SessionKit([Event(kind=Kind.SESSION_STARTED), Event(kind=Kind.LIFECYCLE, phase=phase)])
    args: dict[str, tuple[object, ...]] = {
        "send": ("hi",),
        "interrupt": (),
        "set_metadata": ({"a": "b"},),
        "switch": ("other",),
        "seal": (),
    }
    out = getattr(kit, command)(*args[command])
    assert out.events == ()
    assert out.error == ("SessionClosed" if terminal == "closed" else "SessionFailed")


def test_closing_a_closed_session_succeeds_and_stores_nothing() -> None:
    """Close is idempotent."""
    kit = SessionKit([Event(kind=Kind.LIFECYCLE, phase=Phase.CLOSED)])
    out = kit.close()
    assert out.events == () and out.error == ""


def test_close_cancels_the_running_turn_ends_subscriptions_and_stops() -> None:
    """The partial turn is kept in turn.cancelled; then closed; then the effects."""
    kit = _running()
    kit.progress("par")
    out = kit.close()
    # The model call the turn started with is ended first (it never reported an end).
    assert out.kinds == ["action.completed", "turn.cancelled", DONE, DONE]
    assert out.events[0].fault == "cancelled"
    assert out.events[1].text == "par" and out.events[-1].phase == Phase.CLOSED
    kinds = [type(e) for e in out.effects]
    assert kinds == [c.CancelTurn, c.EndSubscriptions, c.StopSelf]


# -- interrupts --------------------------------------------------------------------------


def test_an_interrupt_keeps_the_partial_text_and_usage() -> None:
    """turn.cancelled carries what the turn produced before the interrupt."""
    kit = _running()
    kit.progress("partial ", usage=Usage(input_tokens=3, output_tokens=1))
    out = kit.interrupt("enough")
    assert out.kinds == ["user.interrupt", "action.completed", "turn.cancelled", DONE]
    cancelled = out.events[2]
    assert cancelled.text == "partial " and cancelled.usage == Usage(
        input_tokens=3, output_tokens=1
    )
    assert cancelled.reason == "enough"


def test_an_interrupt_with_nothing_running_stores_nothing_and_says_so() -> None:
    """The ack carries an info notice."""
    kit = SessionKit()
    kit.create()
    out = kit.interrupt()
    assert out.events == () and ("info", "nothing to interrupt") in out.reply.notices


def test_output_of_a_cancelled_turn_that_arrives_late_is_ignored() -> None:
    """The worker's progress and finish after an interrupt change nothing."""
    kit = _running()
    kit.interrupt()
    late_progress = kit.run(c.Progress(turn=1, text="late"))
    late_finish = kit.run(c.Finished(turn=1, stop_reason="end_turn", text="late"))
    assert late_progress.events == () and late_finish.events == ()
    assert late_progress.live == ()


# -- the turn's model call: admitted at its start, settled by its end at the latest -------


def _model_calls(kit: SessionKit) -> list[tuple[str, int, str]]:
    return [
        (str(e.kind), e.call, e.fault)
        for e in kit.events
        if e.kind in (Kind.ACTION_ADMITTED, Kind.ACTION_COMPLETED) and e.action == "model"
    ]


@pytest.mark.parametrize(("stop", "fault"), [("end_turn", ""), ("error", "error")])
def test_a_model_call_its_agent_never_reports_is_settled_by_the_turns_end(
    stop: str, fault: str
) -> None:
    """An agent of the caller's own knows nothing of the model call admitted for it: the
    turn's end completes it (fault error when the turn failed), so no row stays running."""
    kit = _running()
    kit.finish(stop_reason=stop, text="one", error="boom" if fault else "")
    ((_, call, _), *_) = _model_calls(kit)
    assert _model_calls(kit) == [("action.admitted", call, ""), ("action.completed", call, fault)]
    p = project(kit.events)
    assert p.admitted == p.completed == 1
    assert [a.state for a in p.actions] == ["done"]


def test_a_model_call_the_agent_reports_is_not_completed_twice() -> None:
    """The built-in agents complete the call themselves (in the turn's last output or an
    earlier one): the turn's end adds nothing."""
    kit = _running()
    call = kit.state.stored.turn_actions["model\x00"][0]
    done = Event(kind=Kind.ACTION_COMPLETED, action="model", call=call)
    kit.run(c.Finished(turn=1, stop_reason="end_turn", text="a", events=(done,)))
    kit.send("again")
    call = kit.state.stored.turn_actions["model\x00"][0]
    kit.progress(events=[attrs.evolve(done, call=call)])
    kit.finish(text="b")
    kinds = [k for k, _, _ in _model_calls(kit)]
    assert kinds == ["action.admitted", "action.completed"] * 2


def test_a_turn_its_agent_ends_as_cancelled_settles_its_model_call_as_cancelled() -> None:
    """An agent that stops on its own with stop reason cancelled: its admitted call ends
    with fault cancelled."""
    kit = _running()
    kit.finish(stop_reason="cancelled", text="partial")
    assert [f for k, _, f in _model_calls(kit) if k == "action.completed"] == ["cancelled"]


# -- turns that cannot start ---------------------------------------------------------------


def test_a_factory_failure_fails_the_turn_and_the_next_message_runs() -> None:
    """turn.completed carries the factory's error; the session serves on."""
    kit = _running()
    kit.send("second")
    out = kit.start_failed("no model")
    assert out.kinds == [
        "action.completed",
        "turn.completed",
        DONE,
        "turn.started",
        "action.admitted",
    ]
    assert (out.events[0].action, out.events[0].fault) == ("model", "error")
    assert "agent factory failed: no model" in out.events[1].error
    assert kit.state.running is not None and kit.state.running.turn == 2


def test_a_bad_model_setting_closes_the_turn_with_an_error_and_leaves_the_session_serving() -> None:
    """A stored temperature of "hot" never wedges the session, before or after a restart."""
    kit = SessionKit()
    kit.create()
    kit.set_metadata({"ore.model.temperature": "hot"})
    out = kit.send("hi")
    assert out.kinds == ["user.message", "turn.started", "turn.completed", DONE]
    assert "ore.model.temperature" in out.events[2].error and "hot" in out.events[2].error
    assert kit.state.running is None and not kit.state.stored.pending
    kit.restart()
    again = kit.send("again")
    assert again.events[2].kind == Kind.TURN_COMPLETED and again.events[2].error
    kit.set_metadata({"ore.model.temperature": "0.5"})
    assert kit.send("fixed").kinds == ["user.message", "turn.started", "action.admitted"]


def test_a_slash_set_of_a_bad_model_value_is_refused_with_a_notice() -> None:
    """/set validates the seed's model keys; nothing is stored."""
    kit = SessionKit()
    kit.create()
    out = kit.send("/set ore.model.temperature hot")
    assert out.events == () and out.reply.consumed
    assert out.reply.notices[0][0] == "error"


@pytest.mark.parametrize(
    ("metadata", "spec"),
    [
        ({"ore.model.name": "big", "ore.model.temperature": "0.2"}, ("big", 0.2, None, "off")),
        ({"model.name": "old", "model.max_output_tokens": "64"}, ("old", None, 64, "off")),
        ({"model.name": "old", "ore.model.name": "new"}, ("new", None, None, "off")),
        ({"ore.model.thinking_level": "high"}, ("scripted", None, None, "high")),
    ],
)
def test_model_settings_are_read_from_the_seed_keys_and_the_old_spelling(
    metadata: dict[str, str], spec: tuple[object, ...]
) -> None:
    """The seed's ore.model.* keys win; streams written with model.* still work."""
    s = AgentSpec.from_metadata(metadata)
    assert (s.model, s.temperature, s.max_output_tokens, s.thinking_level) == spec


def test_slash_commands_write_the_seed_keys() -> None:
    """/model, /temperature, /thinking and /max-tokens write ore.model.*."""
    kit = SessionKit()
    kit.create()
    for text in ("/model big", "/temperature 0.3", "/thinking low", "/max-tokens 9"):
        kit.send(text)
    md = kit.state.stored.metadata
    assert md == {
        "ore.model.name": "big",
        "ore.model.temperature": "0.3",
        "ore.model.thinking_level": "low",
        "ore.model.max_output_tokens": "9",
    }


# -- crashes -------------------------------------------------------------------------------


def test_a_restart_closes_the_turn_a_crash_left_open_then_runs_what_waits() -> None:
    """An incarnation that died mid-turn leaves turn.started without an end: the next one
    closes it with turn.cancelled (reason crash) and runs the next stored message."""
    kit = _running()
    kit.progress("half")
    kit.send("queued")
    out = kit.restart()
    assert out.kinds == [
        "action.completed",
        "turn.cancelled",
        DONE,
        "turn.started",
        "action.admitted",
    ]
    assert out.events[1].reason == "crash"
    assert kit.state.running is not None and kit.state.running.turn == 2


def test_a_restart_of_a_clean_session_stores_nothing() -> None:
    """Nothing open, nothing written."""
    kit = SessionKit()
    kit.create()
    kit.send("hi")
    kit.finish()
    assert kit.restart().events == ()


def test_create_of_an_existing_stream_reports_it_and_writes_nothing() -> None:
    """The existing session is untouched."""
    kit = SessionKit([Event(kind=Kind.SESSION_STARTED)])
    out = kit.create({"x": "y"})
    assert out.events == () and out.reply.already_exists and not out.reply.created


def test_a_poisoned_ingress_is_recorded_and_the_session_serves_on() -> None:
    """The Runner's poison verdict becomes a lifecycle event."""
    kit = SessionKit()
    kit.create()
    out = kit.run(c.Poisoned(key="k9", detail="crashed twice"))
    assert out.kinds == [DONE] and out.events[0].phase == Phase.POISONED
    assert kit.send("hi").kinds == ["user.message", "turn.started", "action.admitted"]


# -- interceptors ----------------------------------------------------------------------------


class _Recorder:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def intercept(self, event: Ingress, session: SessionView, emitter: Emitter) -> InterceptResult:
        self.seen.append(str(event.kind))
        return InterceptResult(event=event)


def test_the_chain_sees_messages_interrupts_metadata_changes_and_switches() -> None:
    """Every ingress the seed routes through Runner.Run reaches the interceptors."""
    rec = _Recorder()
    kit = SessionKit(interceptors=[rec])
    kit.create()
    kit.send("hi")
    kit.interrupt()
    kit.set_metadata({"a": "b"})
    kit.switch("other")
    assert rec.seen == ["user.message", "user.interrupt", "session.properties", "session.switch"]


class _Announcer:
    def intercept(self, event: Ingress, session: SessionView, emitter: Emitter) -> InterceptResult:
        if event.text == "/note":
            emitter.notice("info", "before")
            emitter.emit(Event(kind=Kind.ASSISTANT, text="stored by the interceptor"))
            emitter.notice("warn", "after")
            return InterceptResult(event=None)
        return InterceptResult(event=event)


def test_an_interceptor_emits_notices_and_stored_events_in_order() -> None:
    """Each notice is placed after the events emitted before it."""
    kit = SessionKit(interceptors=[_Announcer(), SlashCommands()])
    kit.create()
    out = kit.send("/note")
    assert out.kinds == ["assistant.message", DONE]
    stored_seq = out.events[0].seq
    assert out.live == (
        (stored_seq - 1, "notice", "info", "before"),
        (stored_seq, "notice", "warn", "after"),
    )


def test_an_interceptor_may_not_emit_the_session_s_own_kinds() -> None:
    """turn and lifecycle events belong to the decider."""
    with pytest.raises(ValueError, match="may not emit"):
        Emitter().emit(Event(kind=Kind.TURN_STARTED))


def test_a_command_s_notice_comes_before_the_answer_it_precedes() -> None:
    """/model's success notice is placed before the properties event it stores."""
    kit = SessionKit()
    kit.create()
    out = kit.send("/model big")
    (notice,) = out.live
    assert notice[0] < out.events[0].seq


def test_a_switch_to_an_invalid_id_is_refused() -> None:
    """Ids with dots or wildcards are not session ids."""
    kit = SessionKit()
    kit.create()
    out = kit.switch("a.b")
    assert out.error == "InvalidRequest" and out.events == ()


# -- records -------------------------------------------------------------------------------


def test_seal_then_verify_records_both_on_the_stream() -> None:
    """The session appends record.sealed and record.verified itself."""
    kit = SessionKit()
    kit.create()
    sealed = kit.seal()
    assert sealed.kinds == ["record.sealed"] and sealed.reply.first == 1
    verified = kit.verify()
    assert verified.kinds == ["record.verified"] and verified.reply.ok
    assert verified.events[0].record["ok"] is True


def test_nothing_new_to_seal_stores_nothing() -> None:
    """A second seal right after the first has only the seal event itself... which is new."""
    kit = SessionKit()
    kit.create()
    kit.seal()
    again = kit.seal()
    assert again.kinds == ["record.sealed"]  # the first seal's own event is now sealed
    empty = SessionKit()
    assert empty.seal().reply.seq == 0


def test_a_failed_verification_is_recorded_too() -> None:
    """record.verified is written whenever verification runs, carrying the failure."""
    kit = SessionKit()
    kit.create()
    kit.seal()
    other = SessionKit()  # verifies with a key that did not sign
    other.log = kit.log
    other.state = kit.state
    out = other.verify()
    assert out.kinds == ["record.verified"] and not out.reply.ok
    assert out.events[0].record["ok"] is False and out.events[0].record["problem"]


@pytest.mark.parametrize("policy", list(BusyPolicy))
def test_a_repeated_key_is_answered_as_first_delivered_whatever_the_state_now(
    policy: BusyPolicy,
) -> None:
    """Mid-turn, under any policy, the redelivery of a stored message is its first ack."""
    kit = SessionKit(busy_policy=policy)
    kit.create()
    first = kit.send("hello", key="k1")
    again = kit.send("hello", key="k1")  # its turn is running now
    assert again.events == () and again.error == ""
    assert again.reply.duplicate and again.reply.seq == first.reply.seq


def test_a_repeated_interrupt_key_names_what_the_interrupt_stored() -> None:
    """The second delivery of an interrupt does not report nothing to interrupt."""
    kit = _running()
    first = kit.interrupt(key="i1")
    again = kit.interrupt(key="i1")
    assert again.reply.duplicate and again.reply.seq == first.reply.seq
    assert again.events == ()


def test_a_repeated_key_after_close_is_still_acknowledged() -> None:
    """A message stored before the close, delivered again after it, is not refused."""
    kit = SessionKit()
    kit.create()
    first = kit.send("hello", key="k1")
    kit.close()
    again = kit.send("hello", key="k1")
    assert again.error == "" and again.reply.duplicate and again.reply.seq == first.reply.seq


def test_interceptors_do_not_run_again_for_a_repeated_key() -> None:
    """The chain saw the ingress when it was stored; a redelivery skips it."""
    rec = _Recorder()
    kit = SessionKit(interceptors=[rec])
    kit.create()
    kit.set_metadata({"a": "b"}, key="m1")
    kit.set_metadata({"a": "b"}, key="m1")
    assert rec.seen == ["session.properties"]


def test_a_queued_turn_sees_the_answer_before_it_and_not_itself() -> None:
    """m2 waits behind turn 1; its turn's history is m1 and r1, not m1 and m2 again."""
    kit = SessionKit()
    kit.create()
    kit.send("m1")
    kit.send("m2")
    out = kit.finish(text="r1")
    (start,) = [e for e in out.effects if isinstance(e, c.StartTurn)]
    assert start.input.text == "m2"
    assert start.input.history == (("user", "m1"), ("assistant", "r1"))
