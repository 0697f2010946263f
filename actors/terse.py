"""Short ``str()`` for messages that cross the actor transport.

Thespian formats ``str(message)`` for its debug log on every send and every receipt,
eagerly, whatever the log level: two to three times per message on each side. For an
attrs class that is the full ``repr`` (a batch of stored records is about 21 us to
format, almost twice the cost of pickling it). A message's ``str`` names its type and
the ids that say which request and session it belongs to; ``repr`` stays complete.
"""

from __future__ import annotations

import types
from typing import Any

import attrs

__all__ = ["terse", "terse_module"]

_IDS = ("request_id", "session_id", "sink_id", "turn")


def _brief(self: Any) -> str:
    parts = [f"{k}={getattr(self, k)!r}" for k in _IDS if hasattr(self, k)]
    return f"{type(self).__name__}({', '.join(parts)})"


def terse(cls: type) -> type:
    """Give ``cls`` the short ``str``."""
    cls.__str__ = _brief  # type: ignore[method-assign,assignment]
    return cls


def terse_module(module: types.ModuleType | dict[str, Any]) -> None:
    """Give every attrs class defined in ``module`` (a module or its globals) the short
    ``str``."""
    scope = module if isinstance(module, dict) else vars(module)
    name = scope["__name__"]
    for value in list(scope.values()):
        if isinstance(value, type) and attrs.has(value) and value.__module__ == name:
            terse(value)
