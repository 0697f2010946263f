"""Supervision as values: what the Runner does when a session dies, which ingress is
poison, and which sessions may be passivated.

Pure functions over `actors.policy.RestartPolicy` and plain data; times are numbers the
caller passes in (the Runner's monotonic clock), never read here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from ...policy import RestartPolicy

#: Why the Runner records a session as failed when its restart budget is spent.
BUDGET_EXHAUSTED = "restart budget exhausted"


@attrs.frozen(kw_only=True)
class Restart:
    """Start a new incarnation after ``delay`` seconds."""

    delay: float


@attrs.frozen(kw_only=True)
class GiveUp:
    """Restart no more: the session is marked failed."""

    reason: str = BUDGET_EXHAUSTED


Verdict = Restart | GiveUp


@attrs.frozen(kw_only=True)
class InFlightVerdict:
    """What happens to the keyed ingress a crashed incarnation held uncommitted.

    ``redeliver`` goes first to the next incarnation (the key makes it idempotent);
    ``poisoned`` is answered `PoisonMessageError` and recorded; ``crashes`` is the new
    count of crashes per key still in flight.
    """

    redeliver: tuple[str, ...] = ()
    poisoned: tuple[str, ...] = ()
    crashes: Mapping[str, int] = attrs.field(factory=dict)


def count_crash(
    policy: RestartPolicy, crash_times: Iterable[float], now: float
) -> tuple[float, ...]:
    """The crash times that count after a crash at ``now`` (older ones leave the window)."""
    return policy.recent((*crash_times, now), now)


def after_crash(policy: RestartPolicy, recent: tuple[float, ...]) -> Verdict:
    """Restart with backoff while the budget lasts, else give up.

    The n-th crash within the window restarts after ``policy.delay(n)`` (at once, then
    0.01, 0.02, 0.04 ... seconds by default); crash ``max_restarts + 1`` marks the
    session failed.
    """
    if policy.exhausted(len(recent)):
        return GiveUp()
    return Restart(delay=policy.delay(len(recent)))


#: The first pause before a session stopped by an unreachable spine is started again.
OUTAGE_BACKOFF = 0.1


def outage_delay(policy: RestartPolicy, outages: int) -> float:
    """Seconds before the start that follows ``outages`` spine outages in a row: 0.1,
    0.2, 0.4 ... up to the policy's ``backoff_max``, for as long as the outage lasts (a
    storage outage is not a session fault and spends no restart budget)."""
    return float(min(policy.backoff_max, OUTAGE_BACKOFF * 2 ** max(0, outages - 1)))


def poison_detail(crashes: int) -> str:
    return f"the ingress was in flight through {crashes} crashes of the session"


def sort_in_flight(
    policy: RestartPolicy, keys: Iterable[str], crashes: Mapping[str, int]
) -> InFlightVerdict:
    """Apply the poison rule to the keys in flight when a session crashed.

    A key in flight through ``policy.poison_after`` crashes is poison; the others are
    redelivered, in the order given, with their crash count raised by one.
    """
    redeliver: list[str] = []
    poisoned: list[str] = []
    counts = dict(crashes)
    for key in keys:
        n = counts.get(key, 0) + 1
        if n >= policy.poison_after:
            poisoned.append(key)
            counts.pop(key, None)
        else:
            counts[key] = n
            redeliver.append(key)
    return InFlightVerdict(redeliver=tuple(redeliver), poisoned=tuple(poisoned), crashes=counts)


def may_passivate(
    *,
    live: bool,
    busy: bool,
    in_flight: int,
    subscribers: int,
    idle_for: float,
    idle_timeout: float | None,
    timer_soon: bool = False,
) -> bool:
    """A session may be stopped to save a process when it is live, runs no turn, holds
    no uncommitted ingress, no protocol subscription and no timer due soon (it would be
    brought back for it at once), and has been idle long enough."""
    if not idle_timeout or not live or busy or in_flight or subscribers or timer_soon:
        return False
    return idle_for >= idle_timeout
