"""The small events, waits and whole-log snapshots the contract tests build and compare."""

from __future__ import annotations

from typing import Any

import attrs

from .. import Event, Kind, Log, Record

WAIT = 60.0  # seconds: the bound on every wait for another thread or process


def ev(text: str = "", kind: str = Kind.ASSISTANT, **kw: Any) -> Event:
    """A small event whose text identifies it."""
    return Event(kind=kind, text=text, **kw)


def texts(records: list[Record]) -> list[str]:
    return [r.event().text for r in records]


def snapshot(log: Log) -> list[Record]:
    """Everything the log holds, in position order."""
    return log.read_all(0, None)


def attrs_evolve_seq(e: Event, seq: int) -> Event:
    return attrs.evolve(e, seq=seq)
