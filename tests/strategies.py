"""Hypothesis strategies for the spine's types, in one place for every test module.

Everything generated here survives the codec exactly: strings carry no lone surrogates
(JSON cannot hold them), integers fit 64 bits (the stored shape's range; only a tool's raw
``input`` text holds numbers of any size), times are
timezone-aware, and unknown extra fields never reuse a known JSON field name.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson
from hypothesis import strategies as st

from spine import EPHEMERAL_KINDS, Event, Kind, Phase, Severity, Usage, event_to_dict

#: JSON field names the codec owns; an unknown extra field must use another name.
KNOWN_FIELDS: frozenset[str] = frozenset(
    {
        "seq", "time", "kind", "actor", "goal", "child", "turn", "text", "tool", "toolUseID",
        "input", "result", "isError", "stopReason", "usage", "error", "action", "call",
        "trust", "fault", "host", "allowed", "reason", "phase", "session", "severity",
        "properties", "record",
    }
)  # fmt: skip

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

#: Kinds the log stores (everything but the ephemeral ones).
STORED_KINDS: tuple[str, ...] = tuple(k.value for k in Kind if k not in EPHEMERAL_KINDS)

# JSON text cannot carry lone surrogates, so neither can any generated string.
_chars = st.characters(blacklist_categories=("Cs",))
texts = st.text(_chars, max_size=40)
short_texts = st.text(_chars, min_size=1, max_size=12)
ints64 = st.integers(min_value=INT64_MIN, max_value=INT64_MAX)
counts = st.integers(min_value=0, max_value=2**40)

json_scalars: st.SearchStrategy[Any] = st.none() | st.booleans() | ints64 | texts
json_scalars = json_scalars | st.floats(allow_nan=False, allow_infinity=False)

#: Any JSON value (what a decoded payload, an unknown field or a record value may hold).
json_values: st.SearchStrategy[Any] = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)

# JSON's insignificant whitespace, as writers sprinkle it.
_json_ws = st.sampled_from(["", "", " ", "  ", "\n", "\t", "\r\n", "\n    "])

#: Number spellings JSON allows that a re-encoder would change: integers of any size,
#: fractions and exponents as written, negative zero, a double's overflow.
json_number_texts: st.SearchStrategy[str] = st.one_of(
    st.integers().map(str),
    st.integers(min_value=-(10**40), max_value=10**40).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(
        ["0", "-0", "1.0", "1.50", "1e3", "1E+3", "2.5e-07", "-0.0", "1e400", "0.1000"]
    ),
)

_json_string_texts = st.builds(
    lambda t, ascii_only: json.dumps(t, ensure_ascii=ascii_only), texts, st.booleans()
)
_json_scalar_texts = (
    st.sampled_from(["true", "false", "null"]) | json_number_texts | _json_string_texts
)


def _array_text(items: list[tuple[str, str, str]], end: str) -> str:
    return "[" + ",".join(a + v + b for a, v, b in items) + end + "]"


def _object_text(members: list[tuple[str, str, str, str, str]], end: str) -> str:
    return "{" + ",".join(a + k + b + ":" + c + v + d for a, k, b, c, v, d in members) + end + "}"


_json_texts: st.SearchStrategy[str] = st.recursive(
    _json_scalar_texts,
    lambda inner: (
        st.builds(_array_text, st.lists(st.tuples(_json_ws, inner, _json_ws), max_size=4), _json_ws)
        | st.builds(
            _object_text,
            st.lists(
                st.tuples(_json_ws, _json_string_texts, _json_ws, _json_ws, inner, _json_ws),
                max_size=4,
            ),
            _json_ws,
        )
    ),
    max_leaves=12,
)

#: Raw JSON text as a tool's ``input`` arrives: any value, spelled any way JSON allows
#: (whitespace anywhere, escapes or not, numbers as written), which must be kept exactly.
raw_json: st.SearchStrategy[str] = st.builds(
    lambda a, v, b: a + v + b, _json_ws, _json_texts, _json_ws
)

#: Raw JSON text for ``input`` that is an object, as tool arguments usually are.
raw_json_objects: st.SearchStrategy[str] = st.dictionaries(texts, json_values, max_size=5).map(
    lambda d: orjson.dumps(d).decode()
)

#: Any kind the runtime knows, stored or ephemeral.
known_kinds: st.SearchStrategy[str] = st.sampled_from([k.value for k in Kind])

#: A kind string this version has never heard of (a newer writer's).
unknown_kinds: st.SearchStrategy[str] = short_texts.filter(
    lambda s: s not in {k.value for k in Kind}
)

#: Kinds an append accepts: every stored kind plus unknown ones.
stored_kinds: st.SearchStrategy[str] = st.sampled_from(STORED_KINDS) | unknown_kinds

usages: st.SearchStrategy[Usage] = st.builds(
    Usage,
    input_tokens=counts,
    output_tokens=counts,
    cache_read_tokens=counts,
    cache_write_tokens=counts,
    reasoning_tokens=counts,
)

#: Timezone-aware times; the codec writes them in UTC, so any offset round-trips.
times: st.SearchStrategy[datetime] = st.datetimes(
    min_value=datetime(1970, 1, 2),
    max_value=datetime(2200, 1, 1),
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone.min]),
)

#: Metadata changes: keys to new values, ``None`` deleting a key.
properties: st.SearchStrategy[dict[str, str | None]] = st.dictionaries(
    short_texts, st.none() | texts, max_size=4
)

#: A seal or verification description: plain JSON values.
records: st.SearchStrategy[dict[str, Any]] = st.dictionaries(short_texts, json_values, max_size=4)

#: Fields written by a newer version that this one does not know.
extra_fields: st.SearchStrategy[dict[str, Any]] = st.dictionaries(
    short_texts.filter(lambda s: s not in KNOWN_FIELDS), json_values, max_size=3
)

phases: st.SearchStrategy[str] = st.sampled_from([p.value for p in Phase]) | texts
severities: st.SearchStrategy[str] = st.sampled_from([s.value for s in Severity]) | texts


@st.composite
def events(
    draw: st.DrawFn,
    kinds: st.SearchStrategy[str] | None = None,
    *,
    seq: st.SearchStrategy[int] | None = None,
    time: st.SearchStrategy[datetime | None] | None = None,
    extra: bool = True,
) -> Event:
    """Any `Event`: every field drawn, empty or not, including unknown kinds and fields.

    ``kinds`` defaults to every known kind plus unknown ones; pass `stored_kinds` for
    events an append accepts. ``seq`` defaults to 0 or more; ``time`` to unset or any.
    """
    k = draw(kinds if kinds is not None else known_kinds | unknown_kinds)
    return Event(
        kind=k,
        seq=draw(seq if seq is not None else st.integers(0, INT64_MAX)),
        time=draw(time if time is not None else st.none() | times),
        actor=draw(texts),
        goal=draw(texts),
        child=draw(texts),
        turn=draw(st.integers(0, 2**31)),
        text=draw(texts),
        tool=draw(texts),
        tool_use_id=draw(texts),
        input=draw(st.just("") | raw_json),
        result=draw(texts),
        is_error=draw(st.booleans()),
        stop_reason=draw(texts),
        usage=draw(st.none() | usages),
        error=draw(texts),
        action=draw(texts),
        call=draw(ints64),
        trust=draw(texts),
        fault=draw(texts),
        host=draw(texts),
        allowed=draw(st.booleans()),
        reason=draw(texts),
        phase=draw(st.just("") | phases),
        session=draw(texts),
        severity=draw(st.just("") | severities),
        properties=draw(properties),
        record=draw(records),
        extra=draw(extra_fields) if extra else {},
    )


def new_events(kinds: st.SearchStrategy[str] | None = None) -> st.SearchStrategy[Event]:
    """Events as a writer hands them to ``append``: no seq, any stored (or unknown) kind."""
    return events(kinds if kinds is not None else stored_kinds, seq=st.just(0))


#: A small, cheap event for tests that care about ordering, not content.
small_events: st.SearchStrategy[Event] = st.builds(
    Event,
    kind=st.sampled_from(STORED_KINDS[:6]),
    text=st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=8),
)

#: Caller-chosen session ids the spine accepts.
session_ids: st.SearchStrategy[str] = st.text(
    st.characters(
        min_codepoint=33, max_codepoint=0x2FF, blacklist_characters=".*>", categories=("L", "N")
    )
    | st.sampled_from("-_:/@+="),
    min_size=1,
    max_size=40,
)


@st.composite
def event_json(draw: st.DrawFn, *, seq: int | None = None) -> bytes:
    """Stored-shape JSON bytes for an event, as a writer of any version might produce.

    Drawn as a dict so that unknown kinds and fields and any key order appear.
    """
    ev = draw(events(seq=st.just(seq) if seq is not None else None))
    d = event_to_dict(ev)
    keys = draw(st.permutations(list(d)))
    return orjson.dumps({k: d[k] for k in keys})


__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "KNOWN_FIELDS",
    "STORED_KINDS",
    "event_json",
    "events",
    "extra_fields",
    "json_number_texts",
    "json_values",
    "known_kinds",
    "new_events",
    "phases",
    "properties",
    "raw_json",
    "raw_json_objects",
    "records",
    "session_ids",
    "severities",
    "small_events",
    "stored_kinds",
    "texts",
    "times",
    "unknown_kinds",
    "usages",
]
