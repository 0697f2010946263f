"""`TenantLedger`: what each tenant's sessions spent and were granted per period, folded
from the log and checkpointed in ``DATA/spend.db``, so a session whose tenant is capped
can see its tenant's other sessions without reading their streams.

It folds only the kinds spending depends on (`read_all` with a kind filter, from the
checkpointed position): ``session.properties`` (the stream's tenant and model),
``budget.prices`` (the stream's price table), ``turn.completed`` and ``turn.cancelled``
(a turn's usage priced under the stream's table, counted in the day and month of the
event's stored time, UTC) and ``budget.raised`` naming a period. The session processes
share the file: each catches it up under SQLite's write lock right before it reads.

Turns still running elsewhere are seen through holds: in the same write transaction as
its read, a capped session's model call leaves a hold of what its open turn has spent so
far plus the call's reserve (`tenantcaps.reserve_of`), replacing its last one, and the
fold of that stream's turn end releases it (the turn's cost is counted then). Others count
every live hold in each current period, so two sessions of a tenant asking at once are
serialised by the lock and each sees the other's call: the tenant overshoots a cap by at
most what one call spends past its reserve, not by one call per concurrent session. A
hold older than `HOLD_TTL` (its session stopped asking and never ended its turn: a stream
removed by hand) counts no more.
"""

from __future__ import annotations

import functools
import math
import os
import sqlite3
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson

from projections import MODEL_NAME
from spine import DecodeError, Kind, Log, Record, SpineError

from ..rules.spend import ANY_MODEL, TenantShare, period_keys, price
from ..rules.state import SessionState
from ..rules.tenantcaps import TENANT_KEY, capped, hold_of, tenant_of
from .execution import session_log

#: The file beside the spine.
LEDGER_FILE = "spend.db"
#: The kinds the ledger folds.
LEDGER_KINDS = (
    Kind.PROPERTIES,
    Kind.PRICES,
    Kind.TURN_COMPLETED,
    Kind.TURN_CANCELLED,
    Kind.BUDGET_RAISED,
)
#: Rows read per page while catching up.
PAGE = 1000
#: Seconds a hold counts without its session asking again (each model call renews it).
HOLD_TTL = 3600.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS position (id INTEGER PRIMARY KEY CHECK (id = 0), position INTEGER);
CREATE TABLE IF NOT EXISTS streams (
    stream TEXT PRIMARY KEY, tenant TEXT NOT NULL, model TEXT NOT NULL, models TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS spend (
    tenant TEXT NOT NULL, period TEXT NOT NULL, stream TEXT NOT NULL,
    cost REAL NOT NULL DEFAULT 0, raised REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, period, stream)
);
CREATE TABLE IF NOT EXISTS holds (
    stream TEXT PRIMARY KEY, tenant TEXT NOT NULL, amount REAL NOT NULL, at REAL NOT NULL
);
"""


class TenantLedger:
    """The tenants' spending per period; ``share`` catches up, then sums the others'."""

    def __init__(self, log: Log, path: str | os.PathLike[str]) -> None:
        self._log = log
        self._db = sqlite3.connect(
            os.fspath(path), isolation_level=None, check_same_thread=False, timeout=10.0
        )
        # A checkpoint the log can rebuild: WAL keeps it whole across a crash.
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        #: Streams' rows read during one catch-up (another process may change them between).
        self._rows: dict[str, tuple[str, str, str]] = {}

    def catch_up(self, then: Callable[[], Any] | None = None) -> int:
        """Fold what the log stored after the checkpoint, then run ``then`` in the same
        write transaction; returns the new position."""
        top = self._log.last_position()
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            # Read under the write lock: another process may have folded further.
            row = db.execute("SELECT position FROM position WHERE id = 0").fetchone()
            position = int(row[0]) if row else 0
            if position < top:
                self._rows.clear()
                while position < top:
                    page = self._log.read_all(position, PAGE, kinds=LEDGER_KINDS)
                    self._fold(page)
                    position = page[-1].position if len(page) == PAGE else top
                db.execute(
                    "INSERT OR REPLACE INTO position (id, position) VALUES (0, ?)", (position,)
                )
            if then is not None:
                then()
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return position

    def _fold(self, records: Iterable[Record]) -> None:
        for r in records:
            try:
                ev = r.event()
            except DecodeError:
                continue  # the stream's status names it; the others still count
            if r.kind == Kind.PROPERTIES:
                self._properties(r.stream, ev.properties)
            elif r.kind == Kind.PRICES:
                models = ev.extra.get("models")
                blob = orjson.dumps(models if isinstance(models, Mapping) else {}).decode()
                self._stream(r.stream, models=blob)
            elif r.kind == Kind.BUDGET_RAISED:
                period = ev.extra.get("period")
                amount = ev.extra.get("amount", 0.0)
                if isinstance(period, str) and period and isinstance(amount, int | float):
                    self._add(r.stream, period, raised=max(0.0, float(amount)))
            elif not ev.goal or ev.goal == r.stream:
                # A turn end of the stream's own (a child's, mirrored on its parent, is
                # counted on the child's stream): its cost is counted now, and the hold its
                # model calls left is released.
                self._db.execute("DELETE FROM holds WHERE stream = ?", (r.stream,))
                self._turn(r.stream, ev)

    def _turn(self, stream: str, ev: Any) -> None:
        if ev.usage is not None and ev.time is not None:
            cost = self._priced(stream, ev.usage)
            if cost:
                for key in period_keys(ev.time).values():
                    self._add(stream, key, cost=cost)

    def _row(self, stream: str) -> tuple[str, str, str]:
        cached = self._rows.get(stream)
        if cached is not None:
            return cached
        row = self._db.execute(
            "SELECT tenant, model, models FROM streams WHERE stream = ?", (stream,)
        ).fetchone()
        got = (str(row[0]), str(row[1]), str(row[2])) if row else ("", "", "{}")
        self._rows[stream] = got
        return got

    def _stream(self, stream: str, **changes: str) -> None:
        tenant, model, models = self._row(stream)
        tenant = changes.get("tenant", tenant)
        model = changes.get("model", model)
        models = changes.get("models", models)
        self._rows[stream] = (tenant, model, models)
        self._db.execute(
            "INSERT OR REPLACE INTO streams (stream, tenant, model, models) VALUES (?, ?, ?, ?)",
            (stream, tenant, model, models),
        )

    def _properties(self, stream: str, props: Mapping[str, str | None]) -> None:
        changes = {k: props[k] or "" for k in (TENANT_KEY, MODEL_NAME) if k in props}
        if changes:
            self._stream(
                stream,
                **{"tenant" if k == TENANT_KEY else "model": v for k, v in changes.items()},
            )

    def _priced(self, stream: str, usage: Any) -> float:
        _, model, models = self._row(stream)
        table = _table(models)
        rates = table.get(model) or table.get(ANY_MODEL)
        return price(usage, rates) if isinstance(rates, Mapping) else 0.0

    def _add(self, stream: str, period: str, cost: float = 0.0, raised: float = 0.0) -> None:
        tenant = self._row(stream)[0]
        if not tenant:
            return
        self._db.execute(
            "INSERT INTO spend (tenant, period, stream, cost, raised) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (tenant, period, stream) DO UPDATE SET "
            "cost = cost + excluded.cost, raised = raised + excluded.raised",
            (tenant, period, stream, cost, raised),
        )

    def others(
        self, tenant: str, stream: str, periods: Iterable[str], now: float | None = None
    ) -> TenantShare:
        """What ``tenant``'s sessions other than ``stream`` spent and were granted in
        ``periods``, as the checkpoint holds it (`catch_up` first for the latest), their
        live holds at ``now`` counted in every period (None: holds not counted)."""
        keys = list(periods)
        held = 0.0
        if now is not None:
            (held,) = self._db.execute(
                "SELECT COALESCE(SUM(amount), 0) FROM holds "
                "WHERE tenant = ? AND stream != ? AND at >= ?",
                (tenant, stream, now - HOLD_TTL),
            ).fetchone()
        marks = ", ".join("?" for _ in keys)
        rows = self._db.execute(
            "SELECT period, SUM(cost), SUM(raised) FROM spend WHERE tenant = ? AND stream != ? "
            f"AND period IN ({marks}) GROUP BY period",
            (tenant, stream, *keys),
        ).fetchall()
        cost = {str(p): float(c) for p, c, _ in rows}
        if held:
            cost = {k: cost.get(k, 0.0) + float(held) for k in keys}
        return TenantShare(cost=cost, raised={str(p): float(r) for p, _, r in rows})

    def share(self, st: SessionState, now: float, hold: float = 0.0) -> TenantShare:
        """The others' share for a model call of ``st``'s session at ``now``, read in one
        write transaction with leaving this call's ``hold`` (replacing the session's last)."""
        tenant, sid = tenant_of(st), st.session_id
        out: list[TenantShare] = []

        def read_and_hold() -> None:
            out.append(self.others(tenant, sid, period_keys(now).values(), now))
            self._db.execute(
                "INSERT OR REPLACE INTO holds (stream, tenant, amount, at) VALUES (?, ?, ?, ?)",
                (sid, tenant, hold, now),
            )

        self.catch_up(read_and_hold)
        return out[0]

    def close(self) -> None:
        self._db.close()


@functools.lru_cache(maxsize=64)
def _table(models: str) -> dict[str, Any]:
    """A stored price table's models, parsed once (streams share a few tables)."""
    out = orjson.loads(models)
    return out if isinstance(out, dict) else {}


class LedgerPort:
    """The ledger as an incarnation reads it: opened on the first capped model call, and
    failing closed (a ledger that cannot be read counts the others as past every cap)."""

    def __init__(self, log: Log, db_path: str) -> None:
        self._log, self._path = log, os.path.join(os.path.dirname(db_path), LEDGER_FILE)
        self._ledger: TenantLedger | None = None

    def share(self, st: SessionState, now: float, action: str) -> TenantShare:
        if action != "model" or not capped(st):
            return TenantShare()
        try:
            if self._ledger is None:
                self._ledger = TenantLedger(self._log, self._path)
            return self._ledger.share(st, now, hold_of(st))
        except (sqlite3.Error, OSError, SpineError) as exc:
            session_log().error("the tenant ledger %s cannot be read: %r", self._path, exc)
            return TenantShare(cost={k: math.inf for k in period_keys(now).values()})

    def close(self) -> None:
        if self._ledger is not None:
            self._ledger.close()
