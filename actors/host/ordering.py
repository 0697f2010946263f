"""`BatchOrder`: protocol subscription batches put back in the order they were sent.

Thespian's TCP transport does not keep the order of several messages in flight from one
actor to one target, so a subscriber can receive batch 3 before batch 2. Each
`EventBatch` carries its number within its subscription; a receiver passes every batch
through `BatchOrder.offer` and handles what it returns, which is in order, gap-free and
exactly once.
"""

from __future__ import annotations

from .. import messages as m


class BatchOrder:
    """A reorder buffer per subscription. Not thread-safe: one per receiving thread."""

    def __init__(self) -> None:
        self._next: dict[str, int] = {}
        self._held: dict[str, dict[int, m.EventBatch]] = {}

    def offer(self, batch: m.EventBatch) -> list[m.EventBatch]:
        """The batches that are now due, in order (empty if ``batch`` came early).

        An unnumbered batch (``batch == 0``) passes at once; a number already released
        (a duplicate) is dropped.
        """
        if batch.batch <= 0:
            return [batch]
        sid = batch.subscription_id
        want = self._next.get(sid, 1)
        if batch.batch < want:
            return []
        held = self._held.setdefault(sid, {})
        held[batch.batch] = batch
        out = []
        while want in held:
            out.append(held.pop(want))
            want += 1
        self._next[sid] = want
        if not held:
            del self._held[sid]
        return out

    def pending(self, subscription_id: str) -> int:
        """How many batches of the subscription wait for an earlier one."""
        return len(self._held.get(subscription_id, {}))


__all__ = ["BatchOrder"]
