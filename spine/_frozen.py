"""Read-only JSON containers: what an `Event`'s ``properties``, ``record`` and ``extra`` hold.

An event is a fact that was stored; nothing may change it after the fact, not even a nested
value of its record. `FrozenDict` and `FrozenList` are `dict` and `list` subclasses that
refuse every change (`TypeError`), so they still compare equal to plain dicts and lists,
are JSON-encoded natively by orjson and the standard library, pickle (events cross process
boundaries) and hash. ``.copy()`` and ``|`` give ordinary mutable containers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn


def freeze(value: Any) -> Any:
    """``value`` with every dict (any mapping) and list (or tuple) in it made read-only.

    Scalars and values that are already frozen are returned as they are.
    """
    t = type(value)
    if t is str or t is int or t is float or t is bool or value is None:
        return value
    if t is FrozenDict or t is FrozenList:
        return value
    if isinstance(value, Mapping):
        return frozen_dict(value)
    if isinstance(value, list | tuple):
        return FrozenList(value)
    return value


_SCALARS = frozenset({str, int, float, bool, type(None)})
_new_dict = dict.__new__
_fill_dict = dict.update
_set_item = dict.__setitem__


def frozen_dict(value: Mapping[str, Any]) -> FrozenDict:
    """A `FrozenDict` copy of ``value``, nested values frozen: the constructor, made fast.

    Decoding builds one per non-empty record, properties or extra, so it skips the Python
    ``__init__`` and checks the value types in C before looking at any value itself.
    """
    f = _new_dict(FrozenDict)
    _fill_dict(f, value)
    if not _SCALARS.issuperset(map(type, dict.values(f))):
        for k, v in dict.items(f):
            x = freeze(v)
            if x is not v:
                # Replacing a value in place keeps the size, so iterating on is safe.
                _set_item(f, k, x)
    return f


def frozen_flat(value: dict[str, Any]) -> FrozenDict:
    """A `FrozenDict` copy of ``value`` whose values are known to be scalars."""
    f = _new_dict(FrozenDict)
    _fill_dict(f, value)
    return f


def _refuse(self: object, *args: Any, **kwargs: Any) -> NoReturn:
    raise TypeError(f"{type(self).__name__} is read-only: a stored event never changes")


class FrozenDict(dict[str, Any]):
    """A `dict` that cannot change, its values frozen too (see `freeze`)."""

    __slots__ = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        dict.__init__(self, *args, **kwargs)
        if not _SCALARS.issuperset(map(type, dict.values(self))):
            for k, v in dict.items(self):
                x = freeze(v)
                if x is not v:
                    _set_item(self, k, x)

    __setitem__ = _refuse
    __delitem__ = _refuse
    __ior__ = _refuse
    clear = _refuse
    pop = _refuse
    popitem = _refuse
    setdefault = _refuse
    update = _refuse

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))

    def __reduce__(self) -> tuple[type[FrozenDict], tuple[dict[str, Any]]]:
        # The default dict pickling refills the new object item by item, which is refused.
        return (type(self), (dict(self),))

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenDict:
        return self


class FrozenList(list[Any]):
    """A `list` that cannot change, its items frozen too (see `freeze`)."""

    __slots__ = ()

    def __init__(self, items: Any = ()) -> None:
        list.__init__(self, items)
        if not _SCALARS.issuperset(map(type, self)):
            for i, v in enumerate(self):
                x = freeze(v)
                if x is not v:
                    list.__setitem__(self, i, x)

    __setitem__ = _refuse
    __delitem__ = _refuse
    __iadd__ = _refuse
    __imul__ = _refuse
    append = _refuse
    extend = _refuse
    insert = _refuse
    pop = _refuse
    remove = _refuse
    clear = _refuse
    sort = _refuse
    reverse = _refuse

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(self))

    def __reduce__(self) -> tuple[type[FrozenList], tuple[list[Any]]]:
        return (type(self), (list(self),))

    def __copy__(self) -> FrozenList:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenList:
        return self


#: The one empty mapping every event without properties, record or extra shares.
EMPTY: FrozenDict = FrozenDict()
