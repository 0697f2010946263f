"""`SessionTimers`: the `Host` methods for timers and schedules in a session (set, cancel,
list) and for what a session spent (`spending`)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from spine import Log, SpineError

from .. import messages as m
from ..errors import InvalidRequest
from ..session.rules.state import SessionState, fold
from ..session.rules.timerbook import POLICIES, iso
from .replies import request_id


def read_state(log: Log, session_id: str) -> SessionState:
    """The session's state folded from its stream (no process needed)."""
    return fold(SessionState(session_id=session_id), log.read_events(session_id))


def _number(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest(f"{name} must be a number of seconds, got {value!r}")
    return float(value)


class SessionTimers:
    """Timers, schedules and spending; a mixin of `Host`."""

    _log: Log

    if TYPE_CHECKING:

        def _request(self, msg: Any, *, timeout: float | None = None) -> Any: ...

    def set_timer(
        self,
        session_id: str,
        text: str,
        *,
        at: float | None = None,
        after: float | None = None,
        cron: str = "",
        tz: str = "",
        policy: str = "fire_once",
        grace: float = 60.0,
        timer_id: str | None = None,
        key: str | None = None,
        goal: bool = False,
        budget: Mapping[str, float] | None = None,
    ) -> str:
        """Set a timer that delivers ``text`` to the session as a user message: once ``at``
        a Unix time or ``after`` seconds, or on every time the five-field ``cron``
        expression names in time zone ``tz``. Firings missed while the daemon was down
        become one (``fire_once``) or are dropped past ``grace`` seconds (``skip``).
        With ``goal`` a firing opens a goal run instead, ``text`` its objective and
        ``budget`` its budget (as `submit`'s); one due while a run is in flight is stored
        ``rejected`` and delivers nothing. Returns the timer's id (a fresh one unless
        given; an id in use is replaced)."""
        if not isinstance(text, str) or not isinstance(cron, str) or not isinstance(tz, str):
            raise InvalidRequest("a timer's text, cron and tz must be strings")
        if policy not in POLICIES:
            raise InvalidRequest(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
        tid = timer_id or f"t-{uuid.uuid4().hex[:12]}"
        msg = m.SetTimer(
            request_id=request_id(),
            session_id=session_id,
            key=key or f"set-{tid}-{request_id()}",
            timer_id=tid,
            text=text,
            at=_number("at", at),
            after=_number("after", after),
            cron=cron,
            tz=tz,
            policy=policy,
            grace=_number("grace", grace) or 0.0,
            goal=bool(goal),
            budget=dict(budget or {}),
        )
        self._request(msg)
        return tid

    def schedule(self, session_id: str, cron: str, text: str, *, tz: str = "", **kw: Any) -> str:
        """`set_timer` on a cron schedule (``"0 9 * * 1-5"``: weekdays at nine in ``tz``)."""
        return self.set_timer(session_id, text, cron=cron, tz=tz, **kw)

    def cancel_timer(self, session_id: str, timer_id: str, *, key: str | None = None) -> m.Ack:
        """Cancel a timer; one not set is acknowledged as ``consumed``."""
        msg = m.CancelTimer(
            request_id=request_id(),
            session_id=session_id,
            key=key or request_id(),
            timer_id=timer_id,
        )
        return self._request(msg)  # type: ignore[no-any-return]

    def timers(self, session_id: str) -> list[dict[str, Any]]:
        """The session's timers, next due first, read from its stream."""
        st = read_state(self._log, session_id)
        out = []
        for t in sorted(st.timers.values(), key=lambda t: (t.due, t.id)):
            row = t.as_dict()
            row["dueAt"] = iso(t.due)
            out.append(row)
        return out

    def spending(self, session_id: str) -> dict[str, Any]:
        """What the session spent under the operator's prices, its budget
        (``governance.max_cost`` plus the raises) and the model calls paused on it."""
        return spending_of(read_state(self._log, session_id))

    def spending_by_tenant(self) -> dict[str, dict[str, Any]]:
        """What each tenant's sessions spent under the operator's prices (the sessions
        without a ``tenant`` key under ""), in all and per period (``periods``: cost by
        ``day:YYYY-MM-DD`` and ``month:YYYY-MM``, UTC; ``raised``: the raises of its caps;
        ``caps``: the operator's): reads every stream, for reports, not gates."""
        return spending_by_tenant(self._log)


def spending_by_tenant(log: Log) -> dict[str, dict[str, Any]]:
    """`SessionTimers.spending_by_tenant` over ``log``; a stream that does not decode is
    left out (its status names it)."""
    out: dict[str, dict[str, Any]] = {}
    for info in log.streams():
        try:
            st = read_state(log, info.stream)
        except SpineError:
            continue
        if not st.spend.priced:
            continue
        tenant = st.metadata.get("tenant", "")
        row = out.setdefault(
            tenant, {"cost": 0.0, "sessions": 0, "periods": {}, "raised": {}, "caps": {}}
        )
        row["cost"] += st.spend.cost
        row["sessions"] += 1
        row["caps"] = dict(st.spend.caps(tenant)) or row["caps"]
        for into, by_period in (("periods", st.spend.periods), ("raised", st.spend.period_raised)):
            for key, amount in by_period.items():
                row[into][key] = row[into].get(key, 0.0) + amount
    return out


def spending_of(st: SessionState) -> dict[str, Any]:
    """`SessionTimers.spending` of a folded state."""
    out = st.spend.as_dict()
    raw = st.metadata.get("governance.max_cost")
    try:
        budget = float(raw) + st.spend.raised if raw else None
    except ValueError:
        budget = None
    out["budget"] = budget
    out["paused"] = sorted(c for c, p in st.pending_actions.items() if p.action == "model")
    # A tenant's caps per period and which paused calls wait on one (the tenant's total
    # is the ledger's: `spending_by_tenant` for reports).
    tenant = st.metadata.get("tenant", "")
    out["tenant"] = tenant
    out["caps"] = dict(st.spend.caps(tenant))
    out["pausedFor"] = {
        str(c): st.spend.paused_for[c] for c in out["paused"] if c in st.spend.paused_for
    }
    g = st.running_goal
    limit = None if g is None else g.budget.get("max_cost")
    out["goal"] = None
    if g is not None and limit is not None:
        cost = round(st.spend.cost - g.base_cost, 9)
        out["goal"] = {"id": g.id, "cost": cost, "budget": round(limit + g.raised, 9)}
    return out
