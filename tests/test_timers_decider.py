"""Timer decisions as tables (`actors.testing.SessionKit`): setting, firing once,
coalescing what was missed, skipping, busy policies, cancelling; cron in time zones
across daylight-saving changes (`timerbook.next_cron`)."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from actors.policy import BusyPolicy
from actors.session.rules import commands as c
from actors.session.rules.timerbook import next_cron
from actors.testing import Outcome, SessionKit
from spine import Kind

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=ZoneInfo("UTC")).timestamp()  # a Monday
DAY = 86400.0


def _kit(policy: BusyPolicy = BusyPolicy.ENQUEUE) -> SessionKit:
    kit = SessionKit(busy_policy=policy)
    kit.create()
    return kit


def _set(kit: SessionKit, tid: str = "t1", key: str | None = None, **spec: object) -> Outcome:
    spec.setdefault("text", "ping")
    spec.setdefault("now", T0)
    return kit.run(c.SetTimer(request_id="r", key=key or f"k-{tid}", timer_id=tid, **spec))  # type: ignore[arg-type]


def _fire(kit: SessionKit, now: float) -> Outcome:
    return kit.run(c.FireDue(request_id="f", now=now))


@pytest.mark.parametrize(
    ("spec", "due"),
    [
        ({"after": 90.0}, T0 + 90),
        ({"at": T0 + 5}, T0 + 5),
        ({"at": T0 - 5}, T0 - 5),  # in the past: due at once
        ({"cron": "0 9 * * 1-5", "tz": "Europe/Paris"}, T0 + 0),  # 09:00 Paris = 08:00 UTC
        ({"cron": "0 9 * * 1-5"}, T0 + 3600),  # UTC
        ({"cron": "0 9 * * 6", "tz": "Asia/Tokyo"}, T0 + 4 * DAY + 16 * 3600),
    ],
)
def test_a_timer_is_stored_with_its_first_due_time(spec: dict[str, object], due: float) -> None:
    kit = _kit()
    out = _set(kit, **spec)  # type: ignore[arg-type]
    if spec.get("tz") == "Europe/Paris":
        due = T0 + DAY  # 08:00 UTC is now itself: the next weekday
    assert out.kinds == ["timer.set"]
    assert out.events[0].extra["due"] == due and out.events[0].text == "ping"
    assert kit.state.stored.timers["t1"].due == due


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({}, "exactly one of at, after or cron"),
        ({"after": 1.0, "cron": "* * * * *"}, "exactly one"),
        ({"after": -1.0}, "after must be"),
        ({"cron": "61 * * * *"}, "cron expression"),
        ({"cron": "* * * * *", "tz": "Mars/Olympus"}, "tz must be an IANA"),
        ({"after": 1.0, "policy": "twice"}, "policy must be one of"),
        ({"after": 1.0, "text": "  "}, "non-empty text"),
        ({"after": 1.0, "grace": float("nan")}, "grace"),
        ({"after": 1e300}, "after the year 9999"),
        ({"at": 1e17}, "after the year 9999"),
        ({"cron": "0 0 30 2 *"}, "Bad day-of-month"),
    ],
)
def test_a_timer_that_cannot_be_set_is_refused_and_stores_nothing(
    spec: dict[str, object], problem: str
) -> None:
    kit = _kit()
    out = _set(kit, **spec)  # type: ignore[arg-type]
    assert out.events == ()
    assert out.error == "InvalidRequest" and problem in out.reply.message


def test_a_retried_set_is_answered_as_the_first_and_stores_nothing() -> None:
    kit = _kit()
    first = _set(kit, key="same", after=10.0)
    stored = ((first.events[0].seq, "timer.set"),)
    again = kit.run(
        c.SetTimer(
            request_id="r",
            key="same",
            timer_id="t1",
            text="ping",
            after=10.0,
            now=T0 + 5,
            stored=stored,
        )
    )
    assert again.events == () and again.reply.duplicate
    assert kit.state.stored.timers["t1"].due == T0 + 10


def test_a_one_shot_fires_once_at_its_due_time_as_a_user_message_that_starts_a_turn() -> None:
    kit = _kit()
    _set(kit, after=10.0)
    assert _fire(kit, T0 + 9.9).events == ()
    out = _fire(kit, T0 + 10.25)
    assert out.kinds[:3] == ["timer.fired", "user.message", "turn.started"]
    fired, msg = out.events[:2]
    assert (
        fired.extra["late"] == 0.25 and fired.extra["missed"] == 0 and fired.extra["next"] is None
    )
    assert msg.text == "ping" and msg.extra["timer"] == "t1"
    assert out.reply.key == f"timer:t1@{T0 + 10.0!r}"
    assert kit.state.stored.timers == {}
    # Asked again (a second Runner, a retry), or after a restart: nothing is due.
    assert _fire(kit, T0 + 11).events == ()
    kit.restart()
    assert _fire(kit, T0 + 12).events == ()
    assert sum(e.kind == Kind.TIMER_FIRED for e in kit.events) == 1


def test_the_same_firing_appended_twice_is_one_append() -> None:
    """The firing's key names (timer, due): a second append of it is a duplicate."""
    kit = _kit()
    _set(kit, after=1.0)
    st = kit.state
    first = _fire(kit, T0 + 2)
    kit.state = st  # an incarnation that had not folded the firing yet
    again = _fire(kit, T0 + 2)
    assert again.events == () and again.reply.duplicate
    assert first.reply.seq == again.reply.seq


def test_missed_cron_firings_are_coalesced_into_one_that_says_how_many_and_how_late() -> None:
    kit = _kit()
    _set(kit, cron="0 9 * * *")  # daily at 09:00 UTC: first at T0 + 1 h
    out = _fire(kit, T0 + 3600 + 3 * DAY + 120)
    fired = out.events[0]
    assert fired.extra["missed"] == 3 and fired.extra["late"] == 3 * DAY + 120
    assert fired.extra["next"] == T0 + 3600 + 4 * DAY
    assert [e.kind for e in out.events].count(Kind.USER_MESSAGE) == 1
    assert kit.state.stored.timers["t1"].due == T0 + 3600 + 4 * DAY


def test_a_skip_timer_later_than_its_grace_is_recorded_skipped_and_delivers_nothing() -> None:
    kit = _kit()
    _set(kit, cron="0 9 * * *", policy="skip", grace=60.0)
    on_time = _fire(kit, T0 + 3600 + 30)
    assert on_time.kinds[:2] == ["timer.fired", "user.message"]
    late = _fire(kit, T0 + 3600 + DAY + 61)
    assert late.kinds == ["timer.fired"]
    assert late.events[0].extra["skipped"] is True
    assert kit.state.stored.timers["t1"].due == T0 + 3600 + 2 * DAY


def test_busy_policies_apply_to_a_firing() -> None:
    reject = _kit(BusyPolicy.REJECT)
    reject.send("busy")
    _set(reject, after=1.0)
    out = _fire(reject, T0 + 1)
    assert out.kinds == ["timer.fired"] and out.events[0].extra["rejected"] == "busy"
    enqueue = _kit(BusyPolicy.ENQUEUE)
    enqueue.send("busy")
    _set(enqueue, after=1.0)
    assert _fire(enqueue, T0 + 1).kinds == ["timer.fired", "user.message"]
    interrupt = _kit(BusyPolicy.INTERRUPT)
    interrupt.send("busy")
    _set(interrupt, after=1.0)
    kinds = _fire(interrupt, T0 + 1).kinds
    assert kinds[0] == "timer.fired" and "turn.cancelled" in kinds and "user.message" in kinds


def test_cancelling_removes_a_timer_and_closing_cancels_them_all() -> None:
    kit = _kit()
    _set(kit, "a", after=5.0)
    _set(kit, "b", cron="*/5 * * * *")
    out = kit.run(c.CancelTimer(request_id="x", key="cx", timer_id="a"))
    assert out.kinds == ["timer.cancelled"] and list(kit.state.stored.timers) == ["b"]
    again = kit.run(c.CancelTimer(request_id="x", key="cy", timer_id="a"))
    assert again.events == () and again.reply.consumed
    closed = kit.close()
    assert "timer.cancelled" in closed.kinds and kit.state.stored.timers == {}
    assert _fire(kit, T0 + DAY).events == ()


def _local(ts: float, tz: str) -> str:
    return datetime.fromtimestamp(ts, ZoneInfo(tz)).isoformat()


def test_cron_across_the_spring_change_fires_the_skipped_time_at_the_first_valid_one() -> None:
    ny = "America/New_York"
    start = datetime(2026, 3, 7, 12, 0, tzinfo=ZoneInfo(ny)).timestamp()
    first = next_cron("30 2 * * *", ny, start)
    assert _local(first, ny) == "2026-03-08T03:00:00-04:00"  # 02:30 does not exist that day
    assert _local(next_cron("30 2 * * *", ny, first), ny) == "2026-03-09T02:30:00-04:00"


def test_cron_across_the_autumn_change_fires_a_repeated_time_once() -> None:
    ny = "America/New_York"
    start = datetime(2026, 10, 31, 12, 0, tzinfo=ZoneInfo(ny)).timestamp()
    first = next_cron("30 1 * * *", ny, start)
    assert _local(first, ny) == "2026-11-01T01:30:00-04:00"
    second = next_cron("30 1 * * *", ny, first)
    assert _local(second, ny) == "2026-11-02T01:30:00-05:00"  # not 01:30 EST the same day


def test_a_weekday_schedule_keeps_its_local_hour_across_the_change() -> None:
    paris = "Europe/Paris"
    start = datetime(2026, 10, 23, 12, 0, tzinfo=ZoneInfo(paris)).timestamp()  # a Friday
    mon = next_cron("0 9 * * 1-5", paris, start)
    assert _local(mon, paris) == "2026-10-26T09:00:00+01:00"  # after the change: UTC+1
    assert mon - next_cron("0 9 * * 1-5", paris, start - DAY) == 3 * DAY + 3600
