"""A PostgreSQL spine outage under load: six sessions running tool-calling turns while
clients keep sending, the server (this test's own, started for it) stopped for about 4 s
and started again. Storage being away is not a session fault: no session ends failed,
every message a client retried under its key is accepted once, no tool runs twice, and
every session serves again without anyone reviving it."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from effect_storm import storm_tools, tally, wait_for

from actors.agents import ModelFactory
from actors.errors import ActorsError
from actors.host import Host
from spine import Kind
from spine.testing.postgres import PostgresServer, postgres_server

pytestmark = pytest.mark.timeout(300)

SESSIONS = 6
MESSAGES = 6
#: How long the server stays down.
OUTAGE = 4.0
#: How long a client keeps retrying one message before it gives up.
PATIENCE = 30.0


@pytest.fixture
def pg() -> Iterator[PostgresServer]:
    with postgres_server(fsync=False) as server:
        yield server


@pytest.fixture
def host(tmp_path: pathlib.Path, pg: PostgresServer, no_leftover_processes) -> Iterator[Host]:  # type: ignore[no-untyped-def]
    h = Host(
        tmp_path / "data",
        spine=pg.url,
        base="multiprocTCPBase",
        timeout=20,
        factory=ModelFactory(tools=storm_tools(), backoff=0.01),
    )
    try:
        yield h
    finally:
        h.close()


def _text(log: pathlib.Path, sid: str, i: int) -> str:
    args = {"log": str(log), "tag": f"{sid}/{i}", "tool": "append"}
    return "!tool append " + json.dumps(args)


def test_a_4s_postgres_outage_fails_no_session_and_loses_or_doubles_nothing(
    host: Host, pg: PostgresServer, tmp_path: pathlib.Path
) -> None:
    log = tmp_path / "effects.log"
    sids = [host.create(metadata={"governance.in_doubt": "fail"}) for _ in range(SESSIONS)]
    refusals: Counter[str] = Counter()
    unaccepted: list[str] = []
    lock = threading.Lock()

    def client(sid: str) -> None:
        for i in range(MESSAGES):
            key = f"{sid}-m{i}"
            deadline = time.monotonic() + PATIENCE
            while True:
                try:
                    host.send(sid, _text(log, sid, i), key=key)
                    break
                except ActorsError as exc:
                    with lock:
                        refusals[type(exc).__name__] += 1
                    if time.monotonic() > deadline:
                        with lock:
                            unaccepted.append(key)
                        break
                    time.sleep(0.05)  # a client's pause before it retries

    # A session whose process dies during the outage: its next incarnations cannot reach
    # the spine to start; that must not spend its restart budget.
    killed = host.create()
    killed_pid = host.session_pid(killed)
    threads = [threading.Thread(target=client, args=(sid,)) for sid in sids]
    for t in threads:
        t.start()
    wait_for(lambda: log.exists() and len(log.read_text().splitlines()) >= SESSIONS, 30)
    pg.stop()
    os.kill(killed_pid, signal.SIGKILL)
    time.sleep(OUTAGE)  # the outage itself, not a wait for anything
    pg.start()
    for t in threads:
        t.join(PATIENCE + 30)
    assert not any(t.is_alive() for t in threads)

    def settled(sid: str) -> bool:
        evs = host.history(sid)
        users = sum(1 for e in evs if e.kind == Kind.USER_MESSAGE)
        ends = sum(1 for e in evs if e.kind in (Kind.TURN_COMPLETED, Kind.TURN_CANCELLED))
        return users == MESSAGES and ends == MESSAGES

    with contextlib.suppress(AssertionError):
        wait_for(lambda: all(settled(s) for s in sids), 60)
    infos = {sid: host.get(sid) for sid in sids}
    failed = [sid for sid, i in infos.items() if i.state == "failed"]
    histories = {sid: host.history(sid) for sid in sids}
    t = tally(log, histories, max_turns=10**6)
    print(f"failed={len(failed)} unaccepted={len(unaccepted)} refusals={dict(refusals)}")
    print(t.report())
    assert failed == [] and not unaccepted, (failed, unaccepted)
    assert all(settled(s) for s in sids)
    for sid, evs in histories.items():
        texts = [e.text for e in evs if e.kind == Kind.USER_MESSAGE]
        assert len(texts) == len(set(texts)) == MESSAGES, sid
        assert [e.seq for e in evs] == list(range(1, len(evs) + 1))
    assert "append" not in t.doubled and t.lost == 0, t.report()
    stats = host.stats()
    print(f"runner: outages={stats['outages']} restarts={stats['restarts']}")
    # The killed session was started again while the spine was away, not as a crash.
    assert stats["outages"] >= 1 and host.get(killed).state != "failed"
    # Every session serves again, nobody revived it.
    for sid in [*sids, killed]:
        ack = host.send(sid, "after")
        assert host.wait_turn(sid, ack.seq).kind == Kind.TURN_COMPLETED
