"""The runtime on a PostgreSQL spine: real actor processes, a real server."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest
from conftest import wait_for

from actors._runtime.system import processes_in_session
from actors.host import Host
from spine import Kind, open_log


@pytest.fixture
def pg_host(tmp_path: pathlib.Path, pg_url: str, no_leftover_processes: object) -> Iterator[Host]:
    h = Host(tmp_path / "data", spine=pg_url, timeout=30)
    try:
        yield h
    finally:
        h.close()


def test_sessions_chat_on_a_postgres_spine_and_nothing_lands_in_a_sqlite_file(
    pg_host: Host, pg_url: str, tmp_path: pathlib.Path
) -> None:
    """Acknowledged messages are answered, stored in PostgreSQL with gapless seqs, and
    the status projection (checkpointed in the same database) agrees with the stream."""
    sids = [pg_host.create() for _ in range(3)]
    for sid in sids:
        ack = pg_host.send(sid, "hello")
        assert pg_host.wait_turn(sid, ack.seq).kind == Kind.TURN_COMPLETED
    with open_log(pg_url) as log:
        for sid in sids:
            evs = log.read_events(sid)
            assert [e.seq for e in evs] == list(range(1, len(evs) + 1))
            assert Kind.TURN_COMPLETED in [e.kind for e in evs]
            assert pg_host.status(sid).turns == 1
            # The session that serves the stream holds its lease.
            lease = log.lease(sid)  # type: ignore[attr-defined]
            assert lease is not None and lease[0] >= 1

    # The projection actor folds from PostgreSQL into checkpoint tables beside the log.
    def indexed() -> bool:
        index = pg_host.index()
        return index is not None and all(
            (info := index.get(sid)) is not None and info.last_seq == log_last[sid] for sid in sids
        )

    with open_log(pg_url) as log:
        log_last = {sid: log.last_seq(sid) for sid in sids}
    wait_for(indexed, timeout=30)
    with psycopg.connect(pg_url) as c:
        row = c.execute(
            "SELECT count(*) FROM projection_generations WHERE complete AND position > 0"
        ).fetchone()
        assert row is not None and row[0] == 1
    assert not (tmp_path / "data" / "spine.db").exists()
    assert not (tmp_path / "data" / "projections.db").exists()


def test_a_killed_session_comes_back_from_postgres_and_fences_its_old_lease(
    pg_host: Host, pg_url: str
) -> None:
    """SIGKILL a session mid-turn: the new incarnation rebuilds from the database, closes
    the open turn as a crash, answers the queued message, and holds a newer lease epoch."""
    sid = pg_host.create()
    a = pg_host.send(sid, "!slow 0.5 one two three four five six seven eight nine ten")
    with pg_host.subscribe(sid, a.seq, kinds=[Kind.TURN_STARTED]) as started:
        assert started.get(30) is not None
    with open_log(pg_url) as log:
        lease = log.lease(sid)  # type: ignore[attr-defined]
        assert lease is not None
        queued = pg_host.send(sid, "after the crash")
        os.kill(pg_host.session_pid(sid), signal.SIGKILL)
        ended = pg_host.wait_turn(sid, a.seq)
        assert ended.kind == Kind.TURN_CANCELLED and ended.reason == "crash"
        assert pg_host.wait_turn(sid, ended.seq).kind == Kind.TURN_COMPLETED
        assert ended.seq > queued.seq
        after = log.lease(sid)  # type: ignore[attr-defined]
        assert after is not None and after[0] > lease[0]
        evs = log.read_events(sid)
        assert [e.seq for e in evs] == list(range(1, len(evs) + 1))
        assert [e.text for e in evs if e.kind == Kind.USER_MESSAGE].count("after the crash") == 1


CLI = [sys.executable, "-m", "actors.cli"]


def _kill_daemon(daemon: subprocess.Popen[str], system_session: int) -> None:
    """What a host's death does: every process of its daemon and actor system SIGKILLed."""
    for pid in [daemon.pid, *processes_in_session(system_session)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    daemon.wait(30)
    wait_for(lambda: not processes_in_session(system_session), timeout=30)


def test_a_session_survives_the_death_of_the_daemon_it_ran_on(
    tmp_path: pathlib.Path, pg_url: str, no_leftover_processes: list[int]
) -> None:
    """Two daemons share one PostgreSQL spine. The first dies (every process killed) in
    the middle of a turn with a message queued: the second serves the session, rebuilt from
    the database, closes the cut-off turn as a crash and answers the queued message; no
    acknowledged message is lost or doubled, seqs stay gapless, and the new incarnation
    holds a newer lease."""
    data_a = tmp_path / "a"
    daemon = subprocess.Popen(
        [*CLI, "--data", str(data_a), "serve", "--quiet", "--spine", pg_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        info_path = data_a / "daemon.json"
        wait_for(lambda: info_path.exists() or daemon.poll() is not None, 30)
        assert daemon.poll() is None, daemon.stderr.read() if daemon.stderr else ""
        info = json.loads(wait_for(lambda: info_path.read_text() or None, 10))
        no_leftover_processes.append(info["system_session"])
        a = Host(data_a, attach=True, admin_port=info["admin_port"], spine=pg_url, timeout=30)
        try:
            sid = a.create()
            acked = [a.send(sid, f"before {i}") for i in range(3)]
            a.wait_turn(sid, acked[-1].seq)
            slow = a.send(sid, "!slow 0.5 one two three four five six seven eight nine ten")
            with a.subscribe(sid, slow.seq, kinds=[Kind.TURN_STARTED]) as started:
                assert started.get(30) is not None
            queued = a.send(sid, "queued before the death")
        finally:
            a.close()
        with open_log(pg_url) as log:
            lease_a = log.lease(sid)  # type: ignore[attr-defined]
        _kill_daemon(daemon, info["system_session"])
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait(30)

    b = Host(tmp_path / "b", spine=pg_url, timeout=30)
    try:
        after = b.send(sid, "after the death")
        ended = b.wait_turn(sid, slow.seq)
        assert ended.kind == Kind.TURN_CANCELLED and ended.reason == "crash"
        answered = b.wait_turn(sid, ended.seq)
        assert answered.kind == Kind.TURN_COMPLETED
        b.wait_turn(sid, after.seq)
        evs = b.history(sid)
    finally:
        b.close()
    assert [e.seq for e in evs] == list(range(1, len(evs) + 1))
    users = [e.text for e in evs if e.kind == Kind.USER_MESSAGE]
    sent = [f"before {i}" for i in range(3)]
    sent += ["!slow 0.5 one two three four five six seven eight nine ten"]
    sent += ["queued before the death", "after the death"]
    assert users == sent
    assert queued.seq < ended.seq < after.seq
    with open_log(pg_url) as log:
        lease_b = log.lease(sid)  # type: ignore[attr-defined]
    assert lease_a is not None and lease_b is not None and lease_b[0] > lease_a[0]


def test_a_stale_session_on_another_daemon_cannot_append_after_a_takeover(
    tmp_path: pathlib.Path, pg_url: str, no_leftover_processes: list[int]
) -> None:
    """A session left running on one host while another host took it over (what a
    partition leaves behind) has its next append refused by the lease: its stale state
    never reaches the stream, which stays gapless with each message once."""
    a = Host(tmp_path / "a", spine=pg_url, timeout=30)
    b = Host(tmp_path / "b", spine=pg_url, timeout=30)
    try:
        sid = a.create()
        a.wait_turn(sid, a.send(sid, "on a").seq)
        stale_pid = a.session_pid(sid)
        b.wait_turn(sid, b.send(sid, "on b").seq)
        with open_log(pg_url) as log:
            epoch_b = log.lease(sid)[0]  # type: ignore[attr-defined]
            # The incarnation on A still runs, holding an older epoch: its append is refused
            # and it stops; A's Runner serves the message with a fresh incarnation rebuilt
            # from the log.
            ack = a.send(sid, "on a again")
            a.wait_turn(sid, ack.seq)
            wait_for(lambda: a.session_pid(sid) != stale_pid, timeout=30)
            assert log.lease(sid)[0] > epoch_b  # type: ignore[attr-defined]
            evs = log.read_events(sid)
    finally:
        b.close()
        a.close()
    assert [e.seq for e in evs] == list(range(1, len(evs) + 1))
    assert [e.text for e in evs if e.kind == Kind.USER_MESSAGE] == ["on a", "on b", "on a again"]


def test_the_projection_of_a_second_daemon_stands_by_and_takes_over_the_shared_checkpoints(
    tmp_path: pathlib.Path, pg_url: str, no_leftover_processes: list[int]
) -> None:
    """Two daemons on one database: one projection writes the shared checkpoints, the
    other stands by (status still exact, folded from the stream); when the first daemon
    stops, the second takes the checkpoints over and answers the index itself."""
    a = Host(tmp_path / "a", spine=pg_url, timeout=30)
    try:
        sid = a.create()
        a.wait_turn(sid, a.send(sid, "hello").seq)
        wait_for(lambda: (i := a.index()) is not None and sid in i, timeout=30)
        b = Host(tmp_path / "b", spine=pg_url, timeout=30)
    finally:
        a.close()
    try:
        assert b.status(sid).turns == 1
        ack = b.send(sid, "again")
        b.wait_turn(sid, ack.seq)

        def taken_over() -> bool:
            index = b.index()
            info = None if index is None else index.get(sid)
            return info is not None and info.last_seq == b.get(sid).last_seq

        wait_for(taken_over, timeout=30)
        assert b.status(sid).turns == 2
    finally:
        b.close()
