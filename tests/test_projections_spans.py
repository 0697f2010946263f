"""The span fold: a session's events as OpenTelemetry GenAI spans, deterministically."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from projections import (
    MODEL_NAME,
    MODEL_PROVIDER,
    SpanFolder,
    SpanRecord,
    project,
    provider_usage,
    span_id_for,
    spans_from,
    spans_of_tree,
    trace_id_for,
)
from spine import Event, Kind, Usage

T0 = datetime(2026, 3, 1, tzinfo=UTC)
PARENT = "0190f000-0000-7000-8000-000000000001"
CHILD = "0190f000-0000-7000-8000-000000000002"


def _numbered(rows: list[tuple[str, dict[str, Any]]]) -> list[Event]:
    return [
        Event(kind=kind, seq=i, time=T0 + timedelta(milliseconds=10 * i), **kw)
        for i, (kind, kw) in enumerate(rows, start=1)
    ]


def parent_events() -> list[Event]:
    """Four turns: a governed tool call with an approval wait and two model calls, a tool
    refused by governance, a turn cancelled mid model call, and a fan-out to one child."""
    reports = [
        {
            "prompt_tokens": 20,
            "completion_tokens": 3,
            "prompt_tokens_details": {"cached_tokens": 8},
        },
        {"prompt_tokens": 40, "completion_tokens": 5},
    ]
    return _numbered(
        [
            (Kind.SESSION_STARTED, {}),  # 1
            (Kind.PROPERTIES, {"properties": {MODEL_NAME: "m1", MODEL_PROVIDER: "openai"}}),  # 2
            (Kind.USER_MESSAGE, {"text": "deploy a"}),  # 3
            (Kind.TURN_STARTED, {"turn": 1}),  # 4
            (Kind.ACTION_ADMITTED, {"turn": 1, "action": "model", "call": 5}),  # 5
            (Kind.ACTION_COMPLETED, {"turn": 1, "action": "model", "call": 5}),  # 6
            (
                Kind.TOOL_CALL,
                {"turn": 1, "tool": "deploy", "tool_use_id": "c1", "input": '{"t":"a"}'},
            ),  # 7
            (
                Kind.ACTION_PENDING,
                {"turn": 1, "tool": "deploy", "tool_use_id": "c1", "action": "deploy", "call": 8},
            ),  # 8
            (Kind.ACTION_APPROVAL, {"call": 8, "allowed": True, "reason": "go"}),  # 9
            (
                Kind.ACTION_ADMITTED,
                {"turn": 1, "tool_use_id": "c1", "action": "deploy", "call": 8, "trust": "std"},
            ),  # 10
            (Kind.EGRESS, {"turn": 1, "host": "127.0.0.1", "allowed": True, "reason": "ok"}),  # 11
            (Kind.ACTION_COMPLETED, {"turn": 1, "tool_use_id": "c1", "call": 8}),  # 12
            (
                Kind.TOOL_RESULT,
                {"turn": 1, "tool": "deploy", "tool_use_id": "c1", "result": "deployed"},
            ),  # 13
            (Kind.ACTION_ADMITTED, {"turn": 1, "action": "model", "call": 14}),  # 14
            (Kind.ASSISTANT, {"turn": 1, "text": "done"}),  # 15
            (Kind.ACTION_COMPLETED, {"turn": 1, "action": "model", "call": 14}),  # 16
            (
                Kind.TURN_COMPLETED,
                {
                    "turn": 1,
                    "stop_reason": "end_turn",
                    "usage": Usage(input_tokens=60, output_tokens=8, cache_read_tokens=8),
                    "extra": {"providerUsage": reports},
                },
            ),  # 17
            (Kind.TURN_STARTED, {"turn": 2}),  # 18
            (Kind.ACTION_ADMITTED, {"turn": 2, "action": "model", "call": 19}),  # 19
            (Kind.ACTION_COMPLETED, {"turn": 2, "action": "model", "call": 19}),  # 20
            (Kind.TOOL_CALL, {"turn": 2, "tool": "shell", "tool_use_id": "c2"}),  # 21
            (
                Kind.ACTION_REJECTED,
                {
                    "turn": 2,
                    "tool_use_id": "c2",
                    "action": "shell",
                    "call": 22,
                    "fault": "capability_denied",
                },
            ),  # 22
            (
                Kind.TOOL_RESULT,
                {"turn": 2, "tool": "shell", "tool_use_id": "c2", "result": "no", "is_error": True},
            ),  # 23
            (Kind.ACTION_ADMITTED, {"turn": 2, "action": "model", "call": 24}),  # 24
            (
                Kind.ACTION_COMPLETED,
                {"turn": 2, "action": "model", "call": 24, "fault": "http_500"},
            ),  # 25
            (
                Kind.TURN_COMPLETED,
                {
                    "turn": 2,
                    "stop_reason": "error",
                    "error": "server error",
                    "usage": Usage(input_tokens=5, output_tokens=1),
                },
            ),  # 26
            (Kind.TURN_STARTED, {"turn": 3}),  # 27
            (Kind.ACTION_ADMITTED, {"turn": 3, "action": "model", "call": 28}),  # 28
            (
                Kind.TURN_CANCELLED,
                {
                    "turn": 3,
                    "text": "part",
                    "reason": "interrupt",
                    "usage": Usage(input_tokens=2, output_tokens=1),
                },
            ),  # 29
            (Kind.TURN_STARTED, {"turn": 4}),  # 30
            (Kind.CHILD_SPAWNED, {"turn": 4, "child": CHILD, "goal": PARENT, "text": "sub"}),  # 31
            (Kind.CHILD_COMPLETED, {"turn": 4, "child": CHILD, "result": "sub done"}),  # 32
            (Kind.TURN_COMPLETED, {"turn": 4, "stop_reason": "end_turn"}),  # 33
        ]
    )


def child_events() -> list[Event]:
    return _numbered(
        [
            (Kind.SESSION_STARTED, {"text": "sub"}),  # 1
            (Kind.TURN_STARTED, {"turn": 1}),  # 2
            (Kind.ACTION_ADMITTED, {"turn": 1, "action": "model", "call": 3}),  # 3
            (Kind.ASSISTANT, {"turn": 1, "text": "sub done"}),  # 4
            (Kind.ACTION_COMPLETED, {"turn": 1, "action": "model", "call": 3}),  # 5
            (
                Kind.TURN_COMPLETED,
                {
                    "turn": 1,
                    "stop_reason": "end_turn",
                    "usage": Usage(input_tokens=3, output_tokens=2),
                },
            ),  # 6
        ]
    )


def _tree(spans: list[SpanRecord]) -> list[tuple[Any, ...]]:
    # The golden form: each span by name under its parent, with what a reader checks.
    names = {s.span_id: s.name for s in spans}
    keep = (
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
        "gen_ai.usage.cache_read.input_tokens",
        "gen_ai.response.finish_reasons",
        "vertebra.governance.decision",
        "vertebra.governance.fault",
        "vertebra.turn.outcome",
        "error.type",
    )
    return [
        (
            s.name,
            s.kind,
            names.get(s.parent_span_id, s.parent_span_id),
            s.status,
            {k: v for k, v in s.attributes if k in keep},
            [e.name for e in s.events],
        )
        for s in spans
    ]


U = "gen_ai.usage."
FINISH = "gen_ai.response.finish_reasons"
DECISION = "vertebra.governance.decision"
OUTCOME = "vertebra.turn.outcome"


def _usage(i: int, o: int, c: int) -> dict[str, int]:
    return {U + "input_tokens": i, U + "output_tokens": o, U + "cache_read.input_tokens": c}


# In start order: name, kind, parent's name, status, attributes, span events.
GOLDEN = [
    ("invoke_agent", "INTERNAL", "", "UNSET", {**_usage(60, 8, 8), OUTCOME: "completed"}, []),
    ("chat m1", "CLIENT", "invoke_agent", "UNSET", {**_usage(20, 3, 8), FINISH: ("tool_use",)}, []),
    ("execute_tool deploy", "INTERNAL", "invoke_agent", "UNSET", {DECISION: "admitted"},
     ["vertebra.approval.requested", "vertebra.approval", "vertebra.egress"]),
    ("chat m1", "CLIENT", "invoke_agent", "UNSET", {**_usage(40, 5, 0), FINISH: ("end_turn",)}, []),
    ("invoke_agent", "INTERNAL", "", "ERROR",
     {**_usage(5, 1, 0), OUTCOME: "completed", "error.type": "error"}, []),
    ("chat m1", "CLIENT", "invoke_agent", "UNSET", {FINISH: ("tool_use",)}, []),
    ("execute_tool shell", "INTERNAL", "invoke_agent", "ERROR",
     {DECISION: "rejected", "vertebra.governance.fault": "capability_denied",
      "error.type": "capability_denied"}, []),
    ("chat m1", "CLIENT", "invoke_agent", "ERROR",
     {FINISH: ("error",), "error.type": "http_500"}, []),
    ("invoke_agent", "INTERNAL", "", "UNSET", {**_usage(2, 1, 0), OUTCOME: "cancelled"}, []),
    ("chat m1", "CLIENT", "invoke_agent", "ERROR",
     {FINISH: ("cancelled",), "error.type": "cancelled"}, []),
    ("invoke_agent", "INTERNAL", "", "UNSET", {**_usage(0, 0, 0), OUTCOME: "completed"}, []),
    (f"invoke_agent {CHILD}", "INTERNAL", "invoke_agent", "UNSET", {}, []),
]  # fmt: skip


def test_a_known_event_sequence_folds_into_the_golden_span_tree() -> None:
    """Tool call with an approval wait, a rejection, a failed model call, a cancelled turn
    and a spawn fold into exactly the expected spans, parents, statuses and figures."""
    spans = spans_from(parent_events(), PARENT)
    assert _tree(sorted(spans, key=lambda s: s.start or T0)) == GOLDEN


def test_ids_are_derived_from_the_session_id_and_the_opening_seq() -> None:
    """Each turn is its own trace named by its turn.started seq; every span's id is the hash
    of the seq of the event that opened it, so nothing depends on the clock or a counter."""
    spans = spans_from(parent_events(), PARENT)
    roots = [s for s in spans if s.name == "invoke_agent"]
    assert [s.trace_id for s in roots] == [trace_id_for(PARENT, q) for q in (4, 18, 27, 30)]
    assert [s.span_id for s in roots] == [span_id_for(PARENT, q) for q in (4, 18, 27, 30)]
    first = [s for s in spans if s.trace_id == roots[0].trace_id]
    assert sorted(s.span_id for s in first) == sorted(span_id_for(PARENT, q) for q in (4, 5, 7, 14))
    assert all(len(s.trace_id) == 32 and len(s.span_id) == 16 for s in spans)
    assert len({s.span_id for s in spans}) == len(spans)
    assert trace_id_for(PARENT, 4) != trace_id_for(CHILD, 4)


def test_replaying_the_same_log_twice_gives_identical_spans() -> None:
    """Two folds of the same events, one fed event by event, are equal span for span."""
    first = spans_from(parent_events(), PARENT, capture_content=True)
    folder = SpanFolder(PARENT, capture_content=True)
    second = [s for ev in parent_events() for s in folder.feed(ev)]
    assert first == second
    assert spans_of_tree({PARENT: parent_events(), CHILD: child_events()}, PARENT) == (
        spans_of_tree({CHILD: child_events(), PARENT: parent_events()}, PARENT)
    )


def test_times_come_from_the_events() -> None:
    """A span starts at its opening event's time and ends at its closing event's time."""
    spans = spans_from(parent_events(), PARENT)
    tool = next(s for s in spans if s.name == "execute_tool deploy")
    assert (tool.start, tool.end) == (
        T0 + timedelta(milliseconds=70),
        T0 + timedelta(milliseconds=130),
    )
    approval = next(e for e in tool.events if e.name == "vertebra.approval")
    assert approval.time == T0 + timedelta(milliseconds=90)
    assert dict(approval.attributes)["vertebra.governance.approved"] is True


def test_a_child_session_is_a_linked_trace_under_the_parents_spawn() -> None:
    """The child's turns are their own trace, linked to the parent's spawn span, which is a
    child of the parent's turn."""
    spans = spans_of_tree({PARENT: parent_events(), CHILD: child_events()}, PARENT)
    spawn = next(s for s in spans if s.name == f"invoke_agent {CHILD}")
    assert spawn.trace_id == trace_id_for(PARENT, 30)
    assert spawn.parent_span_id == span_id_for(PARENT, 30)
    assert spawn.attribute("gen_ai.agent.id") == CHILD
    child_turn = next(
        s
        for s in spans
        if s.name == "invoke_agent" and s.attribute("gen_ai.conversation.id") == CHILD
    )
    assert child_turn.trace_id == trace_id_for(CHILD, 2) != spawn.trace_id
    assert [(lk.trace_id, lk.span_id) for lk in child_turn.links] == [
        (spawn.trace_id, spawn.span_id)
    ]
    child_chat = next(s for s in spans if s.parent_span_id == child_turn.span_id)
    assert child_chat.attribute("gen_ai.usage.output_tokens") == 2


def test_the_turn_figures_add_up_to_the_status_projection() -> None:
    """The invoke_agent spans' token counts sum to the status projection's usage."""
    events = parent_events()
    status = project(events)
    roots = [s for s in spans_from(events, PARENT) if s.name == "invoke_agent"]
    assert sum(s.attribute("gen_ai.usage.input_tokens") for s in roots) == status.usage.input_tokens
    assert sum(s.attribute("gen_ai.usage.output_tokens") for s in roots) == (
        status.usage.output_tokens
    )
    assert sum(s.attribute("gen_ai.usage.cache_read.input_tokens") for s in roots) == (
        status.usage.cache_read_tokens
    )


def test_content_is_only_captured_when_asked() -> None:
    """Without the capture switch no message, argument or result text is in any span."""
    plain = spans_from(parent_events(), PARENT)
    blob = repr(plain)
    assert "deploy a" not in blob and "deployed" not in blob and '"t":"a"' not in blob
    captured = spans_from(parent_events(), PARENT, capture_content=True)
    turn = next(s for s in captured if s.name == "invoke_agent")
    assert orjson.loads(turn.attribute("gen_ai.input.messages"))[0]["parts"][0]["content"] == (
        "deploy a"
    )
    tool = next(s for s in captured if s.name == "execute_tool deploy")
    assert tool.attribute("gen_ai.tool.call.arguments") == '{"t":"a"}'
    assert tool.attribute("gen_ai.tool.call.result") == "deployed"


def test_provider_usage_reports_of_every_wire_format_are_read() -> None:
    """OpenAI chat, Responses and Anthropic usage reports become the seed's usage, with
    cached input counted inside input tokens."""
    assert provider_usage({"prompt_tokens": 9, "completion_tokens": 2}) == Usage(
        input_tokens=9, output_tokens=2
    )
    assert provider_usage(
        {"input_tokens": 9, "output_tokens": 2, "output_tokens_details": {"reasoning_tokens": 1}}
    ) == Usage(input_tokens=9, output_tokens=2, reasoning_tokens=1)
    anthropic = {
        "input_tokens": 1,
        "output_tokens": 2,
        "cache_read_input_tokens": 5,
        "cache_creation_input_tokens": 3,
    }
    assert provider_usage(anthropic) == Usage(
        input_tokens=9, output_tokens=2, cache_read_tokens=5, cache_write_tokens=3
    )
    assert provider_usage("junk") is None and provider_usage({"x": 1}) is None


def test_a_running_turn_yields_no_span_until_it_ends() -> None:
    """Spans are emitted when they finish; a turn still running has none yet."""
    events = parent_events()[:15]
    spans = spans_from(events, PARENT)
    assert [s.name for s in spans] == ["execute_tool deploy"]


def test_a_childs_events_mirrored_onto_its_parent_are_left_to_the_childs_own_trace() -> None:
    """When a child folds back, its model calls and turn end are copied onto the parent's
    stream attributed to it by ``goal``: the parent's spans are the same as without them
    (its turn does not end at the child's turn end, no chat is counted twice)."""
    import attrs

    events = parent_events()
    completed = next(i for i, e in enumerate(events) if e.kind == Kind.CHILD_COMPLETED)
    mirrored = [
        attrs.evolve(e, goal=CHILD)
        for e in child_events()
        if e.kind in (Kind.ACTION_ADMITTED, Kind.TURN_COMPLETED)
    ]
    with_mirror = [*events[:completed], *mirrored, *events[completed:]]
    renumbered = [
        attrs.evolve(e, seq=i, time=T0 + timedelta(milliseconds=10 * i))
        for i, e in enumerate(with_mirror, start=1)
    ]

    def shape(spans: list[SpanRecord]) -> list[tuple[str, str, Any, Any]]:
        names = {s.span_id: s.name for s in spans}
        return [
            (
                s.name,
                names.get(s.parent_span_id, ""),
                s.attribute("gen_ai.usage.output_tokens"),
                s.status,
            )
            for s in spans
        ]

    assert shape(spans_from(renumbered, PARENT)) == shape(spans_from(events, PARENT))
