"""`Histogram`: bucket counts of a latency, gathered in one process and merged in another.

A session process observes each spine append and sends what it gathered since its last
report (`Histogram.take`) with its news for the Runner; the Runner merges the deltas of
every incarnation (`Histogram.add`), so one histogram covers the whole daemon. Pure: the
caller measures the time.
"""

from __future__ import annotations

import bisect

__all__ = ["APPEND_BUCKETS", "Histogram"]

#: Upper bounds (seconds) of the spine append latency buckets; one more bucket is +Inf.
APPEND_BUCKETS: tuple[float, ...] = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    1.0,
)


class Histogram:
    """Counts per bucket (not cumulative; the last is +Inf) and the sum of the values."""

    def __init__(self, bounds: tuple[float, ...] = APPEND_BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    @property
    def count(self) -> int:
        return sum(self.counts)

    def observe(self, seconds: float) -> None:
        # A value equal to a bound belongs to that bound's bucket (Prometheus' ``le``).
        self.counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.sum += seconds

    def take(self) -> tuple[tuple[int, ...], float]:
        """What was observed since the last take, as ``(counts, sum)``; then start over."""
        out = (tuple(self.counts), self.sum)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        return out

    def add(self, counts: tuple[int, ...], total: float) -> None:
        """Merge a delta from `take` (ignored when its buckets do not match these)."""
        if len(counts) != len(self.counts):
            return
        for i, n in enumerate(counts):
            self.counts[i] += n
        self.sum += total

    def cumulative(self) -> list[int]:
        """Counts of values ``<=`` each bound, then all of them (the +Inf bucket)."""
        out, running = [], 0
        for n in self.counts:
            running += n
            out.append(running)
        return out
