"""The runtime on a PostgreSQL spine: real actor processes, a real server."""

from __future__ import annotations

import os
import pathlib
import signal
from collections.abc import Iterator

import psycopg
import pytest
from conftest import wait_for

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
    a = pg_host.send(sid, "!slow 0.05 one two three four five six seven eight nine ten")
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
