"""The fast decode of a stored event: one generated builder per payload shape.

A shape is the payload's member names in order. The first payload of a shape compiles a
builder for it (`_plan`): the values are unpacked in that order, each checked to be of
exactly its field's JSON type (a non-empty kind, a time with a zone, the structured fields
checked as the general path checks them), and stored straight into the event's slots.
The decoder's general loop (`spine._codec_decode._from_dict`) dispatches on every member
of every payload; a replay of 100,000 events spent most of its time there.

Anything a builder does not expect (a member a newer writer added, a type the field does
not take, a shape past the cache's bound) takes the general path, which is the authority
on what is valid and names the problem; so does any payload a builder fails on.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import attrs

from ._codec_decode import _BOOL, _DECODE, _INPUT, _INT, _KIND, _STR, _TIME, _USAGE, _raw_input
from ._codec_decode import _structured as _structured
from ._event import EVENT_TWIN, Event, Usage, build_event

Builder = Callable[[dict[str, Any], bytes], Event]

#: shape -> its builder, or None for a shape only the general path decodes.
_PLANS: dict[tuple[Any, ...], Builder | None] = {}
#: Shapes are few (each kind writes a handful); past this, new ones go the general way.
_MAX_PLANS = 2048
#: The JSON type each scalar shape takes, exactly (JSON yields only these; bool is no int).
_SCALAR_TYPE = {_STR: str, _INT: int, _BOOL: bool, _KIND: str, _TIME: str}

#: Parsed stamps: the events of one append share one, so a replay parses each once.
_TIMES: dict[str, datetime] = {}


def _time(text: str) -> datetime:
    t = _TIMES.get(text)
    if t is not None:
        return t
    t = datetime.fromisoformat(text)
    if t.tzinfo is None:
        raise TypeError("field 'time' has no time zone")
    if len(_TIMES) >= 4096:
        _TIMES.clear()
    _TIMES[text] = t
    return t


def _input(d: dict[str, Any], payload: bytes) -> str:
    raw = _raw_input(payload, d)
    if raw is None:
        raise ValueError("input spelled another way")  # the general path reads it
    return raw


def _usage(u: Any) -> Usage | None:
    # `usage_from_dict` and the zero check in one, for the usage JSON writes.
    if type(u) is not dict:
        raise TypeError("usage must be an object")
    a, b, c = u.get("inputTokens", 0), u.get("outputTokens", 0), u.get("cacheReadTokens", 0)
    w, r = u.get("cacheWriteTokens", 0), u.get("reasoningTokens", 0)
    if not _INTS.issuperset((type(a), type(b), type(c), type(w), type(r))):
        raise TypeError("usage counts must be integers")
    if not (a or b or c or w or r):
        return None
    return Usage(
        input_tokens=a, output_tokens=b, cache_read_tokens=c, cache_write_tokens=w,
        reasoning_tokens=r,
    )  # fmt: skip


_INTS = frozenset({int})
_DEFAULTS = {f.name: f.default for f in attrs.fields(Event)}


def _value(i: int, shape: int) -> tuple[str, str]:
    """The check of member ``i`` of a shape (a line, or "") and the value it stores."""
    x = f"v{i}"
    want = _SCALAR_TYPE.get(shape)
    if shape == _TIME:
        return "", f"_times.get({x}) or _time({x})"
    if shape == _KIND:
        return f"    if type({x}) is not str or not {x}: raise _Bad\n", x
    if want is not None:
        return f"    if type({x}) is not {want.__name__}: raise _Bad\n", x
    if shape == _INPUT:
        return "", "_input(d, payload)"
    if shape == _USAGE:
        return "", f"_usage({x})"
    return "", f"_structured({shape}, {x}, None)"


def _plan(d: dict[str, Any]) -> Builder | None:
    """Compile (and cache) the builder for ``d``'s member names; None if it has none."""
    key = tuple(d)
    checks, sets = "", dict[str, str]()
    for i, name in enumerate(key):
        spec = _DECODE.get(name)
        if spec is None:  # a newer writer's field: `extra` is the general path's
            sets = {}
            break
        check, value = _value(i, spec[1])
        checks += check
        sets[spec[0]] = value
    fn: Builder | None = None
    if "kind" in sets:
        src = "def build(d, payload):\n"
        src += f"    {''.join(f'v{i}, ' for i in range(len(key)))}= d.values()\n" + checks
        if EVENT_TWIN is None:
            src += f"    return _build({', '.join(f'{a}={v}' for a, v in sets.items())})\n"
        else:
            src += "    e = _new(_Twin)\n"
            src += "".join(f"    e.{a} = {sets.get(a, f'_d_{a}')}\n" for a in _DEFAULTS)
            src += "    _setattr(e, '__class__', _Event)\n    return e\n"
        ns: dict[str, Any] = {f"_d_{a}": v for a, v in _DEFAULTS.items()}
        ns.update(
            _build=build_event, _time=_time, _times=_TIMES, _input=_input, _usage=_usage,
            _Bad=TypeError, _structured=_structured, _new=object.__new__, _Twin=EVENT_TWIN,
            _Event=Event, _setattr=object.__setattr__,
        )  # fmt: skip
        exec(src, ns)
        fn = ns["build"]
    if len(_PLANS) < _MAX_PLANS:
        _PLANS[key] = fn
    return fn


_MISS: Any = object()


def fast_decode(d: Any, payload: bytes, seq: int | None) -> Event | None:
    """The event ``d`` (``payload`` parsed, of the current schema version) describes, by
    its shape's builder; None when the general path must decide."""
    if type(d) is not dict:
        return None
    fn = _PLANS.get(tuple(d), _MISS)
    if fn is _MISS:
        fn = _plan(d)
    if fn is None:
        return None
    try:
        ev: Event = fn(d, payload)
    except Exception:  # the general path names what is wrong
        return None
    if seq is not None and ev.seq != seq:
        return None
    return ev
