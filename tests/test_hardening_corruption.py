"""Corruption is found and named: a stream that no longer decodes is still verified, its
session fails naming the seq, and the daemon serves every other session."""

from __future__ import annotations

import pathlib
import sqlite3
from datetime import datetime

import pytest

from actors.errors import SessionFailed
from actors.host import Host
from spine import Kind


def _break_row(db: pathlib.Path, stream: str, seq: int) -> None:
    """Cut a stored payload short, as a torn write or a careless edit would: it no longer
    parses, so the event cannot be decoded (the append-only trigger is dropped first)."""
    c = sqlite3.connect(db, isolation_level=None)
    try:
        c.execute("DROP TRIGGER IF EXISTS events_append_only_update")
        c.execute(
            "UPDATE events SET payload = substr(payload, 1, 20) WHERE stream = ? AND seq = ?",
            (stream, seq),
        )
    finally:
        c.close()


def _break_pg_row(url: str, stream: str, seq: int) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as c:
        c.execute("DROP TRIGGER IF EXISTS spine_events_append_only ON spine_events")
        c.execute(
            "UPDATE spine_events SET payload = substring(payload from 1 for 20) "
            "WHERE stream = %s AND seq = %s",
            (stream, seq),
        )


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_stream_that_does_not_decode_fails_its_session_naming_the_seq_and_is_still_verified(
    tmp_path: pathlib.Path, no_leftover_processes, backend: str, request: pytest.FixtureRequest
) -> None:  # type: ignore[no-untyped-def]
    """One stored row of one sealed session is damaged while the daemon is down. After a
    restart the other sessions serve; the damaged one is failed naming the seq (in
    `sessions`, `status` and the refusal of a message), and `verify` still runs on it and
    names the seq. On the SQLite and the PostgreSQL spine."""
    spine = request.getfixturevalue("pg_url") if backend == "postgres" else None
    h = Host(tmp_path, base="multiprocTCPBase", timeout=30, spine=spine)
    try:
        ids = [h.create(f"c-{i}") for i in range(3)]
        for sid in ids:
            ack = h.send(sid, "hello")
            assert h.wait_turn(sid, ack.seq).kind == Kind.TURN_COMPLETED
        assert h.seal("c-1").seq > 0
    finally:
        h.close()
    if spine is None:
        _break_row(tmp_path / "spine.db", "c-1", 2)
    else:
        _break_pg_row(spine, "c-1", 2)

    h = Host(tmp_path, base="multiprocTCPBase", timeout=30, spine=spine)
    try:
        with pytest.raises(SessionFailed, match="does not decode at seq 2"):
            h.send("c-1", "anyone?")
        for sid in ("c-0", "c-2"):
            ack = h.send(sid, "still here?")
            assert h.wait_turn(sid, ack.seq).kind == Kind.TURN_COMPLETED
        info = {i.session_id: i for i in h.sessions()}
        assert info["c-1"].state == "failed" and "seq 2" in info["c-1"].error, info["c-1"]
        assert info["c-0"].state == "live" and not info["c-0"].error
        status = h.status("c-1")
        assert status.terminal and "does not decode at seq 2" in status.error, status
        report = h.verify("c-1")
        assert not report.ok and "at seq 2" in report.summary, report
        assert report.seq > 0  # the outcome is recorded in the stream
        assert h.verify("c-0").ok is False  # never sealed: nothing verified, but it runs
    finally:
        h.close()


def test_recover_copies_every_readable_event_and_names_each_row_it_could_not_read(
    tmp_path: pathlib.Path,
) -> None:
    """`vertebra recover` on a spine with an undecodable row and a deleted row: the copy
    keeps every stream and seq (a `record.lost` event where a row was lost), every other
    row byte for byte (so an intact session's seal still verifies), and the command
    names each lost row and exits 1."""
    from cli_support import run

    from spine import LOST_KIND, Event, SqliteLog
    from spine.seal import KeyStore, seal_stream, verify_stream

    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    db = data / "spine.db"
    key = KeyStore(data / "keys").signing_key()
    with SqliteLog(db) as log:
        for sid in ("c-1", "c-2", "c-3"):
            log.append(
                sid,
                [Event(kind=Kind.USER_MESSAGE, text=f"m{i}") for i in range(4)],
                idempotency_key=f"k-{sid}",
            )
            seal_stream(log, sid, key)
        before = {sid: log.read(sid, 0, None) for sid in ("c-1", "c-2", "c-3")}
    _break_row(db, "c-1", 2)
    c = sqlite3.connect(db, isolation_level=None)
    try:
        c.execute("DROP TRIGGER IF EXISTS events_append_only_delete")
        c.execute("DELETE FROM events WHERE stream = 'c-2' AND seq = 3")
    finally:
        c.close()

    out = run(data, "recover", str(data), str(tmp_path / "copy.db"))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "copied 13 events of 3 sessions" in out.stdout, out.stdout
    assert "could not read c-1 seq 2" in out.stdout and "could not read c-2 seq 3" in out.stdout
    with SqliteLog(tmp_path / "copy.db") as copy:
        for sid in ("c-1", "c-2", "c-3"):
            rows = copy.read(sid, 0, None)
            assert [r.seq for r in rows] == list(range(1, 6)), sid
            lost = {(sid, 2), ("c-2", 3)} if sid == "c-1" else {("c-2", 3)}
            for r, old in zip(rows, before[sid], strict=True):
                if (sid, r.seq) in lost:
                    assert r.kind == LOST_KIND and "lost in recovery" in (r.event().error or "")
                else:
                    assert (r.kind, r.version, r.payload) == (old.kind, old.version, old.payload)
        assert verify_stream(copy, "c-3", key, append=False).ok
        problem = verify_stream(copy, "c-2", key, append=False).problem
        assert problem is not None and problem.seq == 3
        assert copy.find_key("c-3", "k-c-3") is not None  # redeliveries still recognised
        copy.append("c-1", [Event(kind=Kind.USER_MESSAGE, text="after")])  # a working spine
    again = run(data, "recover", str(data), str(tmp_path / "copy.db"))
    assert again.returncode == 2 and "exists" in again.stderr, again.stderr


def test_check_names_a_row_that_does_not_decode_even_in_a_session_never_sealed(
    tmp_path: pathlib.Path,
) -> None:
    """`vertebra check`: a session without a seal is "unsealed", not tampered (exit 0);
    once one of its rows no longer decodes it is UNREADABLE at that seq (exit 1)."""
    from cli_support import run

    from spine import Event, SqliteLog

    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    with SqliteLog(data / "spine.db") as log:
        log.append("plain", [Event(kind=Kind.USER_MESSAGE, text=f"m{i}") for i in range(3)])
    out = run(data, "check")
    assert out.returncode == 0 and "plain: 0 seal(s), unsealed" in out.stdout, out.stdout
    _break_row(data / "spine.db", "plain", 2)
    out = run(data, "check")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "plain: 0 seal(s), UNREADABLE at seq 2" in out.stdout, out.stdout


def test_sessions_seal_themselves_by_count_by_time_and_by_their_own_metadata(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """With an auto-seal policy a session seals once N events are unsealed, and the tail
    within T seconds; a session's metadata overrides the policy; every seal verifies and
    a seal event alone does not start another seal."""
    from conftest import wait_for

    from actors import SealPolicy
    from spine.seal import KeyStore, verify_stream

    h = Host(tmp_path, base="multiprocTCPBase", timeout=30, auto_seal=SealPolicy(every=8))
    try:
        h.create("by-count")
        h.create("by-time", metadata={"vertebra.seal.interval": "0.2", "vertebra.seal.every": "0"})
        h.create("never", metadata={"vertebra.seal.every": "0"})
        for sid in ("by-count", "by-time", "never"):
            for i in range(3):
                ack = h.send(sid, f"m{i}")
                h.wait_turn(sid, ack.seq)

        def sealed(sid: str) -> list[int]:
            return [e.seq for e in h.history(sid) if e.kind == Kind.RECORD_SEALED]

        wait_for(lambda: sealed("by-count"), 30)
        # The whole tail gets sealed: the newest event is a seal covering all before it.
        wait_for(lambda: h.history("by-time")[-1].kind == Kind.RECORD_SEALED, 30)
        tail = h.history("by-time")[-1]
        assert tail.record["last"] == tail.seq - 1
        assert sealed("never") == []
        # Every seal covers a full count (its range reaches at least N events).
        count_seals = [e for e in h.history("by-count") if e.kind == Kind.RECORD_SEALED]
        assert count_seals[0].record["last"] >= 8
        # The time policy sealed the tail, and does not keep sealing its own seal events.
        n = len(h.history("by-time"))
        with pytest.raises(AssertionError):
            wait_for(lambda: len(h.history("by-time")) > n, 1.0)
        ring = KeyStore(tmp_path / "keys").keyring()
        for sid in ("by-count", "by-time"):
            assert verify_stream(h._log, sid, ring, append=False).ok, sid
    finally:
        h.close()


def test_the_daemon_seals_by_default_and_says_so_in_its_help() -> None:
    """`vertebra serve` defaults to the daemon's auto-seal policy (on), and both options
    are in its help."""
    from actors.cli._commands import COMMANDS
    from actors.cli._parser import build_parser
    from actors.policy import DAEMON_SEAL_POLICY

    args = build_parser(COMMANDS).parse_args(["serve"])
    assert DAEMON_SEAL_POLICY.enabled
    assert (args.seal_every, args.seal_interval) == (
        DAEMON_SEAL_POLICY.every,
        DAEMON_SEAL_POLICY.interval,
    )


@pytest.mark.parametrize("seen_from_start", [True, False])
def test_the_auto_sealer_signs_the_tree_it_kept_and_it_verifies(
    tmp_path: pathlib.Path, seen_from_start: bool
) -> None:
    """Told of the rows it appended, the sealer seals from the rows it kept (no read of
    the range); that seal equals one computed from the log and verifies. A duplicate
    append's rows are kept once; a range begun before it was told is read instead, and
    the seals are the same."""
    from actors.policy import SealPolicy
    from actors.session.shell.autoseal import AUTO_SEAL, AutoSealer
    from spine import Event, SqliteLog
    from spine.seal import (
        Keyring,
        MerkleFrontier,
        SigningKey,
        compute_seal,
        seal_event,
        verify_stream,
    )

    key = SigningKey.generate()
    with SqliteLog(tmp_path / "spine.db") as log:
        sealer = AutoSealer(SealPolicy(every=8), "s", log, lambda: key)
        for round_ in range(3):
            evs = [Event(kind=Kind.USER_MESSAGE, text=f"r{round_} m{i}") for i in range(4)]
            for n in range(2):
                res = log.append("s", evs, idempotency_key=f"{round_}-{n}")
                again = log.append("s", evs, idempotency_key=f"{round_}-{n}")
                told = res.records if seen_from_start or round_ or n else None
                sealer.appended(evs, res.first_seq, res.last_seq, {}, told)
                told = again.records if told is not None else None  # its rows again
                sealer.appended(evs, again.first_seq, again.last_seq, {}, told)
            incremental = sealer.rows_first == sealer.first and sealer.rows
            assert bool(incremental) is (seen_from_start or round_ > 0)
            cmd = sealer.due(AUTO_SEAL, res.last_seq)
            assert cmd is not None and cmd.seal is not None
            seal = cmd.seal
            rows = log.read("s", seal.first - 1, None)
            expect = compute_seal(
                "s",
                seal.first,
                [r.payload for r in rows],
                key,
                time=datetime.fromisoformat(seal.time),
            )
            assert (seal.first, seal.last, seal.root, seal.leaves) == (
                expect.first, expect.last, expect.root, expect.leaves
            )  # fmt: skip
            # Either way the seal stores the frontier of its whole prefix, which a fork
            # at its last seq takes the parent's root from.
            prefix = [r.payload for r in log.read("s", 0, seal.last)]
            whole = compute_seal("s", 1, prefix, key, time=datetime.fromisoformat(seal.time))
            assert (
                seal.frontier
                and MerkleFrontier.from_peaks(seal.last, seal.frontier).root() == whole.root
            )
            ev = seal_event(seal)
            res = log.append("s", [ev], expected_seq=res.last_seq)
            sealer.appended([ev], res.first_seq, res.last_seq, {}, res.records)
        report = verify_stream(log, "s", Keyring([key.public_key]), append=False)
        assert report.ok, report.summary()


def test_a_running_interval_timer_does_not_hold_a_seal_by_count_back() -> None:
    """The auto-sealer asks for its interval timer at the first unsealed event, and still
    asks for a seal at once when the count is reached before the timer fires; after the
    seal is stored, the seal event alone asks for nothing."""
    from actors.policy import SealPolicy
    from actors.session.shell.autoseal import AUTO_SEAL, AUTO_SEAL_TIMER, AutoSealer
    from spine import Event, MemoryLog
    from spine.seal import SigningKey, seal_event

    log = MemoryLog()
    key = SigningKey.generate()
    sealer = AutoSealer(SealPolicy(every=6, interval=60.0), "s", log, lambda: key)
    evs = [Event(kind=Kind.USER_MESSAGE, text=f"m{i}") for i in range(3)]
    res = log.append("s", evs)
    assert sealer.appended(evs, res.first_seq, res.last_seq, {}) == (60.0, AUTO_SEAL_TIMER)
    res = log.append("s", evs)
    assert sealer.appended(evs, res.first_seq, res.last_seq, {}) == (0.0, AUTO_SEAL)
    cmd = sealer.due(AUTO_SEAL, res.last_seq)
    assert cmd is not None and cmd.seal is not None and (cmd.seal.first, cmd.seal.last) == (1, 6)
    ev = seal_event(cmd.seal)
    res = log.append("s", [ev])
    assert sealer.appended([ev], res.first_seq, res.last_seq, {}) is None
    assert sealer.due(AUTO_SEAL_TIMER, res.last_seq) is None  # the timer finds nothing new
    # A session's metadata turns it off.
    res = log.append("s", evs * 3)
    assert (
        sealer.appended(
            evs * 3,
            res.first_seq,
            res.last_seq,
            {"vertebra.seal.every": "0", "vertebra.seal.interval": "0"},
        )
        is None
    )
