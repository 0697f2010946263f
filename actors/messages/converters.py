"""Field converters of the message classes: an optional mapping made a plain dict, an
optional sequence a tuple, a busy policy parsed from its name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..policy import BusyPolicy


def _frozen_map(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return {} if not value else dict(value)


def _tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value or ())


def _busy_policy(value: str | BusyPolicy) -> BusyPolicy:
    return BusyPolicy.parse(value)
