"""The event's JSON fields (the seed's names, in order) and the encoders generated from them.

`spine._codec` is the public face; these are its tables and its per-field code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from ._errors import InvalidArgumentError
from ._event import Event, Usage

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
    wants a number, a ``bool`` for a flag), its usage (if any) a `Usage` of such ``int``s,
    with no time of its own and nothing in the other structured fields (``input``,
    ``properties``, ``record``, ``extra``).

    Such an event reads back as itself by construction: JSON carries those types exactly,
    and the log stamps its time. The read-back check (`spine._log.check_readback`)
    decodes and re-encodes only the others; a turn's words, starts and ends (with their
    usage) are plain.
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
        elif attr == "usage":
            ints = " or ".join(f"type(v.{a}) is not int" for a, _ in _USAGE_FIELDS)
            lines.append("    v = ev.usage")
            lines.append(f"    if v is not None and (type(v) is not _Usage or {ints}):")
            lines.append("        return False")
        else:
            lines.append(f"    if ev.{attr}: return False")
    lines.append("    return True")
    ns: dict[str, Any] = {"_Usage": Usage}
    exec("\n".join(lines), ns)
    plain: Callable[[Event], bool] = ns["plain"]
    return plain


plain_event = _make_plain()


def _encode_fields() -> list[str]:
    # The encoder's lines for each field after kind: store it if set, and judge it.
    lines = []
    for attr, key in _FIELDS[3:]:
        lines.append(f"        v = ev.{attr}")
        if attr == "input":
            lines.append(f"        if v: d[{key!r}] = _Fragment(v); p = False")
        elif attr == "usage":
            ints = " or ".join(f"type(v.{a}) is not int" for a, _ in _USAGE_FIELDS)
            lines.append("        if v is not None and not v.is_zero():")
            lines.append(f"            d[{key!r}] = _usage(v)")
            lines.append(f"            if type(v) is not _Usage or {ints}: p = False")
        elif attr in ("properties", "record"):
            lines.append(f"        if v: d[{key!r}] = v; p = False")
        else:
            want = "str" if key in _STR_FIELDS else "int" if key in _INT_FIELDS else "bool"
            lines.append("        if v:")
            lines.append(f"            d[{key!r}] = v")
            lines.append(f"            if type(v) is not {want}: p = False")
    return lines


def _make_encode() -> Callable[..., tuple[list[tuple[int, str, bytes]], list[int]]]:
    """Generate ``encode(events, first_seq, now, stamp_time)``: the batch encoder.

    Returns ``(seq, kind, payload)`` per event and the indices of the events that are not
    plain (`plain_event`), so the read-back check decodes only those. One pass, with
    `_fill` and the plain test inlined: each attribute is loaded once, and only the
    fields an event sets are type-checked (an empty field is left out of the payload,
    so it cannot read back differently). A batched append spends most of its Python
    time here (docs/performance.md).
    """
    lines = [
        "def encode(events, first_seq, now, stamp_time):",
        "    out = []; odd = []; stamp = None; seq = first_seq",
        "    for i, ev in enumerate(events):",
        "        v = ev.time",
        "        if v is None:",
        "            if stamp is None: stamp = now()",
        "            d = {'seq': seq, 'time': stamp}; p = True",
        "        else:",
        "            d = {'seq': seq, 'time': stamp_time(v)}; p = False",
        "        kind = ev.kind",
        "        if type(kind) is not str:",
        "            if not kind or not isinstance(kind, str): raise _Invalid(_NO_KIND)",
        "            kind = str(kind)",
        "        elif not kind: raise _Invalid(_NO_KIND)",
        "        d['kind'] = kind",
    ]
    lines += _encode_fields()
    lines += [
        "        v = ev.extra",
        "        if v:",
        "            p = False",
        "            for k, x in v.items(): d.setdefault(k, x)",
        "        out.append((seq, kind, _dumps(d)))",
        "        if not p: odd.append(i)",
        "        seq += 1",
        "    return out, odd",
    ]
    ns: dict[str, Any] = {
        "_Fragment": orjson.Fragment,
        "_usage": usage_to_dict,
        "_Usage": Usage,
        "_dumps": orjson.dumps,
        "_Invalid": InvalidArgumentError,
        "_NO_KIND": "an event needs a non-empty kind",
    }
    exec("\n".join(lines), ns)
    encode: Callable[..., tuple[list[tuple[int, str, bytes]], list[int]]] = ns["encode"]
    return encode


encode_checked = _make_encode()
