"""Decoding an event: the checked build from a parsed dict, and the exact ``input`` text.

`spine._codec.decode_event` is the public face; replay speed is bounded by this code.
"""

from __future__ import annotations

import json
import json.decoder
import json.scanner
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

import orjson

from ._codec_fields import _BOOL_FIELDS, _FIELDS, _INT_FIELDS, _STR_FIELDS, usage_from_dict
from ._errors import DecodeError
from ._event import Event, Usage, build_event
from ._event import _wide_decoder as _wide
from ._frozen import frozen_dict, frozen_flat

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
    unknown = False
    spec = _DECODE
    try:
        for key, v in d.items():
            s = spec.get(key)
            if s is None:
                unknown = True  # a newer writer's field: rare, gathered after the loop
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
            else:
                v = _structured(shape, v, raw_input)
                if v is None:
                    continue
            kwargs[attr] = v
    except (TypeError, ValueError) as exc:
        raise DecodeError(str(exc), stream=stream, seq=seq) from None
    if "kind" not in kwargs:
        raise DecodeError("the event has no 'kind'", stream=stream, seq=seq)
    if unknown:
        kwargs["extra"] = frozen_dict({k: x for k, x in d.items() if k not in spec})
    return build_event(**kwargs)


def _structured(shape: int, v: Any, raw_input: str | None) -> Any:
    """The value of a structured field (input, usage, properties, record), checked; None
    for a usage of all zeros, which the event leaves out. Out of line: these fields are
    rarer than the scalars, which `_from_dict` checks in its loop."""
    if shape == _INPUT:
        # The stored text itself when the decoder found it, byte for byte.
        return raw_input if raw_input is not None else _input_text(v)
    if shape == _USAGE:
        u: Usage = usage_from_dict(v)
        return None if u.is_zero() else u
    if shape == _PROPS:
        # ``isinstance``: an event's own (read-only) mappings are dicts as well.
        if not isinstance(v, dict) or not all(type(x) is str or x is None for x in v.values()):
            raise TypeError("field 'properties' must map keys to strings or null")
        return frozen_flat(v)
    if not isinstance(v, dict):
        raise TypeError("field 'record' must be an object")
    return frozen_dict(v)


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
