"""Protocol subscriptions a session serves: backlog from the log, then every later append,
exactly once and in order (the session is its stream's only writer, so nothing slips in
between the backlog read and the registration)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from spine import Log, Record

from ... import messages as m

PAGE = 500


@attrs.define
class _Sub:
    sub_id: str
    address: Any
    cursor: int
    kinds: tuple[str, ...]
    sent: int = 0


class Subscriptions:
    def __init__(self, session_id: str, log: Log, send: Callable[[Any, Any], None]) -> None:
        self._sid = session_id
        self._log = log
        self._send = send
        self._subs: dict[str, _Sub] = {}

    def __len__(self) -> int:
        return len(self._subs)

    def _batch(self, sub: _Sub, records: Sequence[Record] = (), closed: bool = False) -> None:
        sub.sent += 1
        self._send(
            sub.address,
            m.EventBatch(
                session_id=self._sid,
                subscription_id=sub.sub_id,
                records=tuple((r.seq, r.kind, r.payload) for r in records),
                closed=closed,
                batch=sub.sent,
            ),
        )

    def add(self, msg: m.Subscribe, reply_to: Any, last_seq: int, closed: bool) -> None:
        """Answer, send the backlog after ``msg.after_seq``, then keep the subscriber unless
        the session is closed (then a final closed batch ends it)."""
        sub = _Sub(uuid.uuid4().hex, reply_to, msg.after_seq, tuple(msg.kinds))
        self._send(
            reply_to,
            m.SubscribeReply(
                request_id=msg.request_id, session_id=self._sid, subscription_id=sub.sub_id
            ),
        )
        while sub.cursor < last_seq:
            page = self._log.read(self._sid, sub.cursor, PAGE, sub.kinds or None)
            if not page:
                break
            self._batch(sub, page)
            sub.cursor = page[-1].seq
        sub.cursor = max(sub.cursor, last_seq)
        if closed:
            self._batch(sub, closed=True)
            return
        self._subs[sub.sub_id] = sub

    def remove(self, sub_id: str) -> None:
        self._subs.pop(sub_id, None)

    def publish(self, records: Sequence[Record]) -> None:
        if not records:
            return
        last = records[-1].seq
        for sub in self._subs.values():
            out = [
                r for r in records if r.seq > sub.cursor and (not sub.kinds or r.kind in sub.kinds)
            ]
            sub.cursor = max(sub.cursor, last)
            if out:
                self._batch(sub, out)

    def end_all(self) -> None:
        """The session closed: every subscription ends with a closed batch."""
        for sub in self._subs.values():
            self._batch(sub, closed=True)
        self._subs.clear()
