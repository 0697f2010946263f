"""A session's timers as data (pure): what a ``timer.*`` event says, the fold of them, and
when a timer is due next.

A timer is one-shot (``at`` a time, or ``after`` seconds) or recurring (a cron expression in
a time zone, evaluated by the ``cronsim`` library: the ``timers`` extra). Times are Unix
seconds; the decider gets "now" in its commands, never from a clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs

from spine import Event, Kind

try:
    import cronsim
except ImportError:  # the timers extra is not installed: cron schedules are refused
    cronsim = None  # type: ignore[assignment]

#: What to do with firings missed while nothing ran (the daemon was down): ``fire_once``
#: delivers one firing for all of them, saying how late and how many; ``skip`` drops a
#: firing later than the timer's grace (the next one comes on time).
POLICIES = ("fire_once", "skip")
#: Seconds a firing may be late and still count as on time (``skip`` drops later ones).
DEFAULT_GRACE = 60.0
#: The last time a timer may name (the end of year 9999, UTC): later ones have no date.
LAST_TIME = 253402300799.0
#: Missed cron firings counted at most (a schedule every minute, down for a year, stops here).
MAX_MISSED = 10_000


class TimerError(ValueError):
    """A timer cannot be set; the message names the field and the value."""


@attrs.frozen(kw_only=True)
class Timer:
    """One timer as the session's stream holds it: ``due`` is its next firing."""

    id: str
    text: str
    due: float
    cron: str = ""
    tz: str = ""
    policy: str = "fire_once"
    grace: float = DEFAULT_GRACE
    #: Firings stored so far (delivered or skipped).
    fired: int = 0
    #: A firing opens a goal run (``text``: its objective; ``budget``: the run's budget).
    goal: bool = False
    budget: Mapping[str, float] = attrs.field(factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


def zone(tz: str) -> ZoneInfo:
    try:
        return ZoneInfo(tz or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        raise TimerError(f"tz must be an IANA time zone such as Europe/Paris, got {tz!r}") from None


def next_cron(cron: str, tz: str, after: float) -> float:
    """The first time strictly after ``after`` that ``cron`` names in ``tz`` (five fields,
    or six with seconds first).

    Daylight-saving transitions follow cron's custom (cronsim's): a time skipped by the
    spring change fires at the first valid time after it, a time repeated in the autumn
    fires once."""
    if cronsim is None:
        raise TimerError("cron schedules need the timers extra (pip install 'vertebra[timers]')")
    try:
        it = cronsim.CronSim(cron, datetime.fromtimestamp(after, zone(tz)))
        t = next(it).timestamp()
        if t <= after:  # cronsim may start at the time given, which may be ``after`` itself
            t = next(it).timestamp()
    except (cronsim.CronSimError, StopIteration, OverflowError, ValueError) as exc:
        raise TimerError(f"cron expression {cron!r} cannot be used: {exc}") from None
    return t


def plan(
    *,
    timer_id: str,
    text: str,
    now: float,
    at: float | None = None,
    after: float | None = None,
    cron: str = "",
    tz: str = "",
    policy: str = "fire_once",
    grace: float = DEFAULT_GRACE,
    goal: bool = False,
    budget: Mapping[str, float] | None = None,
) -> Timer:
    """The timer a request asks for, its first firing computed from ``now``."""
    if not timer_id or len(timer_id) > 128 or not timer_id.isprintable():
        raise TimerError(f"timer id must be 1 to 128 printable characters, got {timer_id!r}")
    if not isinstance(text, str) or not text.strip():
        raise TimerError("a timer needs a non-empty text (the message it delivers)")
    if policy not in POLICIES:
        raise TimerError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    if not 0.0 <= grace < float("inf"):
        raise TimerError(f"grace must be a non-negative number of seconds, got {grace!r}")
    given = [x for x in (at is not None, after is not None, bool(cron)) if x]
    if len(given) != 1:
        raise TimerError("a timer needs exactly one of at, after or cron")
    if cron:
        due = next_cron(cron, tz, now)
    elif at is not None:
        if not 0.0 <= at < float("inf"):
            raise TimerError(f"at must be a Unix time in seconds, got {at!r}")
        zone(tz)
        due = at
    else:
        assert after is not None
        if not 0.0 <= after < float("inf"):
            raise TimerError(f"after must be a non-negative number of seconds, got {after!r}")
        due = now + after
    if not due < LAST_TIME:
        raise TimerError("a timer cannot be due after the year 9999")
    t = Timer(id=timer_id, text=text, due=due, cron=cron, tz=tz, policy=policy, grace=grace)
    return attrs.evolve(t, goal=goal, budget=dict(budget or {})) if goal or budget else t


def missed_after(t: Timer, now: float) -> tuple[int, float | None]:
    """For a timer due at or before ``now``: how many further firings also passed (0 for
    a one-shot), and its next firing after ``now`` (None: it ends)."""
    if not t.cron:
        return 0, None
    missed, nxt = 0, next_cron(t.cron, t.tz, t.due)
    while nxt <= now and missed < MAX_MISSED:
        missed, nxt = missed + 1, next_cron(t.cron, t.tz, nxt)
    if nxt <= now:
        nxt = next_cron(t.cron, t.tz, now)
    return missed, nxt


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds")


# -- the fold ----------------------------------------------------------------------------


Timers = Mapping[str, Timer]


def _set(timers: Timers, ev: Event) -> Timers:
    x = ev.extra
    t = Timer(
        id=str(x.get("timer", "")),
        text=ev.text,
        due=float(x.get("due", 0.0)),
        cron=str(x.get("cron", "")),
        tz=str(x.get("tz", "")),
        policy=str(x.get("policy", "fire_once")),
        grace=float(x.get("grace", DEFAULT_GRACE)),
        goal=x.get("run") == "goal",
        budget=dict(budget) if isinstance(budget := x.get("budget"), Mapping) else {},
    )
    return {**timers, t.id: t}


def _cancelled(timers: Timers, ev: Event) -> Timers:
    tid = ev.extra.get("timer")
    return {k: v for k, v in timers.items() if k != tid} if tid in timers else timers


def _fired(timers: Timers, ev: Event) -> Timers:
    tid = ev.extra.get("timer")
    t = timers.get(tid) if isinstance(tid, str) else None
    if t is None:
        return timers
    nxt = ev.extra.get("next")
    if nxt is None:
        return {k: v for k, v in timers.items() if k != tid}
    return {**timers, t.id: attrs.evolve(t, due=float(nxt), fired=t.fired + 1)}


FOLD = {Kind.TIMER_SET: _set, Kind.TIMER_CANCELLED: _cancelled, Kind.TIMER_FIRED: _fired}


def set_event(t: Timer) -> Event:
    extra: dict[str, Any] = {"timer": t.id, "due": t.due, "dueAt": iso(t.due), "policy": t.policy}
    if t.cron:
        extra.update(cron=t.cron, tz=t.tz or "UTC")
    elif t.tz:
        extra["tz"] = t.tz
    if t.grace != DEFAULT_GRACE:
        extra["grace"] = t.grace
    if t.goal:
        extra["run"] = "goal"
        if t.budget:
            extra["budget"] = dict(t.budget)
    return Event(kind=Kind.TIMER_SET, text=t.text, extra=extra)
