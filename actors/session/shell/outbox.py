"""News for the Runner (stored records for sinks, live items, committed keys, the busy
flag), coalesced into one `Appended` message per interval.

One message per append would queue behind Thespian's one-in-flight-per-pair transport and
cost more CPU than the turn itself. Late is safe: sinks are live views, and a key cleared
late at most makes a redelivery that the idempotency key turns into a duplicate.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..._runtime.histogram import Histogram
from ..protocol import Appended

#: Seconds a session gathers news for the Runner before sending it in one message.
NOTIFY_INTERVAL = 0.005
NOTIFY_MAX_RECORDS = 500


class Outbox:
    def __init__(self, session_id: str, incarnation: int) -> None:
        self._sid = session_id
        self._incarnation = incarnation
        self.records: list[tuple[int, str, bytes]] = []
        self.live: list[tuple[int, str, str, str]] = []
        self.keys: list[str] = []
        #: Spine append latencies since the last report; they ride on the next one.
        self.appends = Histogram()

    def add(
        self,
        records: Iterable[tuple[int, str, bytes]] = (),
        live: Iterable[tuple[int, str, str, str]] = (),
        keys: Iterable[str] = (),
    ) -> None:
        self.records.extend(records)
        self.live.extend(live)
        self.keys.extend(keys)

    def __bool__(self) -> bool:
        return bool(self.records or self.live or self.keys)

    def full(self) -> bool:
        return len(self.records) >= NOTIFY_MAX_RECORDS

    def take(self, busy: bool, queued: int = 0) -> Appended:
        counts, seconds = self.appends.take()
        msg = Appended(
            session_id=self._sid,
            incarnation=self._incarnation,
            records=tuple(self.records),
            live=tuple(self.live),
            keys=tuple(self.keys),
            busy=busy,
            queued=queued,
            append_counts=counts if any(counts) else (),
            append_seconds=seconds,
        )
        self.records.clear()
        self.live.clear()
        self.keys.clear()
        return msg
