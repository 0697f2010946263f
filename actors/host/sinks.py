"""The Host's sinks: user callables fed from the Runner's sink batches, in order.

A `SinkBatch` carries stored records ``(seq, kind, payload)`` and live items
``(after_seq, kind, severity, text)``: a live item (a notice, a streamed text delta)
belongs after the stored record ``after_seq`` and before ``after_seq + 1``. `merge` puts
the two in that order (pure, tested as a table); `Sinks` calls each user sink with
``fn(session_id, event_or_None, live_or_None)``, ``live`` as ``(kind, severity, text)``.
"""

from __future__ import annotations

import logging
import traceback
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from spine import Event, decode_event

from ..messages import SinkBatch

log = logging.getLogger("vertebra.host")

#: What a user sink receives as ``live``: (kind, severity-or-empty, text).
Live = tuple[str, str, str]
SinkFn = Callable[[str, Event | None, Live | None], None]
Record = tuple[int, str, bytes]
#: One delivery in order: the kind, and either a stored record or a live item.
Item = tuple[str, Record | None, Live | None]


def merge(records: Sequence[Record], live: Iterable[Sequence[Any]]) -> list[Item]:
    """Records and live items in the order they happened.

    Records come in seq order. A live item ``(after_seq, kind, severity, text)`` goes after
    the record with seq ``after_seq`` and before the next one; live items with the same
    ``after_seq`` keep their order; one past every record goes last.
    """
    # Record seq s sorts at 2*s, a live item after s at 2*s + 1; the sort is stable.
    keyed: list[tuple[int, Item]] = [(2 * r[0], (r[1], r, None)) for r in records]
    for after, kind, severity, text in live:
        keyed.append((2 * after + 1, (kind, None, (kind, severity, text))))
    keyed.sort(key=lambda pair: pair[0])
    return [item for _, item in keyed]


class Sinks:
    """The user sinks of one Host, each with its kinds filter (empty means all).

    A sink that raises is logged once and counted, and never stops delivery to the
    others or to its own later items.
    """

    def __init__(self) -> None:
        self._sinks: dict[str, tuple[frozenset[str], SinkFn]] = {}
        self._logged: set[Any] = set()
        self.failures = 0

    def add(self, fn: SinkFn, kinds: Iterable[str] = ()) -> str:
        sink_id = uuid.uuid4().hex
        self._sinks[sink_id] = (frozenset(kinds), fn)
        return sink_id

    def remove(self, sink_id: str) -> None:
        self._sinks.pop(sink_id, None)

    def deliver(self, batch: SinkBatch) -> None:
        """Call every sink with the batch's items, in `merge` order."""
        sid = batch.session_id
        items = [
            (kind, None if r is None else decode_event(r[2], stream=sid, seq=r[0]), lv)
            for kind, r, lv in merge(batch.records, batch.live)
        ]
        for kinds, fn in list(self._sinks.values()):
            for kind, ev, lv in items:
                if kinds and kind not in kinds:
                    continue
                try:
                    fn(sid, ev, lv)
                except Exception:
                    self._failed(fn)

    def _failed(self, fn: SinkFn) -> None:
        # Logged once per sink: a sink that fails on every event must not flood the log;
        # the count keeps the rest.
        self.failures += 1
        if fn not in self._logged:
            self._logged.add(fn)
            # Formatted here rather than passed as exc_info: a kept log record would pin
            # the pump's frame and with it its actor-system endpoint.
            log.error("sink %r raised; isolated, others unaffected\n%s", fn, traceback.format_exc())
