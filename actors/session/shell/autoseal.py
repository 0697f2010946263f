"""Auto-seal: the session seals its own stream by count and by time (`SealPolicy`).

Tampering after the newest seal cannot be detected, so a daemon bounds that window. The
session is its stream's only writer, so it seals itself: the shell asks `AutoSealer`
after each append whether a seal is due now or a timer should start, and on the timer
(or at once) for the `Sealed` command to run through the decider like an asked-for seal.
Counting costs one comparison per append; reading the newest seal happens once per
incarnation, on the first append. The sealer also keeps the rows it is told of since
the last seal, so a seal due by the policy hashes them without reading its range back
(the read was 1.1 ms of a 1000-event seal's 2.7); the first seal of an incarnation, or
one after rows it did not see, reads the range as before. Hashing each append's rows
as they come (a `MerkleFrontier`) was measured and dropped: the same hashes cost about
three times as much one append at a time as in one pass at the seal.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime

import attrs

from spine import Event, Kind, Log, Record, SpineError
from spine.seal import (
    NothingToSealError,
    SigningKey,
    compute_seal,
    frontier_at,
    prepare_seal,
    seals,
)

from ...policy import SealPolicy
from ..rules import commands as c

#: The wakeup payloads of a seal due by count (at once) and by time (the interval's timer).
AUTO_SEAL = "auto-seal"
AUTO_SEAL_TIMER = "auto-seal-timer"


def _log() -> logging.Logger:
    return logging.getLogger("vertebra.session")


class AutoSealer:
    """What no seal covers yet in one stream, and when the policy wants a seal."""

    def __init__(
        self, policy: SealPolicy, stream: str, log: Log, key: Callable[[], SigningKey]
    ) -> None:
        self.policy = policy
        self.stream = stream
        self.log = log
        self._key = key
        self._signing: SigningKey | None = None
        #: First seq of the next seal; None until the newest seal was read.
        self.first: int | None = None
        #: The last seq that needs no seal now (the newest seal event, or what it covers):
        #: a seal event alone is not worth another seal.
        self.mark = 0
        #: A seal by count is on its way / the interval's timer runs (one of each at most:
        #: a running timer must not hold a count seal back).
        self.now = False
        self.timer = False
        self.broken = False
        #: The rows appended from seq ``rows_first`` on, as the appends returned them;
        #: they serve a seal when ``rows_first`` is its first seq (`_track`).
        self.rows_first: int | None = None
        self.rows: list[Record] = []

    def _load(self) -> None:
        found = seals(self.log, self.stream)
        if found:
            s = found[-1]
            self.first = s.last + 1
            self.mark = s.seq if s.seq == s.last + 1 else s.last
        else:
            self.first, self.mark = 1, 0

    def appended(
        self,
        events: Sequence[Event],
        first_seq: int,
        last_seq: int,
        metadata: Mapping[str, str],
        records: Sequence[Record] | None = None,
    ) -> tuple[float, str] | None:
        """Note an append (``records``: the rows it stored, kept for the next seal);
        when a seal is due, as the delay and wakeup payload to schedule (0 and
        `AUTO_SEAL`: at once), or None when nothing new is to be scheduled."""
        if self.broken:
            return None
        policy = self.policy.for_session(metadata)
        if not policy.enabled:
            return None
        if self.first is None:
            try:
                self._load()
            except SpineError as exc:
                # A seal that does not parse: verification reports it; sealing after it
                # would only bury it, so this incarnation stops sealing by itself.
                _log().warning("session %s: auto-seal off: %s", self.stream, exc)
                self.broken = True
                return None
        for i, ev in enumerate(events):
            if ev.kind == Kind.RECORD_SEALED:
                last = ev.record.get("last")
                if isinstance(last, int):
                    seq = first_seq + i
                    self.first = last + 1
                    self.mark = seq if seq == last + 1 else last
        if records is not None:
            self._track(records)
        pending = last_seq - self.mark
        if pending <= 0:
            return None
        if policy.every and pending >= policy.every and not self.now:
            self.now = True
            return 0.0, AUTO_SEAL
        if policy.interval and not self.timer:
            self.timer = True
            return policy.interval, AUTO_SEAL_TIMER
        return None

    def due(self, payload: str, last_seq: int) -> c.Sealed | None:
        """The seal to append now that the wakeup ``payload`` came (None: nothing new, or
        it cannot be made)."""
        if payload == AUTO_SEAL_TIMER:
            self.timer = False
        else:
            self.now = False
        if self.broken or self.first is None or last_seq - self.mark <= 0:
            return None
        try:
            if self._signing is None:
                self._signing = self._key()
            rows = self.rows
            if self.rows_first == self.first and rows and rows[-1].seq == last_seq:
                seal = compute_seal(
                    self.stream,
                    self.first,
                    [r.payload for r in rows],
                    self._signing,
                    time=datetime.now(UTC),
                    versions=[r.version for r in rows],
                )
                # Forks find a prefix's root from the newest seal's frontier; a seal made
                # from the rows in hand stores one too (the last seal's, extended).
                frontier = frontier_at(self.log, self.stream, self.first - 1)
                frontier.extend(seal.leaf_list())
                seal = attrs.evolve(seal, frontier=frontier.peaks())
            else:
                seal = prepare_seal(self.log, self.stream, self._signing, first=self.first)
        except NothingToSealError:
            return None
        except SpineError as exc:
            _log().warning("session %s: auto-seal failed: %s", self.stream, exc)
            return None
        return c.Sealed(request_id="", seal=seal)

    def _track(self, records: Sequence[Record]) -> None:
        """Keep ``records`` for the range the next seal covers; rows it has (a duplicate
        append's) are skipped, and after a gap the next seal reads its range itself."""
        rows = self.rows
        if self.rows_first != self.first:
            # A new range (the seal event that ends the last one starts it), or the first.
            self.rows_first = self.first
            rows = self.rows = []
        have = rows[-1].seq if rows else (self.first or 1) - 1
        fresh = [r for r in records if r.seq > have]
        if not fresh:
            return
        if fresh[0].seq != have + 1 or len(rows) > _MAX_ROWS:
            self.rows_first = -1  # not this range's rows from its start: it is read
            self.rows = []
            return
        rows.extend(fresh)


#: Past this many rows unsealed (a policy sealing by time alone, a busy stream) the sealer
#: stops keeping them, and that seal reads its range.
_MAX_ROWS = 20_000
