"""The JSON codec: the seed's field names, empty fields omitted, unknown ones preserved.

One cattrs converter (`converter`) is the public face; its Event hooks are written by hand
because replay speed is bounded by this code (see docs/performance.md).
"""

from __future__ import annotations

import json
import json.decoder
import json.scanner
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import cattrs
import orjson

from ._errors import DecodeError, InvalidArgumentError
from ._event import Event, Usage, build_event
from ._event import _wide_decoder as _wide
from ._frozen import frozen_dict, frozen_flat

#: Version of the stored JSON shape. Stored rows carry the version they were written with;
#: older rows pass through the registered upcasters on read.
SCHEMA_VERSION = 1

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
_upcasters: dict[int, Upcaster] = {}

# Python attribute -> JSON field, in the seed's order.
_FIELDS: tuple[tuple[str, str], ...] = (
    ("seq", "seq"),
    ("time", "time"),
    ("kind", "kind"),
    ("actor", "actor"),
    ("goal", "goal"),
    ("child", "child"),
    ("turn", "turn"),
    ("text", "text"),
    ("tool", "tool"),
    ("tool_use_id", "toolUseID"),
    ("input", "input"),
    ("result", "result"),
    ("is_error", "isError"),
    ("stop_reason", "stopReason"),
    ("usage", "usage"),
    ("error", "error"),
    ("action", "action"),
    ("call", "call"),
    ("trust", "trust"),
    ("fault", "fault"),
    ("host", "host"),
    ("allowed", "allowed"),
    ("reason", "reason"),
    ("phase", "phase"),
    ("session", "session"),
    ("severity", "severity"),
    ("properties", "properties"),
    ("record", "record"),
)
_JSON_TO_ATTR = {j: a for a, j in _FIELDS}
_USAGE_FIELDS = (
    ("input_tokens", "inputTokens"),
    ("output_tokens", "outputTokens"),
    ("cache_read_tokens", "cacheReadTokens"),
    ("cache_write_tokens", "cacheWriteTokens"),
    ("reasoning_tokens", "reasoningTokens"),
)
_USAGE_JSON_TO_ATTR = {j: a for a, j in _USAGE_FIELDS}

# Expected JSON types for the simple fields, checked on decode so that a malformed row
# fails with a named problem instead of a confusing error later.
_STR_FIELDS = frozenset(
    {
        "actor", "goal", "child", "text", "tool", "toolUseID", "result", "stopReason",
        "error", "action", "trust", "fault", "host", "reason", "phase", "session", "severity",
    }
)  # fmt: skip
_INT_FIELDS = frozenset({"seq", "turn", "call"})
_BOOL_FIELDS = frozenset({"isError", "allowed"})


def register_upcaster(from_version: int, fn: Upcaster) -> None:
    """Register ``fn`` to turn a stored dict of ``from_version`` into ``from_version + 1``."""
    if from_version >= SCHEMA_VERSION:
        raise InvalidArgumentError(
            f"an upcaster must start below the current schema version {SCHEMA_VERSION}"
        )
    _upcasters[from_version] = fn


def format_time(value: datetime) -> str:
    """RFC 3339 in UTC with a ``Z`` suffix, as the seed's Go ``time.Time`` writes it."""
    if value.tzinfo is None:
        raise InvalidArgumentError("event time must be timezone-aware (got a naive datetime)")
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def usage_to_dict(u: Usage) -> dict[str, int]:
    out: dict[str, int] = {}
    for attr, key in _USAGE_FIELDS:
        v = getattr(u, attr)
        if v:
            out[key] = v
    return out


def usage_from_dict(d: Any) -> Usage:
    if not isinstance(d, dict):
        raise TypeError("usage must be an object")
    kwargs = {}
    for key, v in d.items():
        attr = _USAGE_JSON_TO_ATTR.get(key)
        if attr is None:
            continue
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"usage.{key} must be an integer")
        kwargs[attr] = v
    return Usage(**kwargs)


def _make_fill() -> Callable[[Event, dict[str, Any]], dict[str, Any]]:
    """Generate ``fill(ev, d)``: add the event's non-empty fields after seq and time.

    Appends encode every event, and a generic loop over ~30 attributes costs more than
    the SQL insert of the row; straight-line code (one attribute load and one test per
    field, as attrs generates its methods) is about twice as fast.
    """
    lines = ["def fill(ev, d):"]
    for attr, key in _FIELDS[2:]:
        lines.append(f"    v = ev.{attr}")
        if attr == "kind":
            # A plain str: orjson reads an enum member's value through a Python property.
            lines.append("    d['kind'] = v if type(v) is str else str(v)")
        elif attr == "input":
            lines.append(f"    if v: d[{key!r}] = _Fragment(v)")
        elif attr == "usage":
            lines.append(f"    if v is not None and not v.is_zero(): d[{key!r}] = _usage(v)")
        elif attr in ("properties", "record"):
            # Read-only dicts: orjson writes a dict subclass as it writes a dict.
            lines.append(f"    if v: d[{key!r}] = v")
        else:
            lines.append(f"    if v: d[{key!r}] = v")
    lines += [
        "    v = ev.extra",
        "    if v:",
        "        for k, x in v.items():",
        "            d.setdefault(k, x)",
        "    return d",
    ]
    ns: dict[str, Any] = {"_Fragment": orjson.Fragment, "_usage": usage_to_dict}
    exec("\n".join(lines), ns)
    fill: Callable[[Event, dict[str, Any]], dict[str, Any]] = ns["fill"]
    return fill


_fill = _make_fill()


def _make_plain() -> Callable[[Event], bool]:
    """Generate ``plain(ev)``: whether every field the event sets is a plain scalar of
    exactly its decoded type (a ``str`` where the decoder wants text, an ``int`` where it
    wants a number, a ``bool`` for a flag), with no time of its own and nothing in the
    structured fields (``input``, ``usage``, ``properties``, ``record``, ``extra``).

    Such an event reads back as itself by construction: JSON carries those types exactly,
    and the log stamps its time. The read-back check (`spine._log.check_readback`)
    decodes and re-encodes only the others; a turn's words, starts and ends are plain.
    """
    lines = ["def plain(ev):", "    if ev.time is not None or ev.extra: return False"]
    for attr, key in _FIELDS[2:]:
        if attr == "kind":
            lines.append("    if not isinstance(ev.kind, str): return False")
        elif key in _STR_FIELDS:
            lines.append(f"    v = ev.{attr}")
            lines.append("    if v is not None and type(v) is not str: return False")
        elif key in _INT_FIELDS:
            lines.append(f"    v = ev.{attr}")
            lines.append("    if v is not None and type(v) is not int: return False")
        elif key in _BOOL_FIELDS:
            lines.append(f"    v = ev.{attr}")
            lines.append("    if v is not None and type(v) is not bool: return False")
        else:
            lines.append(f"    if ev.{attr}: return False")
    lines.append("    return True")
    ns: dict[str, Any] = {}
    exec("\n".join(lines), ns)
    plain: Callable[[Event], bool] = ns["plain"]
    return plain


plain_event = _make_plain()


def event_to_dict(ev: Event, *, seq: int | None = None, time: str | None = None) -> dict[str, Any]:
    """The event as a JSON-ready dict with the seed's names, empty fields omitted.

    ``input`` becomes an `orjson.Fragment` so the raw JSON text is embedded as is. ``seq``
    and ``time`` override the event's own (the log assigns them on append).
    """
    out: dict[str, Any] = {}
    if seq is not None:
        out["seq"] = seq
    elif ev.seq:
        out["seq"] = ev.seq
    if time is not None:
        out["time"] = time
    elif ev.time is not None:
        out["time"] = format_time(ev.time)
    return _fill(ev, out)


def encode_event(ev: Event, *, seq: int | None = None, time: str | None = None) -> bytes:
    """Serialize an event to its canonical JSON bytes (see `event_to_dict`)."""
    if not isinstance(ev.kind, str) or not ev.kind:
        raise InvalidArgumentError("an event needs a non-empty kind")
    try:
        return orjson.dumps(event_to_dict(ev, seq=seq, time=time))
    except TypeError as exc:
        raise InvalidArgumentError(f"event cannot be encoded as JSON: {exc}") from None


def encode_events(
    events: Sequence[Event], first_seq: int, now: Callable[[], str]
) -> list[tuple[int, str, bytes]]:
    """``(seq, kind, payload)`` for each event, seqs from ``first_seq``.

    Events without a time get ``now()`` (called at most once per batch). This is
    `encode_event` unrolled over a batch: appends spend most of their Python time here.
    """
    out = []
    stamp: str | None = None
    seq = first_seq
    fill, dumps = _fill, orjson.dumps
    try:
        for ev in events:
            kind = ev.kind
            if not kind or not isinstance(kind, str):
                raise InvalidArgumentError("an event needs a non-empty kind")
            t = ev.time
            if t is None:
                if stamp is None:
                    stamp = now()
                ts = stamp
            else:
                ts = format_time(t)
            d = fill(ev, {"seq": seq, "time": ts})
            out.append((seq, d["kind"], dumps(d)))
            seq += 1
    except TypeError as exc:
        raise InvalidArgumentError(f"event cannot be encoded as JSON: {exc}") from None
    return out


# How each known JSON field is checked on decode: the attribute it fills and its shape.
_STR, _INT, _BOOL, _TIME, _INPUT, _USAGE, _PROPS, _RECORD, _KIND = range(9)
_DECODE: dict[str, tuple[str, int]] = {}
for _attr, _key in _FIELDS:
    _DECODE[_key] = (
        _attr,
        _STR if _key in _STR_FIELDS
        else _INT if _key in _INT_FIELDS
        else _BOOL if _key in _BOOL_FIELDS
        else {"time": _TIME, "input": _INPUT, "usage": _USAGE, "properties": _PROPS,
              "record": _RECORD, "kind": _KIND}[_key],
    )  # fmt: skip


def event_from_dict(d: Any, *, stream: str | None = None, seq: int | None = None) -> Event:
    """Build an event from a decoded JSON object; unknown fields go to ``extra``.

    ``input`` here is a parsed value, so it is written back as compact JSON (an
    `orjson.Fragment`, as `event_to_dict` gives it, keeps its exact text). `decode_event`
    reads the text straight from the payload instead.
    """
    return _from_dict(d, stream, seq, None)


def _input_text(v: Any) -> str:
    # A parsed input value back to JSON text: compact, or a Fragment's own text.
    try:
        return orjson.dumps(v).decode()
    except TypeError:
        # Integers beyond 64 bits (from the standard library's parser) are JSON too.
        return json.dumps(v, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _from_dict(d: Any, stream: str | None, seq: int | None, raw_input: str | None) -> Event:
    if type(d) is not dict:
        raise DecodeError("the payload is not a JSON object", stream=stream, seq=seq)
    kwargs: dict[str, Any] = {}
    extra: dict[str, Any] | None = None
    spec = _DECODE
    try:
        for key, v in d.items():
            s = spec.get(key)
            if s is None:
                if extra is None:
                    extra = {}
                extra[key] = v
                continue
            attr, shape = s
            # Exact type checks: JSON only yields these exact types, and bool is an int.
            if shape == _STR:
                if type(v) is not str:
                    raise TypeError(f"field {key!r} must be a string")
                if not v:
                    continue
            elif shape == _INT:
                if type(v) is not int:
                    raise TypeError(f"field {key!r} must be an integer")
            elif shape == _KIND:
                if type(v) is not str or not v:
                    raise TypeError("field 'kind' must be a non-empty string")
            elif shape == _BOOL:
                if type(v) is not bool:
                    raise TypeError(f"field {key!r} must be a boolean")
            elif shape == _TIME:
                if type(v) is not str:
                    raise TypeError("field 'time' must be an RFC 3339 string")
                try:
                    v = datetime.fromisoformat(v)
                except ValueError:
                    raise TypeError(f"field 'time' is not an RFC 3339 time: {v!r}") from None
                if v.tzinfo is None:
                    raise TypeError("field 'time' has no time zone")
            elif shape == _INPUT:
                # The stored text itself when the decoder found it, byte for byte.
                v = raw_input if raw_input is not None else _input_text(v)
            elif shape == _USAGE:
                v = usage_from_dict(v)
                if v.is_zero():
                    continue
            elif shape == _PROPS:
                # ``isinstance``: an event's own (read-only) mappings are dicts as well.
                if not isinstance(v, dict) or not all(
                    type(x) is str or x is None for x in v.values()
                ):
                    raise TypeError("field 'properties' must map keys to strings or null")
                v = frozen_flat(v)
            elif shape == _RECORD:
                if not isinstance(v, dict):
                    raise TypeError("field 'record' must be an object")
                v = frozen_dict(v)
            kwargs[attr] = v
    except (TypeError, ValueError) as exc:
        raise DecodeError(str(exc), stream=stream, seq=seq) from None
    if "kind" not in kwargs:
        raise DecodeError("the event has no 'kind'", stream=stream, seq=seq)
    if extra is not None:
        kwargs["extra"] = frozen_dict(extra)
    return build_event(**kwargs)


# Stands in for ``input`` while the other members are encoded again (see `_raw_input`).
# orjson embeds a fragment verbatim and escapes NUL inside strings, so this byte marks
# exactly the place of the value.
_MARK = orjson.Fragment(b"\x00")


def _raw_input(payload: bytes, d: dict[str, Any]) -> str | None:
    """The exact text of the top-level ``input`` member of ``payload`` (parsed as ``d``).

    The codec writes payloads with orjson, and orjson encodes what it parsed back to the
    same bytes: so encoding ``d`` with a marker for ``input`` reproduces the payload around
    the input's text. ``None`` when it does not (another writer's spacing or escapes), and
    the caller takes the slower general path.
    """
    v = d["input"]
    d["input"] = _MARK
    try:
        again = orjson.dumps(d)
    except orjson.JSONEncodeError:  # nested deeper than orjson writes
        return None
    d["input"] = v
    cut = again.index(0)
    raw = payload[cut : len(payload) - len(again) + cut + 1]
    if again.replace(b"\x00", raw, 1) != payload:
        return None
    # One whole JSON value in between means it is that member's text (and not, with a
    # repeated key, several members run together).
    try:
        orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return raw.decode()


_WS = re.compile(r"[ \t\n\r]*")
# The standard library's own (C) pieces: one value from an index, one string's body.
_scan_value: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(_wide)  # type: ignore[arg-type]
_scan_string: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


def _ws(text: str, i: int) -> int:
    # Past any JSON whitespace at ``i`` (the pattern matches everywhere, if only emptily).
    m = _WS.match(text, i)
    return i if m is None else m.end()


def _wide_loads(text: str) -> tuple[Any, str | None]:
    """Parse with the standard library: the value, and an object's raw ``input`` text.

    The general path: for JSON orjson refuses but the grammar allows (integers beyond 64
    bits with older orjson, numbers that overflow a double, escaped lone surrogates), and
    for payloads another writer spaced or escaped differently. The raw text of the last
    top-level ``input`` member is everything between its colon and the next separator.
    Raises `ValueError` when the text is not one JSON value.
    """
    try:
        i = _ws(text, 0)
        if text[i : i + 1] != "{":
            return _wide.decode(text), None
        d: dict[str, Any] = {}
        raw: str | None = None
        i = _ws(text, i + 1)
        if text[i : i + 1] == "}":
            j = i
        else:
            while True:
                if text[i : i + 1] != '"':
                    raise ValueError(f"expected a member name at char {i}")
                key, i = _scan_string(text, i + 1)
                i = _ws(text, i)
                if text[i : i + 1] != ":":
                    raise ValueError(f"expected ':' at char {i}")
                start = i + 1
                value, i = _scan_value(text, _ws(text, start))
                j = _ws(text, i)
                if key == "input":
                    raw = text[start:j]
                d[key] = value
                c = text[j : j + 1]
                if c == "}":
                    break
                if c != ",":
                    raise ValueError(f"expected ',' or '}}' at char {j}")
                i = _ws(text, j + 1)
        if _ws(text, j + 1) != len(text):
            raise ValueError(f"extra data at char {j + 1}")
        return d, raw
    except StopIteration as exc:
        raise ValueError(f"expected a value at char {exc.value}") from None
    except RecursionError:
        raise ValueError("nested too deeply") from None


def decode_event(
    payload: bytes | str,
    *,
    stream: str | None = None,
    seq: int | None = None,
    version: int = SCHEMA_VERSION,
) -> Event:
    """Parse stored or incoming JSON into an `Event`, naming stream and seq on failure.

    ``input`` is read as the exact text the payload holds for it, never re-encoded.
    """
    raw: str | None = None
    try:
        d = orjson.loads(payload)
        if type(d) is dict and "input" in d:
            b = payload.encode() if isinstance(payload, str) else payload
            raw = _raw_input(b, d)
            if raw is None:
                d, raw = _wide_loads(b.decode())
    except (orjson.JSONDecodeError, ValueError) as exc:
        try:
            text = payload.decode() if isinstance(payload, bytes) else payload
            d, raw = _wide_loads(text)
        except ValueError:
            raise DecodeError(f"invalid JSON ({exc})", stream=stream, seq=seq) from None
    if version != SCHEMA_VERSION:
        before = d.get("input") if type(d) is dict else None
        d = upcast(d, version, stream=stream, seq=seq)
        if raw is not None and (type(d) is not dict or d.get("input") is not before):
            # An upcaster rewrote the input: its parsed value is the truth now.
            raw = None
    ev = _from_dict(d, stream, seq, raw)
    if seq is not None and ev.seq != seq:
        raise DecodeError(
            f"payload carries seq {ev.seq} but is stored at seq {seq}", stream=stream, seq=seq
        )
    return ev


def upcast(
    d: Any, version: int, *, stream: str | None = None, seq: int | None = None
) -> dict[str, Any]:
    """Bring a stored dict of ``version`` up to `SCHEMA_VERSION` through the upcasters."""
    if version > SCHEMA_VERSION:
        # A newer writer: keep every field; unknown ones land in ``extra``.
        return d  # type: ignore[no-any-return]
    while version < SCHEMA_VERSION:
        fn = _upcasters.get(version)
        if fn is None:
            raise DecodeError(
                f"no upcaster registered from schema version {version}", stream=stream, seq=seq
            )
        d = fn(d)
        version += 1
    return d  # type: ignore[no-any-return]


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter()
    conv.register_unstructure_hook(Event, event_to_dict)
    conv.register_structure_hook(Event, lambda d, _t: event_from_dict(d))
    conv.register_unstructure_hook(Usage, usage_to_dict)
    conv.register_structure_hook(Usage, lambda d, _t: usage_from_dict(d))
    conv.register_unstructure_hook(datetime, format_time)
    conv.register_structure_hook(datetime, lambda v, _t: datetime.fromisoformat(v))
    return conv


#: The one converter for spine types; ``converter.unstructure(event)`` gives the seed's JSON
#: shape (with ``input`` as an `orjson.Fragment`), ``converter.structure(d, Event)`` reads it.
converter = _make_converter()
