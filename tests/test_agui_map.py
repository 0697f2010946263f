"""The AG-UI mapping as tables: a session's stored events and live deltas in, AG-UI events
out, each one valid by AG-UI's own types and the runs well formed."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter

from actors.gateway._agui_map import RunView

ag_ui = pytest.importorskip("ag_ui.core")
EVENT: TypeAdapter[Any] = TypeAdapter(ag_ui.Event)

USER = 10


def _view(**kw: Any) -> RunView:
    return RunView(session="s", thread_id="t", run_id="r", after=USER, **kw)


def _feed(view: RunView, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = view.start({"turns": 1})
    for seq, ev in enumerate(events, start=USER + 1):
        if ev.get("live"):
            out += view.live(ev["kind"], ev.get("severity", ""), ev["text"])
        else:
            out += view.stored(seq, ev)
    for e in out:
        EVENT.validate_python(e)
    return out


def _types(out: list[dict[str, Any]]) -> list[str]:
    return [e["type"] if e["type"] != "CUSTOM" else e["name"] for e in out]


TOOL_TURN = [
    {"kind": "turn.started", "turn": 2},
    {"kind": "tool.call", "turn": 2, "tool": "clock", "toolUseID": "u1", "input": {}},
    {"kind": "tool.result", "turn": 2, "tool": "clock", "toolUseID": "u1", "result": "noon"},
    {"kind": "assistant.message", "turn": 2, "text": "it is noon"},
    {"kind": "turn.completed", "turn": 2, "stopReason": "end_turn", "usage": {}},
    {"kind": "session.lifecycle", "turn": 2, "phase": "done"},
]


def test_a_tool_turn_is_one_run_with_its_call_result_and_answer() -> None:
    out = _feed(_view(), TOOL_TURN)
    assert _types(out) == [
        "RUN_STARTED",
        "STATE_SNAPSHOT",
        "STEP_STARTED",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
        "RUN_FINISHED",
    ]
    assert out[4]["delta"] == "{}" and out[6]["content"] == "noon"
    assert out[-1]["outcome"] == {"type": "success"}


def test_events_of_earlier_and_other_turns_are_not_the_runs() -> None:
    """Events stored up to the run's message, and another turn's, add nothing."""
    view = _view()
    assert view.stored(USER, {"kind": "turn.started", "turn": 1}) == []
    out = _feed(view, [{"kind": "assistant.message", "turn": 1, "text": "old"}, *TOOL_TURN])
    assert "old" not in str(out)


def test_live_deltas_open_the_message_and_the_stored_text_closes_it() -> None:
    out = _feed(
        _view(),
        [
            {"kind": "turn.started", "turn": 1},
            {"live": True, "kind": "assistant.delta", "text": "hel"},
            {"live": True, "kind": "assistant.delta", "text": "lo "},
            {"kind": "assistant.message", "turn": 1, "text": "hello world"},
            {"kind": "turn.completed", "turn": 1, "stopReason": "end_turn"},
        ],
    )
    said = "".join(e["delta"] for e in out if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert said == "hello world"
    assert [e["type"] for e in out].count("TEXT_MESSAGE_START") == 1


def test_an_approval_pauses_the_run_with_an_interrupt_naming_the_call() -> None:
    out = _feed(
        _view(),
        [
            {"kind": "turn.started", "turn": 3},
            {"kind": "tool.call", "turn": 3, "tool": "http_get", "toolUseID": "u", "input": {}},
            {"kind": "action.pending", "turn": 3, "tool": "http_get", "toolUseID": "u", "call": 13},
            {"kind": "action.approval", "turn": 3, "call": 13, "allowed": True},
        ],
    )
    assert _types(out)[-2:] == ["STEP_FINISHED", "RUN_FINISHED"]
    (interrupt,) = out[-1]["outcome"]["interrupts"]
    assert interrupt["id"] == "13" and interrupt["toolCallId"] == "u"
    assert interrupt["reason"] == "approval"


def test_a_resumed_run_continues_inside_its_turn() -> None:
    view = RunView(session="s", thread_id="t", run_id="r2", after=13, turn=3)
    out = view.start(None) + view.stored(14, {"kind": "action.approval", "turn": 3})
    out += view.stored(15, {"kind": "turn.completed", "turn": 3, "stopReason": "end_turn"})
    assert _types(out) == [
        "RUN_STARTED",
        "STEP_STARTED",
        "vertebra.action.approval",
        "STEP_FINISHED",
        "RUN_FINISHED",
    ]


@pytest.mark.parametrize(
    ("end", "last", "detail"),
    [
        ({"kind": "turn.completed", "stopReason": "error", "error": "boom"}, "RUN_ERROR", "boom"),
        ({"kind": "turn.cancelled", "text": "partial", "reason": "x"}, "RUN_FINISHED", "cancelled"),
        ({"kind": "session.lifecycle", "phase": "closed"}, "RUN_ERROR", "closed"),
        ({"kind": "session.lifecycle", "phase": "failed", "error": "e"}, "RUN_ERROR", "failed"),
    ],
)
def test_how_a_run_ends(end: dict[str, Any], last: str, detail: str) -> None:
    view = _view()
    out = _feed(view, [{"kind": "turn.started", "turn": 1}, {**end, "turn": 1}])
    assert out[-1]["type"] == last and detail in str(out[-1])
    assert view.finished
    assert view.stored(99, {"kind": "assistant.message", "turn": 1, "text": "late"}) == []


def test_a_cancelled_turns_partial_text_is_said_before_the_run_ends() -> None:
    out = _feed(
        _view(),
        [{"kind": "turn.started", "turn": 1}, {"kind": "turn.cancelled", "turn": 1, "text": "hal"}],
    )
    assert [e.get("delta") for e in out if e["type"] == "TEXT_MESSAGE_CONTENT"] == ["hal"]


def test_unknown_kinds_and_notices_are_custom_events_carrying_what_was_stored() -> None:
    out = _feed(
        _view(),
        [
            {"kind": "turn.started", "turn": 1},
            {"kind": "child.spawned", "turn": 1, "child": "c"},
            {"live": True, "kind": "notice", "severity": "warning", "text": "careful"},
        ],
    )
    assert out[-2] == {
        "type": "CUSTOM",
        "name": "vertebra.child.spawned",
        "value": {"kind": "child.spawned", "turn": 1, "child": "c"},
    }
    assert out[-1]["value"] == {"text": "careful", "severity": "warning"}


def test_live_items_ahead_of_the_turns_start_wait_for_it_or_go_with_another_turn() -> None:
    view = _view()
    view.start(None)
    assert view.live("assistant.delta", "", "old turn") == []
    view.stored(11, {"kind": "turn.completed", "turn": 1, "stopReason": "end_turn"})
    assert view.live("assistant.delta", "", "[scripted]") == []
    out = view.stored(12, {"kind": "turn.started", "turn": 2})
    out += view.stored(13, {"kind": "assistant.message", "turn": 2, "text": "[scripted] hi"})
    said = "".join(e["delta"] for e in out if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert said == "[scripted] hi"
