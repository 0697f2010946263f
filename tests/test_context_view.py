"""The model's view of a session as a pure projection of its log, and the rules that
decide when and what to compact: tables, without processes (`actors.testing.SessionKit`
for the decider's side)."""

from __future__ import annotations

import orjson
import pytest

from actors.agents.context import (
    chars_of,
    chunks,
    due,
    elide,
    estimate,
    is_overflow,
    model_view,
    plan,
    ratio,
    summary_budget,
    tool_limit,
)
from actors.agents.formats import chat_body
from actors.agents.window import _llama, _ollama, _vllm, known_window
from actors.agents.wire import ModelRequest
from actors.session.rules import commands as c
from actors.spec import ContextView, TurnInput
from actors.testing import SessionKit
from projections import SettingsError, context_settings
from spine import Event, Kind, Usage

OPENAI = {
    "ore.model.provider": "openai",
    "ore.model.base_url": "http://127.0.0.1:9/v1",
    "ore.model.name": "fake-1",
    "ore.model.context_window": "2000",
}


def _turn_input(out: object) -> TurnInput:
    (start,) = [e for e in out.effects if isinstance(e, c.StartTurn)]  # type: ignore[attr-defined]
    return start.input


def _body(ti: TurnInput) -> bytes:
    """The chat-completions body of the turn's first model call, as sent."""
    system, msgs, _ = model_view(ti, ti.spec.system)
    req = ModelRequest(model=ti.spec.model, messages=msgs, system=system)
    return orjson.dumps(chat_body(req))


def _kit(md: dict[str, str] | None = None) -> SessionKit:
    kit = SessionKit()
    kit.create(metadata=md if md is not None else OPENAI)
    return kit


def _converse(kit: SessionKit, n: int, size: int = 10) -> list[TurnInput]:
    inputs = []
    for i in range(n):
        inputs.append(_turn_input(kit.send(f"q{i} " + "x" * size)))
        kit.finish(text=f"a{i}")
    return inputs


def _seq_of(kit: SessionKit, kind: str, text: str) -> int:
    return next(e.seq for e in kit.events if e.kind == kind and e.text == text)


def _compacted(first: int, last: int, summary: str) -> Event:
    return Event(kind=Kind.CONTEXT_COMPACTED, text=summary, extra={"fromSeq": first, "toSeq": last})


# -- the view ----------------------------------------------------------------------------


def test_the_scripted_model_without_a_window_manages_nothing() -> None:
    kit = _kit({})
    assert _turn_input(kit.send("hi")).context is None


def test_the_view_without_a_compaction_is_the_whole_conversation() -> None:
    kit = _kit()
    _converse(kit, 2)
    ti = _turn_input(kit.send("last"))
    ctx = ti.context
    assert ctx is not None and ctx.window == 2000 and ctx.window_source == "setting"
    system, msgs, _ = model_view(ti, None)
    assert system is None
    assert [(m.role, m.text[:2]) for m in msgs] == [
        ("user", "q0"),
        ("assistant", "a0"),
        ("user", "q1"),
        ("assistant", "a1"),
        ("user", "la"),
    ]
    # Aligned: each history entry knows its seq.
    assert ctx.seqs == tuple(at for _, _, at in kit.state.stored.history if at < ctx.seqs[-1] + 1)


def test_a_compaction_replaces_its_span_and_leaves_every_event_in_the_log() -> None:
    kit = _kit()
    _converse(kit, 3)
    first = _seq_of(kit, Kind.USER_MESSAGE, "q0 " + "x" * 10)
    last = _seq_of(kit, Kind.ASSISTANT, "a1")
    ti = _turn_input(kit.send("next"))
    kit.progress(events=[_compacted(first, last, "they said q0 and q1")])
    kit.finish(text="ok")
    ti = _turn_input(kit.send("after"))
    system, msgs, _ = model_view(ti, "be brief")
    assert system == (
        f"be brief\n\nSummary of the earlier conversation (events {first} to {last}):\n"
        "they said q0 and q1"
    )
    assert [m.text[:2] for m in msgs] == ["q2", "a2", "ne", "ok", "af"]
    # Non-destructive: the stored stream and the kept history still hold everything.
    assert [e.text for e in kit.events if e.kind == Kind.USER_MESSAGE][:2] == [
        "q0 " + "x" * 10,
        "q1 " + "x" * 10,
    ]
    assert kit.state.stored.history[0][0:2] == ("user", "q0 " + "x" * 10)


def test_uncompacting_restores_the_earlier_view() -> None:
    kit = _kit()
    _converse(kit, 2)
    before = _body(_turn_input(kit.send("x")))
    kit.progress(events=[_compacted(1, _seq_of(kit, Kind.ASSISTANT, "a0"), "s")])
    kit.finish(text="y")
    comp = next(e.seq for e in kit.events if e.kind == Kind.CONTEXT_COMPACTED)
    assert b"Summary of the earlier" in _body(_turn_input(kit.send("z")))
    kit.finish(text="w")
    kit.send("u")
    kit.progress(events=[Event(kind=Kind.CONTEXT_UNCOMPACTED, call=comp)])
    kit.finish(text="v")
    after = _body(_turn_input(kit.send("t")))
    assert b"Summary of the earlier" not in after
    assert (
        orjson.loads(after)["messages"][: len(orjson.loads(before)["messages"]) - 1]
        == (orjson.loads(before)["messages"][:-1])
    )


def test_the_same_log_gives_byte_identical_requests_after_a_restart() -> None:
    kit = _kit()
    _converse(kit, 3)
    kit.send("mid")
    kit.progress(events=[_compacted(1, _seq_of(kit, Kind.ASSISTANT, "a1"), "summary")])
    kit.finish(text="done")
    live = _body(_turn_input(kit.send("again")))
    assert live == _body(_turn_input_from(list(kit.events)))
    kit.finish(text="k")
    kit.restart()  # a new incarnation folds the same stored events
    after = _body(_turn_input(kit.send("once more")))
    assert after == _body(_turn_input_from(list(kit.events)))
    assert b"summary" in live and b"summary" in after


def _turn_input_from(events: list[Event]) -> TurnInput:
    """The TurnInput of the last turn started in ``events``, rebuilt by a fresh fold of
    everything stored before it."""
    from actors.session.rules.state import SessionState, fold
    from actors.session.rules.turns import settle

    at = max(i for i, e in enumerate(events) if e.kind == Kind.TURN_STARTED)
    st = fold(SessionState(session_id="s1"), events[:at])
    d = settle(c.Session(stored=st), c.Settle())
    (start,) = [e for e in d.effects if isinstance(e, c.StartTurn)]
    return start.input


def test_a_large_tool_result_is_elided_to_a_stub_naming_its_seq() -> None:
    kit = _kit()
    kit.send("use a tool")
    big = "y" * 50_000
    kit.progress(
        events=[
            Event(kind=Kind.TOOL_CALL, tool="t", tool_use_id="c1", input="{}"),
            Event(kind=Kind.TOOL_RESULT, tool="t", tool_use_id="c1", result=big),
        ]
    )
    kit.finish(text="done")
    seq = next(e.seq for e in kit.events if e.kind == Kind.TOOL_RESULT)
    ti = _turn_input(kit.send("next"))
    _, msgs, _ = model_view(ti, None)
    (tool,) = [m for m in msgs if m.role == "tool"]
    assert ti.context is not None
    assert len(tool.text) < tool_limit(ti.context) + 200
    assert f"of 50000 characters elided (event seq {seq})" in tool.text
    # The call keeps its result: neither is dropped alone.
    assert [m.role for m in msgs] == ["user", "assistant", "tool", "assistant", "user"]
    # The stored result is whole.
    assert next(e.result for e in kit.events if e.kind == Kind.TOOL_RESULT) == big


# -- the trigger and the span ------------------------------------------------------------


def _ctx(**kw: object) -> ContextView:
    return ContextView(**{"window": 1000, "compact_at": 0.8, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("chars", "reserve", "calibration", "expected"),
    [
        (2000, 0, (0, 0), False),  # 667 tokens at 1/3: under 800
        (2500, 0, (0, 0), True),  # 834 tokens
        (2000, 200, (0, 0), True),  # the output reserved pushes it over
        (3000, 0, (4000, 1000), False),  # calibrated at 1/4: 750 tokens
        (3300, 0, (4000, 1000), True),  # 825
    ],
)
def test_compaction_is_due_past_compact_at_of_the_window(
    chars: int, reserve: int, calibration: tuple[int, int], expected: bool
) -> None:
    assert due(_ctx(calibration=calibration), chars, reserve) is expected


def test_an_unknown_window_is_never_due_and_calibration_is_bounded() -> None:
    assert not due(_ctx(window=0), 10**9)
    assert ratio(_ctx(calibration=(10, 10_000))) == 1.5
    assert ratio(_ctx(calibration=(10_000, 1))) == 0.05
    assert estimate(_ctx(calibration=(100, 25)), 400) == 100


def _history(*turns: list[tuple[str, str]]) -> tuple[tuple[tuple[str, str], ...], tuple[int, ...]]:
    entries = [e for t in turns for e in t]
    return tuple(entries), tuple(range(10, 10 + len(entries)))


CALL = orjson.dumps({"id": "c", "name": "t", "input": "{}"}).decode()
RESULT = orjson.dumps({"id": "c", "name": "t", "result": "r", "isError": False}).decode()
T1 = [("user", "a"), ("tool.call", CALL), ("tool.result", RESULT), ("assistant", "b")]
T2 = [("user", "c"), ("assistant", "d")]
T3 = [("user", "e"), ("tool.call", CALL), ("tool.result", RESULT)]


@pytest.mark.parametrize(
    ("keep", "covered", "expected"),
    [
        (2, (0, 0), (10, 13)),  # keeps T2 and T3, summarises T1 whole (call with result)
        (1, (0, 0), (10, 15)),
        (0, (0, 0), (10, 18)),
        (3, (0, 0), None),  # nothing older than the kept turns
        (1, (10, 13), (10, 15)),  # folds the next span into the summary in force
        (2, (10, 13), None),
    ],
)
def test_the_span_ends_before_a_user_message(
    keep: int, covered: tuple[int, int], expected: tuple[int, int] | None
) -> None:
    hist, seqs = _history(T1, T2, T3)
    ti = TurnInput(
        session_id="s",
        turn=4,
        text="now",
        history=hist,
        context=_ctx(seqs=seqs, covered=covered, summary="prev" if covered[1] else ""),
    )
    p = plan(ti, keep)
    assert (None if p is None else (p.first, p.last)) == expected
    if p is not None:
        kept = [e for e, at in zip(hist, seqs, strict=True) if at > p.last]
        assert not kept or kept[0][0] == "user"


def test_the_summariser_input_is_bounded_whatever_the_span() -> None:
    ctx = _ctx(window=4096)
    in_chars, out_tokens = summary_budget(ctx)
    assert estimate(ctx, in_chars) + out_tokens < ctx.window
    huge = [("user", "u" * 100_000), ("assistant", "a" * 10), ("user", "v" * 3000)] * 5
    pieces = chunks(huge, in_chars // 2)
    assert len(pieces) > 1
    assert all(len(p) <= in_chars // 2 + 200 for p in pieces)
    assert "characters elided" in pieces[0]


def test_elide_keeps_short_text_and_cuts_long_text() -> None:
    assert elide("short", 100) == "short"
    cut = elide("z" * 1000, 100, seq=7)
    assert cut.startswith("z" * 50) and "(event seq 7)" in cut and len(cut) < 200


def test_chars_of_counts_text_calls_and_system() -> None:
    ti = TurnInput(session_id="s", turn=1, text="hello", history=(("tool.call", CALL),))
    _, msgs, _ = model_view(ti, "sys")
    assert chars_of("sys", msgs) > len("sys") + len("hello")


# -- the server's answers ----------------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        'answered 400: {"error":{"message":"This model\'s maximum context length is 8192 '
        'tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}',
        'answered 400: {"type":"error","error":{"type":"invalid_request_error",'
        '"message":"prompt is too long: 210000 tokens > 200000 maximum"}}',
        'answered 400: {"error":{"code":400,"message":"the request exceeds the available '
        'context size","type":"exceed_context_size_error","n_ctx":4096}}',
    ],
)
def test_each_formats_overflow_error_is_recognised(message: str) -> None:
    assert is_overflow(RuntimeError(message))


def test_other_errors_are_not_overflow() -> None:
    assert not is_overflow(RuntimeError("answered 401: invalid api key"))


def test_window_answers_of_each_server() -> None:
    assert _llama({"default_generation_settings": {"n_ctx": 4096}}) == 4096
    assert _llama({"n_ctx": 2048}) == 2048
    assert _llama({"nothing": 1}) == 0
    models = {"data": [{"id": "other", "max_model_len": 1}, {"id": "m", "max_model_len": 32768}]}
    assert _vllm(models, "m") == 32768 and _vllm(models, "absent") == 0
    assert _ollama({"parameters": "num_ctx 16384\nstop x"}) == 16384
    assert _ollama({"model_info": {"llama.context_length": 131072}}) == 4096
    assert known_window("openai/gpt-4o-mini") == (128000, "table (gpt-4o)")
    assert known_window("llama3.1:8b") == (131072, "table (llama3.1)")
    assert known_window("mystery")[1] == "default"


# -- the fold and the settings -----------------------------------------------------------


def test_the_fold_keeps_window_answers_and_calibration_from_events() -> None:
    kit = _kit({k: v for k, v in OPENAI.items() if k != "ore.model.context_window"})
    ti = _turn_input(kit.send("one"))
    assert ti.context is not None and ti.context.window == 0  # the agent will ask
    key = ti.context.window_key
    kit.progress(
        events=[
            Event(
                kind=Kind.CONTEXT_WINDOW,
                extra={"tokens": 4096, "source": "llama.cpp /props", "key": key},
            ),
            Event(
                kind=Kind.ACTION_COMPLETED,
                action="model",
                call=ti.model_call,
                extra={"context": {"chars": 1000, "inputTokens": 300}},
            ),
        ]
    )
    kit.finish(text="a", usage=Usage(input_tokens=300, output_tokens=1))
    ctx = _turn_input(kit.send("two")).context
    assert ctx is not None
    assert (ctx.window, ctx.window_source, ctx.calibration) == (
        4096,
        "llama.cpp /props",
        (1000, 300),
    )
    kit.finish(text="b")
    # Another model is another window: asked again.
    kit.set_metadata({"ore.model.name": "other"})
    assert _turn_input(kit.send("three")).context.window == 0  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("ore.model.context_window", "12"),
        ("ore.model.context_window", "lots"),
        ("context.compact_at", "1.5"),
        ("context.keep_recent", "-1"),
        ("context.summary_model", " "),
    ],
)
def test_a_bad_context_setting_fails_the_turn_not_the_session(key: str, value: str) -> None:
    with pytest.raises(SettingsError, match=key.replace(".", r"\.")):
        context_settings({key: value})
    kit = _kit({**OPENAI, key: value})
    out = kit.send("hi")
    ended = [e for e in out.events if e.kind == Kind.TURN_COMPLETED]
    assert ended and key in ended[0].error
    assert not kit.state.stored.terminal


def test_history_shows_a_compaction_marker_with_the_span_it_covers() -> None:
    from actors.cli._format import detail

    ev = Event(kind=Kind.CONTEXT_COMPACTED, text="s", extra={"fromSeq": 3, "toSeq": 9})
    assert detail(ev) == "#3-#9 summary: s"
    failed = Event(kind=Kind.CONTEXT_COMPACTED, extra={"fromSeq": 3, "toSeq": 9}, error="")
    assert "no summary could be written" in detail(failed)
    win = Event(kind=Kind.CONTEXT_WINDOW, extra={"tokens": 4096, "source": "llama.cpp /props"})
    assert detail(win) == "4096 tokens (llama.cpp /props)"


def test_slash_compact_asks_the_next_turn_and_uncompact_takes_the_last_summary_back() -> None:
    kit = _kit()
    _converse(kit, 3)
    out = kit.send("/compact")
    assert out.reply.consumed and Kind.CONTEXT_COMPACT in out.kinds
    ti = _turn_input(kit.send("go"))
    assert ti.context is not None and ti.context.force
    kit.progress(events=[_compacted(1, _seq_of(kit, Kind.ASSISTANT, "a1"), "sum")])
    kit.finish(text="ok")
    ti = _turn_input(kit.send("next"))
    assert ti.context is not None and not ti.context.force and ti.context.summary == "sum"
    kit.finish(text="ok")
    out = kit.send("/uncompact")
    assert out.reply.consumed and Kind.CONTEXT_UNCOMPACTED in out.kinds
    ti = _turn_input(kit.send("after"))
    assert ti.context is not None and ti.context.summary == "" and ti.context.covered == (0, 0)
    assert kit.send("/compact now").reply.notices[0][0] == "error"
