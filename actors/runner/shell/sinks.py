"""`SinkRouter`: fans session output out to sinks, each filtered by kind.

Stored records are ``(seq, kind, payload)``; live items (notices, streamed text deltas) are
``(after_seq, kind, severity, text)``: a live item belongs after stored record
``after_seq`` and before ``after_seq + 1``, so a consumer can merge both in the order they
were produced.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import attrs

from spine import new_session_id

from ... import messages as m

#: A stored record as sessions report it: (seq, kind, raw JSON payload).
Record = tuple[int, str, bytes]
#: A live item: (after_seq, kind, severity-or-empty, text).
LiveItem = tuple[int, str, str, str]


def _log() -> logging.Logger:
    # Looked up at each use: Thespian re-initializes logging in actor processes.
    return logging.getLogger("vertebra.runner")


@attrs.define
class _Sink:
    sink_id: str
    target: Any
    kinds: frozenset[str]
    max_pending: int
    pending: int = 0
    delivered: int = 0
    dropped: int = 0
    failures: int = 0

    def select(
        self, records: tuple[Record, ...], live: tuple[LiveItem, ...]
    ) -> tuple[tuple[Record, ...], tuple[LiveItem, ...]]:
        """The records and live items this sink asked for (no kinds means all)."""
        if not self.kinds:
            return records, live
        return (
            tuple(r for r in records if r[1] in self.kinds),
            tuple(x for x in live if x[1] in self.kinds),
        )


class SinkRouter:
    """Fans session events out to sinks, each filtered by kind (empty means all).

    A target is an actor address (a conduit; it acknowledges batches with `SinkAck`) or,
    when embedded in-process, a callable. A callable that raises is isolated: logged and
    counted, and the other sinks still get the batch. A sink with ``max_pending``
    unacknowledged batches gets no more until it catches up; what it misses is counted in
    ``dropped``.
    """

    def __init__(self, send: Callable[[Any, Any], None]) -> None:
        self._send = send
        self._sinks: dict[str, _Sink] = {}

    def add(self, target: Any, kinds: tuple[str, ...] = (), max_pending: int = 1000) -> str:
        sink_id = new_session_id()
        self._sinks[sink_id] = _Sink(sink_id, target, frozenset(kinds), max(1, max_pending))
        return sink_id

    def remove(self, sink_id: str) -> bool:
        return self._sinks.pop(sink_id, None) is not None

    def ack(self, sink_id: str, count: int) -> None:
        s = self._sinks.get(sink_id)
        if s is not None:
            s.pending = max(0, s.pending - count)

    def deliver(
        self,
        session_id: str,
        records: tuple[Record, ...],
        live: tuple[LiveItem, ...],
    ) -> None:
        """Give every sink the part of this batch it asked for."""
        for s in list(self._sinks.values()):
            recs, lv = s.select(records, live)
            if not recs and not lv:
                continue
            batch = m.SinkBatch(session_id=session_id, sink_id=s.sink_id, records=recs, live=lv)
            if callable(s.target):
                self._call(s, batch)
            else:
                self._post(s, batch)

    def _call(self, s: _Sink, batch: m.SinkBatch) -> None:
        try:
            s.target(batch)
            s.delivered += 1
        except Exception:
            s.failures += 1
            if s.failures == 1:
                _log().exception("sink %s raised; isolated, others unaffected", s.sink_id)

    def _post(self, s: _Sink, batch: m.SinkBatch) -> None:
        if s.pending >= s.max_pending:
            if s.dropped == 0:
                _log().warning(
                    "sink %s has %d unacknowledged batches; dropping until it catches up",
                    s.sink_id,
                    s.pending,
                )
            s.dropped += 1
            return
        s.pending += 1
        s.delivered += 1
        self._send(s.target, batch)

    def failed(self, target: Any) -> None:
        """A delivery to ``target`` poisoned it: count it against that sink."""
        for s in self._sinks.values():
            if not callable(s.target) and s.target == target:
                s.failures += 1
                s.pending = max(0, s.pending - 1)

    def pending(self) -> dict[str, int]:
        """Unacknowledged batches of each sink that is an actor (its queue as seen here)."""
        return {s.sink_id: s.pending for s in self._sinks.values() if not callable(s.target)}

    def stats(self) -> dict[str, int]:
        return {
            "sinks": len(self._sinks),
            "sink_pending": sum(s.pending for s in self._sinks.values()),
            "sink_delivered": sum(s.delivered for s in self._sinks.values()),
            "sink_dropped": sum(s.dropped for s in self._sinks.values()),
            "sink_failures": sum(s.failures for s in self._sinks.values()),
        }
