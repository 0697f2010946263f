"""The tenant ledger over a real SQLite log: each stream's turns priced under its own table,
counted per tenant and per period of their stored time, raises naming a period counted for
the tenant, a session's own share left out of what it is told, and the checkpoint shared by
two readers (two session processes) that each go on from where either got to."""

from __future__ import annotations

import pathlib
from datetime import UTC, datetime

import attrs
import pytest

from actors.session.rules.spend import check_prices
from actors.session.rules.state import SessionState
from actors.session.shell.tenantledger import HOLD_TTL, TenantLedger
from spine import Event, Kind, SqliteLog, Usage

DEC = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
NOV = datetime(2026, 11, 30, 23, 0, tzinfo=UTC)
DAY, MONTH = "day:2026-12-02", "month:2026-12"


def _table(per_token: float) -> Event:
    prices = {"version": "v", "models": {"*": {"input": per_token * 1e6, "output": 0}}}
    return Event(kind=Kind.PRICES, extra=check_prices(prices))


def _opened(tenant: str, per_token: float = 1.0) -> list[Event]:
    props = {"tenant": tenant, "ore.model.name": "m"} if tenant else {"ore.model.name": "m"}
    return [Event(kind=Kind.PROPERTIES, properties=props), _table(per_token)]


def _turn(tokens: int, when: datetime) -> Event:
    return Event(kind=Kind.TURN_COMPLETED, turn=1, usage=Usage(input_tokens=tokens), time=when)


def test_the_ledger_sums_a_tenants_others_per_period(tmp_path: pathlib.Path) -> None:
    log = SqliteLog(tmp_path / "spine.db")
    try:
        ledger = TenantLedger(log, tmp_path / "spend.db")
        log.append("a", [*_opened("acme"), _turn(3, DEC), _turn(100, NOV)])
        log.append("b", [*_opened("acme", per_token=2.0), _turn(5, DEC)])  # 10 under b's table
        log.append("c", [*_opened("beta"), _turn(7, DEC)])
        log.append("d", [*_opened(""), _turn(9, DEC)])  # no tenant: counted nowhere
        assert ledger.catch_up() == log.last_position()
        a = ledger.others("acme", "a", [DAY, MONTH])
        assert a.cost == {DAY: 10.0, MONTH: 10.0} and a.raised == {DAY: 0.0, MONTH: 0.0}
        b = ledger.others("acme", "b", [DAY, MONTH, "month:2026-11"])
        assert b.cost == {DAY: 3.0, MONTH: 3.0, "month:2026-11": 100.0}
        assert ledger.others("beta", "x", [DAY]).cost == {DAY: 7.0}
        assert ledger.others("", "x", [DAY]).cost == {}
        raise_ = Event(kind=Kind.BUDGET_RAISED, call=4, extra={"amount": 2.5, "period": DAY})
        log.append("b", [raise_, _turn(1, DEC)])
        # A second reader of the same file (another session process) goes on from the
        # checkpoint the first left and folds only what is new.
        other = TenantLedger(log, tmp_path / "spend.db")
        other.catch_up()
        a = other.others("acme", "a", [DAY])
        assert a.cost == {DAY: pytest.approx(12.0)} and a.raised == {DAY: 2.5}
        ledger.catch_up()  # nothing new for the first reader: counted once
        assert ledger.others("acme", "a", [DAY]).cost == {DAY: pytest.approx(12.0)}
        other.close()
        ledger.close()
    finally:
        log.close()


def _state(sid: str, tenant: str = "acme") -> SessionState:
    return SessionState(session_id=sid, metadata={"tenant": tenant})


NOW = DEC.timestamp()


def test_a_running_turns_hold_is_seen_by_the_tenants_others_until_the_turn_ends(
    tmp_path: pathlib.Path,
) -> None:
    """Two session processes (two readers of one file): a's model call leaves a hold in the
    same transaction as its read, b's next read counts it in every current period; a's
    turn end releases it and counts what the turn cost instead. A newer call of a replaces
    its hold; one older than the hold TTL, or another tenant's, counts nothing."""
    log = SqliteLog(tmp_path / "spine.db")
    a_proc = TenantLedger(log, tmp_path / "spend.db")
    b_proc = TenantLedger(log, tmp_path / "spend.db")
    try:
        log.append("a", _opened("acme"))
        log.append("b", _opened("acme"))
        log.append("c", _opened("beta"))
        assert a_proc.share(_state("a"), NOW, hold=4.0).cost == {}
        b_proc.share(_state("c", "beta"), NOW, hold=50.0)  # another tenant's
        assert b_proc.share(_state("b"), NOW).cost == {DAY: 4.0, MONTH: 4.0}
        a_proc.share(_state("a"), NOW + 1, hold=6.0)  # the turn's next call: replaced
        assert b_proc.share(_state("b"), NOW + 2).cost == {DAY: 6.0, MONTH: 6.0}
        # a's own hold is not counted for a (b holds nothing: its reads held 0).
        assert a_proc.share(_state("a"), NOW + 3, hold=6.0).cost == {}
        log.append("a", [_turn(5, DEC)])  # the turn ended: cost 5, hold released
        assert b_proc.share(_state("b"), NOW + 4).cost == {DAY: 5.0, MONTH: 5.0}
        a_proc.share(_state("a"), NOW + 5, hold=2.0)
        late = NOW + 5 + HOLD_TTL + 1
        assert b_proc.share(_state("b"), late).cost == {DAY: 5.0, MONTH: 5.0}
    finally:
        a_proc.close()
        b_proc.close()
        log.close()


def test_a_childs_turn_mirrored_on_its_parent_is_counted_once(tmp_path: pathlib.Path) -> None:
    """A fan-out child inherits its parent's tenant and stores its turns on its own stream;
    the copy its parent keeps (attributed to the child) is not counted a second time, and
    does not release the parent's own hold."""
    log = SqliteLog(tmp_path / "spine.db")
    ledger = TenantLedger(log, tmp_path / "spend.db")
    try:
        log.append("parent", _opened("acme"))
        log.append("kid", [*_opened("acme"), _turn(3, DEC)])
        ledger.share(_state("parent"), NOW, hold=1.0)
        mirrored = attrs.evolve(_turn(3, DEC), goal="kid")
        log.append("parent", [mirrored])
        assert ledger.share(_state("other"), NOW).cost == {DAY: 4.0, MONTH: 4.0}
    finally:
        ledger.close()
        log.close()
