"""The ledger thread, session metadata and the sessions index."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections import (
    ACTIVATES,
    CLOSED,
    EDITS,
    MODEL_MAX_OUTPUT_TOKENS,
    MODEL_NAME,
    MODEL_TEMPERATURE,
    MODEL_THINKING_LEVEL,
    REGENERATES,
    InfoFolder,
    SessionInfo,
    SessionsIndex,
    Thread,
    index_from,
    metadata_from,
    model_settings,
    reduce_index,
    reduce_metadata,
    thread_from,
    turns,
)
from spine import Event, Kind, MemoryLog, Phase, Usage, history

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
T0 = datetime(2026, 3, 1, tzinfo=UTC)


def user(seq: int, text: str, **extra: int) -> Event:
    return Event(kind=Kind.USER_MESSAGE, seq=seq, text=text, extra=extra)


def reply(seq: int, text: str) -> list[Event]:
    return [
        Event(kind=Kind.TURN_STARTED, seq=seq, turn=1),
        Event(kind=Kind.ASSISTANT, seq=seq + 1, text=text),
        Event(kind=Kind.TURN_COMPLETED, seq=seq + 2, usage=Usage(output_tokens=1)),
    ]


# -- thread ---------------------------------------------------------------------------------


def test_turns_pair_each_user_message_with_what_answered_it() -> None:
    """A turn holds the user's text, the assistant's reply, answer seqs, usage and state."""
    evs = [user(1, "hi"), *reply(2, "hello"), user(5, "bye"), *reply(6, "ciao")]
    path = turns(evs)
    assert [(t.id, t.parent, t.text, t.reply, t.state) for t in path] == [
        (1, 0, "hi", "hello", "done"),
        (5, 1, "bye", "ciao", "done"),
    ]
    assert path[0].answers == (2, 3, 4)
    assert path[0].usage == Usage(output_tokens=1)


def test_editing_a_message_branches_and_the_edit_becomes_the_active_path() -> None:
    """A user.message with extra {"edits": N} is a sibling of N; turns() follows the edit."""
    evs = [user(1, "a"), *reply(2, "A"), user(5, "b"), *reply(6, "B"), user(9, "b2", edits=5)]
    t = thread_from(evs)
    assert [x.text for x in t.turns()] == ["a", "b2"]
    assert [x.id for x in t.children(1)] == [5, 9]
    assert t.turn(9) is not None and t.turn(9).edit_of == 5  # type: ignore[union-attr]
    assert len(t) == 3


def test_regenerating_a_reply_adds_a_sibling_with_the_same_message() -> None:
    """{"regenerates": N} answers N's text again on a new branch; old reply stays in the tree."""
    evs = [user(1, "q"), *reply(2, "first"), user(5, "", regenerates=1), *reply(6, "second")]
    t = thread_from(evs)
    assert [(x.text, x.reply) for x in t.turns()] == [("q", "second")]
    assert [(x.text, x.reply) for x in t.children(0)] == [("q", "first"), ("q", "second")]


def test_activating_a_turn_switches_to_its_branch() -> None:
    """{"activates": N} moves the active path through N down to its newest descendants."""
    evs = [
        user(1, "a"),
        user(2, "b"),
        user(3, "b'", edits=2),
        user(4, "c'"),
        user(5, "", activates=2),
    ]
    t = thread_from(evs)
    assert [x.text for x in t.turns()] == ["a", "b"]
    t.apply(user(6, "", activates=3))
    assert [x.text for x in t.turns()] == ["a", "b'", "c'"]


def test_references_to_unknown_turns_are_plain_messages() -> None:
    """An edit or regenerate naming no turn is a plain message; a bad activate does nothing."""
    evs = [
        user(1, "a"),
        user(2, "b", edits=99),
        user(3, "c", regenerates=42),
        user(4, "", activates=7),
    ]
    assert [(x.id, x.parent) for x in turns(evs)] == [(1, 0), (2, 1), (3, 2)]


def test_a_cancelled_turn_keeps_its_partial_text() -> None:
    """turn.cancelled closes the active turn as cancelled with its partial text and usage."""
    evs = [
        user(1, "long task"),
        Event(kind=Kind.TURN_STARTED, seq=2),
        Event(kind=Kind.TURN_CANCELLED, seq=3, text="partial", reason="interrupt",
              usage=Usage(output_tokens=4)),
    ]  # fmt: skip
    (t,) = turns(evs)
    assert (t.state, t.reply, t.stop_reason, t.usage) == (
        "cancelled",
        "partial",
        "interrupt",
        Usage(output_tokens=4),
    )


def test_answers_before_any_user_message_are_ignored_and_replays_are_idempotent() -> None:
    """Answering events with no open turn change nothing; re-applying a message adds nothing."""
    t = Thread()
    t.apply(Event(kind=Kind.ASSISTANT, seq=1, text="hello?"))
    assert len(t) == 0
    t.apply(user(2, "x"))
    t.apply(user(2, "x"))
    assert len(t) == 1


def test_thread_from_does_not_modify_its_start() -> None:
    """thread_from copies its start thread, so folds stay pure."""
    base = thread_from([user(1, "a")])
    more = thread_from([user(2, "b")], start=base)
    assert len(base) == 1 and len(more) == 2
    assert base != more and thread_from([user(1, "a")]) == base


def test_edits_survive_the_logs_round_trip() -> None:
    """The extra fields naming an edit are stored as top-level JSON and read back."""
    log = MemoryLog()
    log.append(
        "s", [Event(kind=Kind.USER_MESSAGE, text="a"), Event(kind=Kind.USER_MESSAGE, text="b")]
    )
    log.append("s", [Event(kind=Kind.USER_MESSAGE, text="b2", extra={EDITS: 2})])
    assert b'"edits":2' in log.read("s", 2)[0].payload
    assert [x.text for x in turns(history(log, "s"))] == ["a", "b2"]


_ops = st.lists(
    st.tuples(st.sampled_from(["msg", "edit", "regen", "activate", "answer"]), st.integers(1, 30)),
    max_size=30,
)


@SETTINGS
@given(_ops)
def test_the_active_path_is_always_a_chain_from_the_root(ops: list[tuple[str, int]]) -> None:
    """Whatever the edits and switches, turns() runs from a first turn down parent links."""
    evs: list[Event] = []
    for i, (op, ref) in enumerate(ops, start=1):
        if op == "answer":
            evs.append(Event(kind=Kind.ASSISTANT, seq=i, text="r"))
        else:
            key = {"msg": None, "edit": EDITS, "regen": REGENERATES, "activate": ACTIVATES}[op]
            evs.append(user(i, f"m{i}", **({key: ref} if key else {})))
    t = thread_from(evs)
    path = t.turns()
    if path:
        assert path[0].parent == 0
        assert path[-1].id == t.active
    for parent, child in itertools.pairwise(path):
        assert child.parent == parent.id
    assert thread_from(evs[: len(evs) // 2]).turns() == turns(evs[: len(evs) // 2])


# -- metadata -------------------------------------------------------------------------------


def test_metadata_folds_from_properties_events() -> None:
    """Later values win; None deletes; other kinds are ignored."""
    evs = [
        Event(kind=Kind.PROPERTIES, properties={MODEL_NAME: "a", "k": "v"}),
        Event(kind=Kind.USER_MESSAGE, text="x", properties={"ignored": "1"}),
        Event(kind=Kind.PROPERTIES, properties={MODEL_NAME: "b", "k": None}),
    ]
    assert metadata_from(evs) == {MODEL_NAME: "b"}
    m: dict[str, str] = {}
    for e in evs:
        m = reduce_metadata(m, e)
    assert m == metadata_from(evs)


def test_model_settings_read_the_model_keys_and_report_bad_values() -> None:
    """Name, thinking level, temperature and max tokens parse; bad values are reported, unset."""
    s = model_settings(
        {MODEL_NAME: "m", MODEL_THINKING_LEVEL: "high", MODEL_TEMPERATURE: "0.5",
         MODEL_MAX_OUTPUT_TOKENS: "1024"}
    )  # fmt: skip
    assert (s.name, s.thinking_level, s.temperature, s.max_output_tokens, s.invalid) == (
        "m",
        "high",
        0.5,
        1024,
        (),
    )
    bad = model_settings({MODEL_TEMPERATURE: "hot", MODEL_MAX_OUTPUT_TOKENS: "-1"})
    assert bad.temperature is None and bad.max_output_tokens is None
    assert bad.invalid == (MODEL_TEMPERATURE, MODEL_MAX_OUTPUT_TOKENS)
    assert model_settings({}).name is None


# -- sessions index -------------------------------------------------------------------------


def _timed(kind: str, i: int, **kw: object) -> Event:
    return Event(kind=kind, time=T0 + timedelta(seconds=i), **kw)  # type: ignore[arg-type]


def test_the_index_lists_every_session_with_created_last_seq_and_activity() -> None:
    """Folded from the all-streams log: created time, last seq/position, last activity, count."""
    log = MemoryLog()
    log.append("a", [_timed(Kind.USER_MESSAGE, 0, text="x")])
    log.append("b", [_timed(Kind.USER_MESSAGE, 1, text="y")])
    log.append("a", [_timed(Kind.ASSISTANT, 2), _timed("future.kind", 3)])
    idx = index_from(log.read_all(0, None))
    assert [s.session for s in idx] == ["a", "b"]
    a = idx.get("a")
    assert a is not None
    assert (a.created, a.last_activity, a.last_seq, a.events) == (
        T0,
        T0 + timedelta(seconds=3),
        3,
        3,
    )
    assert (a.first_position, a.last_position) == (1, 4)
    assert [s.session for s in idx.by_activity()] == ["a", "b"]
    assert "b" in idx and len(idx) == 2


def test_the_index_tracks_terminal_state() -> None:
    """Converged/stalled/failed/closed are terminal; new input or reopening makes it live."""
    info = SessionInfo(session="s")
    steps = [
        (Event(kind=Kind.CONVERGED, seq=1), "converged"),
        (Event(kind=Kind.LIFECYCLE, seq=2, phase=Phase.RECOVERED), "converged"),
        (Event(kind=Kind.USER_MESSAGE, seq=3), ""),
        (Event(kind=Kind.STALLED, seq=4), "stalled"),
        (Event(kind=Kind.LIFECYCLE, seq=5, phase=Phase.CLOSED), CLOSED),
        (Event(kind=Kind.LIFECYCLE, seq=6, phase=Phase.OPENED), ""),
        (Event(kind=Kind.LIFECYCLE, seq=7, phase=Phase.FAILED), "failed"),
        (Event(kind=Kind.SESSION_STARTED, seq=8), ""),
        (Event(kind=Kind.CHILD_SPAWNED, seq=9, child="c"), ""),
        (Event(kind=Kind.CONVERGED, seq=10, goal="c"), ""),
    ]
    for e, terminal in steps:
        info = reduce_info_checked(info, e)
        assert info.terminal == terminal, e
    assert info.phase == Phase.FAILED and SessionsIndex({"s": info}).live() == [info]


def reduce_info_checked(info: SessionInfo, e: Event) -> SessionInfo:
    """reduce_info, checked against InfoFolder on the stored JSON."""
    from projections import reduce_info
    from spine import encode_event

    out = reduce_info(info, e, e.seq)
    f = InfoFolder(info.session)
    f.terminal, f.phase, f.children = info.terminal, info.phase, set(info.children)
    f.created, f.events = None, info.events
    f.first_position, f.last_position, f.last_seq = (
        info.first_position,
        info.last_position,
        info.last_seq,
    )
    f.feed(orjson.loads(encode_event(e)), e.seq)
    assert f.freeze() == out
    return out


_index_events = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.sampled_from(
            [Kind.USER_MESSAGE, Kind.CONVERGED, Kind.STALLED, Kind.CHILD_SPAWNED, Kind.ASSISTANT]
        ),
        st.sampled_from(["", *[str(p) for p in Phase]]),
        st.sampled_from(["", "k1", "k2"]),
    ),
    max_size=40,
)


@SETTINGS
@given(_index_events)
def test_the_index_folded_live_equals_the_index_folded_from_the_log(
    ops: list[tuple[str, str, str, str]],
) -> None:
    """reduce_index event by event, index_from(read_all) and InfoFolder all agree."""
    log = MemoryLog()
    live = SessionsIndex()
    for stream, kind, phase, child in ops:
        k = Kind.LIFECYCLE if phase and kind == Kind.ASSISTANT else kind
        res = log.append(stream, [Event(kind=k, phase=phase, child=child, goal=child)])
        for r in res.records:
            live = reduce_index(live, r.stream, r.event(), r.position)
    records = log.read_all(0, None)
    assert index_from(records) == live
    folders: dict[str, InfoFolder] = {}
    for r in records:
        folders.setdefault(r.stream, InfoFolder(r.stream)).feed(orjson.loads(r.payload), r.position)
    assert {s: f.freeze() for s, f in folders.items()} == dict(live.sessions)


def test_messages_not_yet_stored_still_form_a_chain() -> None:
    """Events without a seq (before append) get distinct negative ids, never the root's 0."""
    evs = [Event(kind=Kind.USER_MESSAGE, text="a"), Event(kind=Kind.USER_MESSAGE, text="b")]
    path = turns(evs)
    assert [(t.text, t.id) for t in path] == [("a", -1), ("b", -2)]
    assert path[1].parent == -1
