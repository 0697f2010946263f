"""Tenants: whose a session is, and what a tenant may use.

A session's tenant is its ``tenant`` metadata key, which only the operator sets
(`actors.authority`): the gateway sets it when a tenant's token creates the session, and
a session's tenant is read once, from the properties its stream was created with. A
tenant's token reaches only its tenant's sessions (any other answers 404, as if it did
not exist). `Quotas` bound each tenant: live sessions (429 ``quota_exceeded`` on create),
turns running at once (429 ``quota_exceeded`` with ``Retry-After`` on a message or goal
that would start one more) and requests per second with a burst (429 ``rate_limited``
with ``Retry-After``).
"""

from __future__ import annotations

import math
import threading
import time

import attrs

from spine import Kind, Log, SpineError

from ..host.timers import read_state

#: The metadata key naming a session's tenant.
TENANT_KEY = "tenant"


@attrs.frozen(kw_only=True)
class Quotas:
    """What each tenant may use; None: no bound."""

    #: Sessions a tenant holds that are not closed or failed.
    sessions: int | None = None
    #: Requests per second a tenant's tokens make, on average ...
    rate: float | None = None
    #: ... and at once.
    burst: int = 20
    #: Sessions of a tenant running a turn at once.
    turns: int | None = None
    #: What a tenant's sessions may spend together, in the operator's price table's
    #: currency (`Host(prices=)`); checked before each turn starts.
    cost: float | None = None


class Tenants:
    """The tenant of each session (read once, kept), and each tenant's request budget."""

    def __init__(self, log: Log, quotas: Quotas) -> None:
        self.log = log
        self.quotas = quotas
        self._known: dict[str, str | None] = {}
        self._buckets: dict[str, tuple[float, float]] = {}
        #: Each tenant's sessions whose turn runs (or that were let start one).
        self._running: dict[str, set[str]] = {}
        #: What each session of a tenant spent, for the tenants asked about so far, and
        #: the sessions whose turns ended since (their spending is read again).
        self._spent: dict[str, dict[str, float]] = {}
        self._dirty: set[str] = set()
        self._lock = threading.Lock()

    def remember(self, sid: str, tenant: str | None) -> None:
        with self._lock:
            self._known[sid] = tenant

    def tenant_of(self, sid: str) -> str | None:
        """The tenant ``sid`` was created in (None: none, or no such session)."""
        with self._lock:
            if sid in self._known:
                return self._known[sid]
        tenant = None
        records = self.log.read(sid, 0, 4)
        for r in records:
            ev = r.event()
            if ev.kind == Kind.PROPERTIES and ev.properties:
                tenant = ev.properties.get(TENANT_KEY)
                break
        if records:  # an unknown session may yet be created: nothing to remember
            self.remember(sid, tenant)
        return tenant

    def take(self, tenant: str) -> float:
        """Spend one request of ``tenant``'s budget: 0 if it may go on, else the seconds
        until it may."""
        rate = self.quotas.rate
        if rate is None:
            return 0.0
        now = time.monotonic()
        with self._lock:
            level, stamp = self._buckets.get(tenant, (float(self.quotas.burst), now))
            level = min(float(self.quotas.burst), level + (now - stamp) * rate)
            if level < 1.0:
                self._buckets[tenant] = (level, now)
                return (1.0 - level) / rate
            self._buckets[tenant] = (level - 1.0, now)
        return 0.0

    def observe(self, sid: str, kind: str) -> None:
        """A stored event of ``sid`` (the gateway's Host sink): a turn's start and end
        move it in and out of its tenant's running turns."""
        if kind not in _TURN_KINDS or (self.quotas.turns is None and self.quotas.cost is None):
            return
        tenant = self.tenant_of(sid)
        if tenant is None:
            return
        with self._lock:
            if kind != Kind.TURN_STARTED:
                self._dirty.add(sid)
            running = self._running.setdefault(tenant, set())
            if kind == Kind.TURN_STARTED:
                running.add(sid)
            else:
                running.discard(sid)

    def admit_turn(self, tenant: str, sid: str) -> bool | None:
        """Whether a request that may start a turn in ``sid`` fits ``tenant``'s quota of
        turns at once: None if it does not; True if it fits and took a place (give it back
        with `release` when no turn starts); False if it fits taking none (no quota, or
        ``sid``'s turn already runs: the request waits behind it)."""
        limit = self.quotas.turns
        if limit is None:
            return False
        with self._lock:
            running = self._running.setdefault(tenant, set())
            if sid in running:
                return False
            if len(running) >= limit:
                return None
            # Taken before the request is sent: its turn's end cannot be seen first.
            running.add(sid)
            return True

    def spent(self, tenant: str) -> float:
        """What ``tenant``'s sessions spent under the operator's prices (blocking: the
        first ask reads every stream once, later ones only the sessions whose turns ended
        since)."""
        with self._lock:
            known = self._spent.get(tenant)
            # Taken off first: a turn that ends while its cost is read marks it again.
            dirty = {s for s in self._dirty if self._known.get(s) == tenant}
            self._dirty -= dirty
        if known is None:
            known = {}
            for info in self.log.streams():
                if self.tenant_of(info.stream) == tenant:
                    known[info.stream] = self._cost(info.stream)
        else:
            known = {**known, **{s: self._cost(s) for s in dirty}}
        with self._lock:
            self._spent[tenant] = known
        return sum(known.values())

    def _cost(self, sid: str) -> float:
        try:
            return float(read_state(self.log, sid).spend.cost)
        except SpineError:
            return 0.0  # a stream that does not decode spends nothing more

    def release(self, tenant: str, sid: str) -> None:
        with self._lock:
            self._running.get(tenant, set()).discard(sid)


_TURN_KINDS = frozenset({Kind.TURN_STARTED, Kind.TURN_COMPLETED, Kind.TURN_CANCELLED})


def retry_after(seconds: float) -> str:
    return str(max(1, math.ceil(seconds)))
