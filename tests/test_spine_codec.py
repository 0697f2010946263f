"""The JSON codec: the seed's field names, omitted empties, raw input, preservation, errors."""

from __future__ import annotations

import copy
import gc
import pathlib
import pickle
import sqlite3
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import attrs
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import KNOWN_FIELDS, event_json, events, raw_json

from spine import (
    SCHEMA_VERSION,
    DecodeError,
    Event,
    InvalidArgumentError,
    Kind,
    Record,
    SpineError,
    SqliteLog,
    Usage,
    _codec,
    converter,
    decode_event,
    encode_event,
    event_from_dict,
    event_to_dict,
    history,
    register_upcaster,
)

WHEN = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)


def full_event() -> Event:
    """An event with every field set to something non-empty."""
    return Event(
        kind=Kind.TURN_COMPLETED,
        seq=7,
        time=WHEN,
        actor="agent",
        goal="g-1",
        child="c-1",
        turn=3,
        text="done",
        tool="grep",
        tool_use_id="toolu_9",
        input='{"q":"x"}',
        result="3 matches",
        is_error=True,
        stop_reason="end_turn",
        usage=Usage(
            input_tokens=10,
            output_tokens=20,
            cache_read_tokens=30,
            cache_write_tokens=40,
            reasoning_tokens=50,
        ),
        error="boom",
        action="write_file",
        call=12,
        trust="sandboxed",
        fault="denied",
        host="10.0.0.1",
        allowed=True,
        reason="policy",
        phase="opened",
        session="other",
        severity="warn",
        properties={"model": "m"},
        record={"root": "ab"},
    )


def test_every_field_is_written_under_the_seeds_json_name() -> None:
    """Field names are exactly the seed's: toolUseID, isError, stopReason, error, usage.*."""
    d = orjson.loads(encode_event(full_event()))
    assert list(d) == [
        "seq", "time", "kind", "actor", "goal", "child", "turn", "text", "tool", "toolUseID",
        "input", "result", "isError", "stopReason", "usage", "error", "action", "call", "trust",
        "fault", "host", "allowed", "reason", "phase", "session", "severity", "properties",
        "record",
    ]  # fmt: skip
    assert d["toolUseID"] == "toolu_9" and d["isError"] is True
    assert d["stopReason"] == "end_turn" and d["error"] == "boom"
    assert d["usage"] == {
        "inputTokens": 10,
        "outputTokens": 20,
        "cacheReadTokens": 30,
        "cacheWriteTokens": 40,
        "reasoningTokens": 50,
    }
    assert d["time"] == "2026-03-04T05:06:07.890123Z"
    assert set(d) == KNOWN_FIELDS


def test_empty_fields_are_omitted() -> None:
    """Zero, empty, false and absent fields do not appear in the JSON at all."""
    assert encode_event(Event(kind="x")) == b'{"kind":"x"}'
    assert orjson.loads(encode_event(Event(kind="x", usage=Usage(), turn=0, text=""))) == {
        "kind": "x"
    }
    partial = orjson.loads(encode_event(Event(kind="x", usage=Usage(output_tokens=5))))
    assert partial == {"kind": "x", "usage": {"outputTokens": 5}}


def test_a_zero_usage_is_no_usage() -> None:
    """Usage() and None are one value on an event, as they are one stored form."""
    assert Event(kind="x", usage=Usage()) == Event(kind="x")
    assert Event(kind="x", usage=Usage()).usage is None


def test_the_log_supplies_seq_and_time_first() -> None:
    """encode_event(seq=, time=) writes the log's seq and time ahead of the event's fields."""
    b = encode_event(Event(kind="x", seq=99, text="t"), seq=3, time="2026-01-01T00:00:00Z")
    assert b == b'{"seq":3,"time":"2026-01-01T00:00:00Z","kind":"x","text":"t"}'


@pytest.mark.parametrize("micros", [0, 1, 500_000, 999_999])
def test_a_stamp_reads_back_as_written_even_on_the_exact_second(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, micros: int
) -> None:
    """The log's stamp is written as `format_time` writes that instant. On the exact second
    it once kept ``.000000``, which a decoded event writes without, so the readback check
    refused any batch stamped then that held an event it decodes again (one with usage)."""
    from spine import _log

    at = datetime(2026, 12, 1, 12, 26, 18, micros, tzinfo=UTC)
    ns = int(at.timestamp()) * 1_000_000_000 + micros * 1000
    monkeypatch.setattr(_log, "_stamp", (-1, ""))
    monkeypatch.setattr(_log.time, "time_ns", lambda: ns)
    assert _log._now() == _codec.format_time(at)
    log = SqliteLog(str(tmp_path / "spine.db"))
    try:
        ended = Event(kind=Kind.TURN_COMPLETED, turn=1, usage=Usage(input_tokens=2))
        res = log.append("s", [Event(kind=Kind.USER_MESSAGE, text="hi"), ended])
        payload = res.records[-1].payload
        assert encode_event(decode_event(payload)) == payload
        assert f'"time":"{_codec.format_time(at)}"'.encode() in payload
    finally:
        log.close()


def test_input_is_embedded_as_raw_json_not_as_a_string() -> None:
    """A tool's input is stored as JSON, not a JSON string, and read back as the same text."""
    text = '{ "b": 1,\n  "a": [true, null, 2.5] }'
    e = Event(kind=Kind.TOOL_CALL, input=text)
    assert e.input == text
    b = encode_event(e)
    assert b == b'{"kind":"tool.call","input":' + text.encode() + b"}"
    assert orjson.loads(b)["input"] == {"b": 1, "a": [True, None, 2.5]}
    assert decode_event(b).input == text
    assert decode_event(b'{"kind":"tool.call","input":"a string"}').input == '"a string"'
    assert decode_event(b'{"kind":"tool.call","input":null}').input == "null"


@pytest.mark.parametrize(
    "text",
    [
        '{"n": 123456789012345678901234567890}',
        '{"n":-123456789012345678901234567890123}',
        "[1.0, 1e3, 1E+3, -0, 0.10, 2.5e-07]",
        '{"big":1e400}',
        ' {"a":1} ',
        '"caf\\u00e9 \\/ \\ud83d\\ude00"',
    ],
)
def test_input_is_kept_byte_for_byte_through_the_codec_and_the_log(
    text: str, tmp_path: pathlib.Path
) -> None:
    """Big integers, number spellings, escapes and spacing in input are never re-encoded."""
    e = Event(kind=Kind.TOOL_CALL, tool="calc", input=text, result="ok")
    assert e.input == text
    b = encode_event(e)
    assert text.encode() in b
    assert decode_event(b).input == text
    assert decode_event(b) == e
    assert converter.structure(converter.unstructure(e), Event) == e
    with SqliteLog(tmp_path / "raw.db") as log:
        log.append("s", [e])
        assert text.encode() in log.read("s")[0].payload
        assert history(log, "s")[0].input == text


def test_a_payload_spaced_by_another_writer_gives_the_input_text_it_holds() -> None:
    """Whatever the spacing around it, input is the member's own text in the payload."""
    b = b'{ "kind" : "tool.call",\n  "input" : [1.0,  2],\n  "result" : "r" }'
    e = decode_event(b)
    assert e.input == " [1.0,  2]" and e.result == "r"
    assert decode_event(b'{"input":{"input":1},"kind":"tool.call","input":[2]}').input == "[2]"
    assert decode_event(b'{"kind":"x","input":1,"kind":"tool.call"}').input == "1"


@pytest.mark.parametrize("text", ["{not json", "NaN", "[1] [2]", '{"a":1,}', '"\ud800"'])
def test_input_that_is_not_json_is_refused_when_the_event_is_built(text: str) -> None:
    """Event(input=...) requires one JSON text, so a bad input never reaches the log."""
    with pytest.raises(InvalidArgumentError, match="input is not valid JSON"):
        Event(kind=Kind.TOOL_CALL, input=text)


def test_unknown_kinds_and_fields_survive_a_round_trip_byte_for_byte() -> None:
    """A newer writer's kind and fields are kept in kind and extra, and written back as is."""
    b = b'{"seq":4,"kind":"agent.dreamed","text":"t","mood":{"level":3},"tags":["a",1]}'
    e = decode_event(b, stream="s", seq=4)
    assert e.kind == "agent.dreamed" and e.text == "t"
    assert e.extra == {"mood": {"level": 3}, "tags": ["a", 1]}
    assert encode_event(e) == b


def test_a_newer_schema_version_reads_with_its_unknown_fields_kept() -> None:
    """A row from a newer writer decodes without upcasting; new fields land in extra."""
    b = b'{"seq":1,"kind":"x","brandNew":true}'
    e = decode_event(b, stream="s", seq=1, version=SCHEMA_VERSION + 1)
    assert e.extra == {"brandNew": True}


def test_a_registered_upcaster_brings_an_old_row_up_to_date(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rows stored with an older schema version pass through the upcaster hook on read."""
    monkeypatch.setattr(_codec, "_upcasters", {})

    def v0_to_v1(d: dict[str, Any]) -> dict[str, Any]:
        d = dict(d)
        d["toolUseID"] = d.pop("tool_use_id")
        return d

    register_upcaster(SCHEMA_VERSION - 1, v0_to_v1)
    old = b'{"seq":2,"kind":"tool.call","tool_use_id":"toolu_1"}'
    assert Record("s", 2, 9, "tool.call", old, SCHEMA_VERSION - 1).event().tool_use_id == "toolu_1"


def test_an_old_row_without_an_upcaster_is_a_named_decode_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without an upcaster for its version an old row fails naming stream, seq and version."""
    monkeypatch.setattr(_codec, "_upcasters", {})
    with pytest.raises(DecodeError, match="no upcaster registered from schema version 0") as info:
        Record("s", 2, 9, "x", b'{"seq":2,"kind":"x"}', 0).event()
    assert (info.value.stream, info.value.seq) == ("s", 2)


def test_an_upcaster_must_start_below_the_current_version() -> None:
    """Registering an upcaster from the current (or a future) version is misuse."""
    with pytest.raises(InvalidArgumentError, match="below the current schema version"):
        register_upcaster(SCHEMA_VERSION, lambda d: d)


def test_sqlite_stores_the_schema_version_of_each_row(tmp_path: pathlib.Path) -> None:
    """Every stored row carries the schema version it was written with."""
    with SqliteLog(tmp_path / "v.db") as log:
        log.append("s", [Event(kind="x")])
        assert log.read("s")[0].version == SCHEMA_VERSION
    raw = sqlite3.connect(str(tmp_path / "v.db"))
    try:
        assert raw.execute("SELECT version FROM events").fetchall() == [(SCHEMA_VERSION,)]
    finally:
        raw.close()


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        (b'{"seq":5,"kind":"x"', "invalid JSON"),
        (b"[1,2,3]", "not a JSON object"),
        (b'{"seq":5,"text":"no kind"}', "has no 'kind'"),
        (b'{"seq":5,"kind":""}', "'kind' must be a non-empty string"),
        (b'{"seq":5,"kind":"x","turn":"3"}', "'turn' must be an integer"),
        (b'{"seq":5,"kind":"x","turn":true}', "'turn' must be an integer"),
        (b'{"seq":5,"kind":"x","text":7}', "'text' must be a string"),
        (b'{"seq":5,"kind":"x","isError":"yes"}', "'isError' must be a boolean"),
        (b'{"seq":5,"kind":"x","time":"yesterday"}', "'time' is not an RFC 3339 time"),
        (b'{"seq":5,"kind":"x","time":"2026-01-01T00:00:00"}', "no time zone"),
        (b'{"seq":5,"kind":"x","usage":{"inputTokens":"many"}}', "usage.inputTokens"),
        (b'{"seq":5,"kind":"x","usage":[1]}', "usage must be an object"),
        (b'{"seq":5,"kind":"x","properties":{"k":1}}', "'properties'"),
        (b'{"seq":5,"kind":"x","record":"sealed"}', "'record' must be an object"),
        (b'{"seq":6,"kind":"x"}', "payload carries seq 6 but is stored at seq 5"),
    ],
)
def test_a_malformed_payload_raises_a_decode_error_naming_stream_seq_and_problem(
    payload: bytes, problem: str
) -> None:
    """Bad stored JSON raises DecodeError whose message and fields say where and what."""
    with pytest.raises(DecodeError) as info:
        Record("chat-1", 5, 40, "x", payload).event()
    err = info.value
    assert isinstance(err, SpineError)
    assert (err.stream, err.seq) == ("chat-1", 5)
    assert problem in err.problem
    assert "stream 'chat-1'" in str(err) and "seq 5" in str(err)


def test_incoming_json_without_a_place_still_names_the_problem() -> None:
    """Decoding JSON that has no stream or seq yet still explains what is wrong."""
    with pytest.raises(DecodeError, match="malformed event: invalid JSON"):
        decode_event(b"{")
    with pytest.raises(DecodeError, match="not a JSON object"):
        event_from_dict(["kind", "x"])


def test_a_corrupt_stored_row_fails_its_reader_but_nothing_else(tmp_path: pathlib.Path) -> None:
    """A malformed row is named on read; other streams and later appends are unaffected."""
    path = tmp_path / "corrupt.db"
    with SqliteLog(path) as log:
        log.append("good", [Event(kind="x", text="fine")])
        log.append("bad", [Event(kind="x", text="first")])
    raw = sqlite3.connect(str(path))
    raw.execute(
        "INSERT INTO events (stream, seq, position, kind, payload, version) "
        "VALUES ('bad', 2, 3, 'x', x'7b2273657122', 1)"
    )
    raw.execute("UPDATE streams SET last_seq = 2, last_position = 3 WHERE stream = 'bad'")
    raw.commit()
    raw.close()
    with SqliteLog(path) as log:
        with pytest.raises(DecodeError, match="stream 'bad', seq 2") as info:
            history(log, "bad")
        assert (info.value.stream, info.value.seq) == ("bad", 2)
        assert [e.text for e in history(log, "good")] == ["fine"]
        assert log.read("bad")[0].event().text == "first"
        log.append("good", [Event(kind="x", text="after")], expected_seq=1)
        assert [e.text for e in history(log, "good")] == ["fine", "after"]


def test_a_naive_time_is_refused_on_encode() -> None:
    """Times must be timezone-aware; a naive one is misuse, not silently taken as local."""
    with pytest.raises(InvalidArgumentError, match="timezone-aware"):
        encode_event(Event(kind="x", time=datetime(2026, 1, 1)))


def test_times_are_written_in_utc_whatever_their_zone() -> None:
    """A time in another zone is stored as the same instant in UTC with a Z suffix."""
    t = datetime(2026, 1, 1, 12, 0, tzinfo=timezone(timedelta(hours=-5)))
    d = orjson.loads(encode_event(Event(kind="x", time=t)))
    assert d["time"] == "2026-01-01T17:00:00Z"
    assert decode_event(encode_event(Event(kind="x", time=t))).time == t


def test_the_converter_speaks_the_same_shape() -> None:
    """converter.unstructure/structure agree with event_to_dict/event_from_dict."""
    e = full_event()
    assert converter.unstructure(e).keys() == event_to_dict(e).keys()
    assert converter.structure(orjson.loads(encode_event(e)), Event) == e
    assert converter.unstructure(Usage(input_tokens=1)) == {"inputTokens": 1}
    assert converter.structure({"outputTokens": 2}, Usage) == Usage(output_tokens=2)


@settings(max_examples=300, deadline=None)
@given(events())
def test_any_event_survives_encode_and_decode(e: Event) -> None:
    """decode(encode(e)) == e for every field combination, kind and extra field."""
    assert decode_event(encode_event(e)) == e


@settings(max_examples=200, deadline=None)
@given(event_json())
def test_stored_bytes_are_a_fixed_point_of_decode_and_encode(payload: bytes) -> None:
    """Decoding any canonical-shape JSON and encoding it again gives a stable form."""
    once = encode_event(decode_event(payload))
    assert encode_event(decode_event(once)) == once
    assert decode_event(once) == decode_event(payload)


#: Values a test swaps in for one member (None: leave the payload as it is).
_RETYPED: list[Any] = [None, 7, "text", True, "", [1], {"a": 1}, 1.5, None]


@settings(max_examples=300, deadline=None)
@given(st.one_of(event_json(), events().map(encode_event)), st.sampled_from(_RETYPED))
def test_the_fast_decode_agrees_with_the_general_path(payload: bytes, retype: Any) -> None:
    """A payload's shape builder gives the general path's event, or leaves the payload to
    it (a member of the wrong type, one it does not know): never another event."""
    from spine._codec import _decode_general, decode_stored
    from spine._codec_fast import fast_decode

    try:
        d = orjson.loads(payload)
    except orjson.JSONDecodeError:
        # JSON orjson cannot read (a number past a double's range) has no fast path. The
        # general one reads it wide: inside ``input`` (a tool's arguments, kept verbatim)
        # it is an event, anywhere else it is refused; decoding a page agrees either way.
        try:
            wide: Event | None = _decode_general(payload, "s", 1, SCHEMA_VERSION)
        except DecodeError:
            wide = None
        if wide is None:
            with pytest.raises(DecodeError):
                decode_stored([(1, SCHEMA_VERSION, payload)], "s")
        else:
            assert decode_stored([(1, SCHEMA_VERSION, payload)], "s") == [wide]
        return
    if retype is not None and isinstance(d, dict) and d:
        name = sorted(d)[len(d) // 2]
        d[name] = retype
        payload = orjson.dumps(d)
    try:
        general: Event | None = _decode_general(payload, None, None, SCHEMA_VERSION)
    except DecodeError:
        general = None
    fast = fast_decode(orjson.loads(payload), payload, None)
    assert fast is None or (general is not None and fast == general)
    seq = general.seq if general is not None else 0
    if general is None:
        with pytest.raises(DecodeError):
            decode_stored([(seq, SCHEMA_VERSION, payload)], "s")
    else:
        assert decode_stored([(seq, SCHEMA_VERSION, payload)], "s") == [general]


@settings(max_examples=200, deadline=None)
@given(raw_json, st.booleans())
def test_any_json_input_is_kept_as_the_exact_text(text: str, stored: bool) -> None:
    """Input is kept as the writer spelled it: the same text, and stored as that JSON."""
    e = Event(kind=Kind.TOOL_CALL, input=text)
    back = decode_event(encode_event(e)) if stored else e
    assert back.input == text
    assert encode_event(e) == b'{"kind":"tool.call","input":' + text.encode() + b"}"


def test_decoded_events_are_ordinary_frozen_events() -> None:
    """Events built by the decoder are of class Event, immutable, and evolve like any other."""
    e = decode_event(b'{"seq":1,"kind":"x","text":"t","properties":{"k":"v"}}')
    assert type(e) is Event
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        e.text = "changed"  # type: ignore[misc]
    assert attrs.evolve(e, text="u") == Event(kind="x", seq=1, text="u", properties={"k": "v"})
    assert decode_event(b'{"kind":"x"}').properties == {}
    with pytest.raises(TypeError):
        decode_event(b'{"kind":"x"}').properties["k"] = "v"  # type: ignore[index]


def _mutations(ev: Event) -> list[Callable[[], object]]:
    """Every way of changing an event's mappings in place, nested ones included."""
    props: Any = ev.properties
    rec: Any = ev.record
    extra: Any = ev.extra
    return [
        lambda: props.__setitem__("model", "other"),
        lambda: props.update(model="other"),
        lambda: props.pop("model"),
        lambda: props.clear(),
        lambda: rec.__setitem__("ok", False),
        lambda: rec.__delitem__("ok"),
        lambda: rec.setdefault("new", 1),
        lambda: rec.popitem(),
        lambda: rec.__ior__({"ok": False}),
        lambda: rec["range"].__setitem__("first", 9),
        lambda: rec["seals"].append(9),
        lambda: rec["seals"].__setitem__(0, 9),
        lambda: rec["seals"].sort(),
        lambda: rec["range"]["ids"].extend([1]),
        lambda: extra.__setitem__("mood", None),
        lambda: extra["mood"].update(level=0),
    ]


def _with_mappings() -> Event:
    return Event(
        kind=Kind.RECORD_VERIFIED,
        properties={"model": "m"},
        record={"ok": True, "range": {"first": 1, "ids": [1, 2]}, "seals": [4, 3]},
        extra={"mood": {"level": 3}},
    )


@pytest.mark.parametrize("stored", [False, True])
def test_an_events_mappings_are_read_only_all_the_way_down(stored: bool) -> None:
    """properties, record and extra (and every dict and list inside them) refuse changes."""
    e = _with_mappings()
    e = decode_event(encode_event(e)) if stored else e
    for i, change in enumerate(_mutations(e)):
        with pytest.raises(TypeError, match="read-only"):
            change()
        assert e == _with_mappings(), f"mutation {i} changed the event"
    assert isinstance(e.record, Mapping) and isinstance(e.record, dict)
    assert e.record == {"ok": True, "range": {"first": 1, "ids": [1, 2]}, "seals": [4, 3]}
    mine = e.record.copy()
    mine["ok"] = False
    assert e.record["ok"] is True and (e.record | {"ok": False})["ok"] is False


def test_an_event_does_not_share_the_writers_dicts() -> None:
    """Changing the dict an event was built from afterwards leaves the event as it was."""
    nested = {"first": 1}
    given = {"range": nested, "seals": [1]}
    e = Event(kind=Kind.RECORD_SEALED, record=given)
    nested["first"] = 2
    given["seals"].append(2)  # type: ignore[attr-defined]
    given["new"] = True
    assert e.record == {"range": {"first": 1}, "seals": [1]}
    payload = {"kind": "x", "record": {"a": [1]}}
    built = converter.structure(payload, Event)
    payload["record"]["a"].append(2)  # type: ignore[index]
    assert built.record == {"a": [1]}


def test_an_event_with_read_only_mappings_pickles_copies_and_hashes() -> None:
    """A pickled event comes back equal and as read-only; equal events hash equal."""
    e = _with_mappings()
    back = pickle.loads(pickle.dumps(e))
    assert back == e and type(back.record) is type(e.record)
    with pytest.raises(TypeError):
        back.record["range"]["ids"].append(3)
    assert copy.deepcopy(e) == e and copy.copy(e) == e
    assert hash(e) == hash(decode_event(encode_event(e))) == hash(back)
    assert len({e, back, decode_event(encode_event(e))}) == 1


@settings(max_examples=200, deadline=None)
@given(events())
def test_any_event_survives_pickling_and_stays_read_only(e: Event) -> None:
    """pickle round trips every event, stored or not, to an equal, hashable, frozen one."""
    for x in (e, decode_event(encode_event(e))):
        back = pickle.loads(pickle.dumps(x))
        assert back == x == e and hash(back) == hash(x)
        with pytest.raises(TypeError):
            back.extra["new field"] = 1  # type: ignore[index]


@pytest.mark.parametrize("enabled", [True, False])
def test_replay_leaves_the_garbage_collector_as_it_found_it(
    tmp_path: pathlib.Path, enabled: bool
) -> None:
    """history() pauses the cycle collector only while it decodes, then restores its state."""
    with SqliteLog(tmp_path / "gc.db") as log:
        log.append("s", [Event(kind="x")] * 10)
        was = gc.isenabled()
        try:
            if enabled:
                gc.enable()
            else:
                gc.disable()
            assert len(history(log, "s")) == 10
            assert gc.isenabled() is enabled
        finally:
            if was:
                gc.enable()
            else:
                gc.disable()


@pytest.mark.parametrize(
    ("fields", "plain"),
    [
        ({"kind": Kind.USER_MESSAGE, "text": "hello"}, True),
        ({"kind": Kind.TURN_COMPLETED, "turn": 3, "stop_reason": "end_turn"}, True),
        ({"kind": Kind.TOOL_RESULT, "tool": "t", "result": "r", "is_error": True}, True),
        ({"kind": Kind.TURN_STARTED, "turn": "3"}, False),
        ({"kind": Kind.USER_MESSAGE, "text": 5}, False),
        ({"kind": Kind.TOOL_RESULT, "is_error": "yes"}, False),
        ({"kind": Kind.TURN_STARTED, "turn": True}, False),
        ({"kind": Kind.PROPERTIES, "properties": {"k": "v"}}, False),
        ({"kind": Kind.TOOL_CALL, "tool": "t", "input": '{"a": 1}'}, False),
        ({"kind": Kind.TURN_COMPLETED, "turn": 3, "usage": Usage(input_tokens=2)}, True),
        ({"kind": Kind.TURN_COMPLETED, "usage": Usage(input_tokens=True)}, False),
        ({"kind": Kind.TURN_COMPLETED, "usage": Usage(output_tokens=2.0)}, False),  # type: ignore[arg-type]
        ({"kind": Kind.TURN_COMPLETED, "usage": Usage(reasoning_tokens=2**70)}, True),
    ],
)
def test_only_events_of_plain_scalars_skip_the_read_back_decode(
    fields: dict[str, Any], plain: bool
) -> None:
    """The read-back check decodes again every event that could read back differently."""
    from spine._codec import encode_batch_checked, encode_events, plain_event

    ev = Event(**fields)
    assert plain_event(ev) is plain
    # The batch encoder takes the same verdict while it reads the fields, and writes the
    # same bytes whichever way it is asked.
    batch, now = [Event(kind="x"), ev], lambda: "2026-01-01T00:00:00Z"
    try:
        alone = encode_event(ev, seq=2, time=now())
    except InvalidArgumentError:  # beyond what orjson writes: refused either way
        with pytest.raises(InvalidArgumentError, match="cannot be encoded"):
            encode_batch_checked(batch, 1, now)
        return
    encoded, odd = encode_batch_checked(batch, 1, now)
    assert odd == ([] if plain else [1])
    assert encoded == encode_events(batch, 1, now)
    assert encoded[1] == (2, ev.kind, alone)


@pytest.mark.parametrize(
    "fields",
    [
        {"kind": Kind.TURN_STARTED, "turn": "3"},
        {"kind": Kind.USER_MESSAGE, "text": 5},
        {"kind": Kind.TOOL_RESULT, "is_error": "yes"},
        {"kind": Kind.PROPERTIES, "properties": {"k": 1}},
        {"kind": Kind.TURN_COMPLETED, "usage": Usage(input_tokens=True)},
        {"kind": Kind.TURN_COMPLETED, "usage": Usage(output_tokens=2.0)},
    ],
)
def test_an_event_that_would_not_read_back_is_refused_and_nothing_is_written(
    fields: dict[str, Any], tmp_path: pathlib.Path
) -> None:
    """A wrongly typed field fails the append, naming the event; the stream is untouched."""
    from spine import InvalidArgumentError, SqliteLog

    with SqliteLog(tmp_path / "spine.db") as log:
        log.append("s", [Event(kind=Kind.USER_MESSAGE, text="before")])
        with pytest.raises(InvalidArgumentError, match="read back"):
            log.append("s", [Event(kind=Kind.USER_MESSAGE, text="fine"), Event(**fields)])
        assert [e.text for e in log.read_events("s")] == ["before"]
