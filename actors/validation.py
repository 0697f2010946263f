"""Field types of protocol messages, checked where a message crosses into the runtime.

A message that arrives over Thespian's transport is unpickled without running its class's
``__init__``, so attrs converters never saw it and a field may hold anything. The Runner,
the guardian and every session check each public message against its annotations before
handling it, and answer a wrong one with ``InvalidRequest`` naming the field; the Host
checks what it is about to send the same way, so a caller gets the error at once.
"""

from __future__ import annotations

import enum
import functools
import math
import types
import typing
from collections.abc import Mapping
from typing import Any

import attrs

#: How deep nested containers are checked; a deeper value is refused, not recursed into.
MAX_DEPTH = 8


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


def _problem(value: Any, tp: Any, where: str, depth: int) -> str | None:
    """Why ``value`` is not a ``tp`` (None: it is)."""
    if depth > MAX_DEPTH:
        return f"{where} is nested too deeply"
    if tp is Any or tp is object:
        return None
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return _union_problem(value, args, where, depth)
    if tp is type(None):
        return None if value is None else f"{where} must be None, got {_describe(value)}"
    if tp is bool:
        return None if type(value) is bool else f"{where} must be a bool, got {_describe(value)}"
    if tp is int:
        if type(value) is int:
            return None
        return f"{where} must be an int, got {_describe(value)}"
    if tp is float:
        if type(value) in (int, float) and math.isfinite(value):
            return None
        return f"{where} must be a finite number, got {_describe(value)}"
    if tp is str:
        return None if type(value) is str else f"{where} must be a string, got {_describe(value)}"
    if tp is bytes:
        return None if type(value) is bytes else f"{where} must be bytes, got {_describe(value)}"
    if origin is tuple:
        return _tuple_problem(value, args, where, depth)
    if origin in (Mapping, dict, typing.Mapping):
        return _mapping_problem(value, args, where, depth)
    if isinstance(tp, type):
        return _instance_problem(value, tp, where, depth)
    return None


def _union_problem(value: Any, args: tuple[Any, ...], where: str, depth: int) -> str | None:
    for arm in args:
        if _problem(value, arm, where, depth) is None:
            return None
    names = " or ".join(getattr(a, "__name__", str(a)) for a in args)
    return f"{where} must be {names}, got {_describe(value)}"


def _tuple_problem(value: Any, args: tuple[Any, ...], where: str, depth: int) -> str | None:
    if not isinstance(value, tuple):
        return f"{where} must be a tuple, got {_describe(value)}"
    if len(args) == 2 and args[1] is Ellipsis:
        for i, item in enumerate(value):
            p = _problem(item, args[0], f"{where}[{i}]", depth + 1)
            if p is not None:
                return p
        return None
    if len(value) != len(args):
        return f"{where} must have {len(args)} items, got {len(value)}"
    for i, (item, arm) in enumerate(zip(value, args, strict=True)):
        p = _problem(item, arm, f"{where}[{i}]", depth + 1)
        if p is not None:
            return p
    return None


def _mapping_problem(value: Any, args: tuple[Any, ...], where: str, depth: int) -> str | None:
    if not isinstance(value, Mapping):
        return f"{where} must be a mapping, got {_describe(value)}"
    kt, vt = args or (Any, Any)
    for k, v in value.items():
        p = _problem(k, kt, f"{where} key", depth + 1)
        if p is None:
            p = _problem(v, vt, f"{where}[{k!r}]", depth + 1)
        if p is not None:
            return p
    return None


def _instance_problem(value: Any, tp: type, where: str, depth: int) -> str | None:
    if not isinstance(value, tp):
        return f"{where} must be a {tp.__name__}, got {_describe(value)}"
    if attrs.has(tp):
        return field_problem(value, depth + 1, prefix=f"{where}.")
    if issubclass(tp, enum.Enum):
        return None
    return None


@functools.cache
def _hints(cls: type) -> tuple[tuple[str, Any], ...]:
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints.get(f.name, Any)) for f in attrs.fields(cls))


def field_problem(msg: Any, depth: int = 0, prefix: str = "") -> str | None:
    """The first field of attrs instance ``msg`` whose value does not fit its annotation,
    as ``"field 'name' must be ..."``; None when every field fits."""
    cls = type(msg)
    if not attrs.has(cls):
        return None
    for name, tp in _hints(cls):
        try:
            value = object.__getattribute__(msg, name)
        except AttributeError:
            return f"field '{prefix}{name}' is missing"
        p = _problem(value, tp, f"field '{prefix}{name}'", depth)
        if p is not None:
            return p
    return None


__all__ = ["MAX_DEPTH", "field_problem"]
