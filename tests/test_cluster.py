"""Several hosts on one convention: the pure member table, and real member processes on
loopback (the network-namespace test is in test_cluster_netns.py)."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from conftest import wait_for

from actors._runtime.system import free_port
from actors._runtime.transport_auth import share_secret
from actors.cli._main import main
from actors.host import Host
from actors.placement import CAPACITY, DATA, HOST, fits
from actors.runner.rules.cluster import HostTable, member_of
from spine import Kind, open_log

# -- the pure table ------------------------------------------------------------------------


def test_an_actor_without_a_host_requirement_fits_anywhere_and_with_one_only_there() -> None:
    """The capability check places on the named member only; no requirement means local."""
    assert fits({}, None)
    assert fits({HOST: "m1"}, {})
    assert fits({HOST: "m1"}, {HOST: "m1"})
    assert not fits({HOST: "m2"}, {HOST: "m1"})
    assert not fits({}, {HOST: "m1"})


def test_member_capabilities_are_read_and_nonsense_is_not_a_member() -> None:
    """A member's name, capacity and data directory come from its capabilities."""
    assert member_of({HOST: "m1", CAPACITY: 4, DATA: "/d"}) == ("m1", 4, "/d")
    assert member_of({HOST: "m1"}) == ("m1", 1, "")
    assert member_of({HOST: "m1", CAPACITY: "many"}) is None
    assert member_of({"Admin Port": 1}) is None
    assert member_of(None) is None


def test_sessions_go_to_the_member_with_most_room_for_its_capacity() -> None:
    """Placement weighs load by capacity: a host of capacity 2 gets twice the sessions."""
    t = HostTable()
    t.joined("big", "a1", 2, "", 0.0)
    t.joined("small", "a2", 1, "", 0.0)
    placed = [t.place(f"s{i}") for i in range(6)]
    names = [m.name for m in placed if m is not None]
    assert names.count("big") == 4 and names.count("small") == 2


def test_a_silent_member_is_overdue_and_dying_hands_back_its_sessions() -> None:
    """Missing heartbeats make a member overdue; its sessions are returned to move."""
    t = HostTable(miss_after=1.0)
    t.joined("m1", "a1", 5, "", 0.0)
    t.joined("m2", "a2", 5, "", 0.0)
    for i in range(4):
        t.place(f"s{i}")
    t.seen("m2", 1.5)
    assert [m.name for m in t.overdue(1.6)] == ["m1"]
    moved = t.died(t.members["m1"])
    assert moved == ["s0", "s2"]
    assert all(t.place(sid).name == "m2" for sid in moved)  # type: ignore[union-attr]
    assert t.overdue(1.7) == []
    # It answers again: back, and said so once.
    assert t.seen("m1", 2.0) is t.members["m1"]
    assert t.seen("m1", 2.1) is None


def test_no_live_member_means_no_placement() -> None:
    """Without a live member the Runner keeps the session on the leader."""
    t = HostTable()
    assert t.place("s") is None
    t.joined("m1", "a1", 1, "", 0.0)
    t.died(t.members["m1"])
    assert t.place("s") is None


def test_a_member_restarted_under_the_same_name_is_alive_with_a_fresh_heartbeat_clock() -> None:
    """A rejoin after being declared dead resets alive, the heartbeat clock, the
    outstanding heartbeat and the agent, so the member gets sessions again at once."""
    t = HostTable(miss_after=2.0)
    m = t.joined("m1", "a1", 1, "", 0.0)
    m.agent = "old agent"
    assert t.beats_due(0.0) == [m]  # a heartbeat out, never answered
    assert t.died(m) == [] and t.place("s") is None
    again = t.joined("m1", "a1", 1, "", 60.0)
    assert again is m and m.alive and m.last_seen == 60.0
    assert m.beat_sent is None and m.agent is None  # the Runner makes a new agent
    assert t.overdue(61.0) == []
    assert t.place("s") is m
    assert t.rows() == [{"host": "m1", "alive": True, "capacity": 1, "sessions": 1}]


def test_a_registration_notice_for_a_member_thought_alive_says_it_restarted() -> None:
    """A member whose departure was never reported is found by `rejoining`: what it ran
    must move before it is taken back."""
    t = HostTable()
    t.joined("m1", "a1", 1, "", 0.0)
    t.place("s")
    assert t.rejoining("m1") is t.members["m1"]
    assert t.rejoining("m2") is None
    t.died(t.members["m1"])
    assert t.rejoining("m1") is None


# -- the CLI's checks -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["serve", "--join", "127.0.0.1:1", "--host-name", "m"], "postgresql"),
        (
            ["serve", "--spine", "sqlite:///one.db", "--convention-leader"],
            "several hosts share one PostgreSQL log",
        ),
        (["serve", "--host-name", "m"], "--host-name needs --convention-leader or --join"),
        (["serve", "--spine", "postgresql://x/y", "--join", "127.0.0.1:1"], "--host-name"),
        (
            ["serve", "--spine", "postgresql://x/y", "--convention-leader", "--capacity", "3"],
            "--capacity is for a member",
        ),
        (
            ["serve", "--spine", "postgresql://x/y", "--convention-leader", "--bind", "0.0.0.0"],
            "wildcard",
        ),
        (
            ["serve", "--spine", "postgresql://x/y", "--join", "leader", "--host-name", "m"],
            "ADDR:PORT",
        ),
    ],
)
def test_serve_refuses_host_options_that_do_not_fit_and_names_the_problem(
    argv: list[str], problem: str, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad several-host options are a usage error naming the problem, before anything starts."""
    code = main([*argv, "--data", str(tmp_path / "d")])
    assert code == 2
    assert problem in capsys.readouterr().err


@pytest.fixture(autouse=True)
def _transmit_limit_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """A convention leader widens Thespian's per-process transmit limit for the processes
    it forks from this one (the test process): put it back afterwards, so that later tests
    run with Thespian's own."""
    from thespian.system.transport import asyncTransportBase

    monkeypatch.setattr(
        asyncTransportBase, "MAX_PENDING_TRANSMITS", asyncTransportBase.MAX_PENDING_TRANSMITS
    )


# -- real member processes on loopback -------------------------------------------------------


def _member(data: pathlib.Path, url: str, leader_port: int, name: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "actors.cli",
            "serve",
            "--data",
            str(data),
            "--spine",
            url,
            "--join",
            f"127.0.0.1:{leader_port}",
            "--host-name",
            name,
            "--capacity",
            "5",
            "--bind",
            "127.0.0.1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.fixture
def convention(
    tmp_path: pathlib.Path, pg_url: str, no_leftover_processes: object
) -> Iterator[tuple[Host, dict[str, subprocess.Popen[bytes]]]]:
    port = free_port()
    h = Host(
        tmp_path / "lead", spine=pg_url, convention_bind="127.0.0.1", admin_port=port, timeout=30
    )
    members: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name in ("m1", "m2"):
            # A member proves itself with the leader's secret (a host without it is refused).
            share_secret(tmp_path / "lead", tmp_path / name)
            members[name] = _member(tmp_path / name, pg_url, port, name)
        wait_for(lambda: sum(r["alive"] for r in h.hosts()) == 2, timeout=30, interval=0.1)
        yield h, members
    finally:
        for p in members.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in members.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        h.close()


def test_sessions_spread_over_members_and_move_when_their_member_is_killed(
    convention: tuple[Host, dict[str, subprocess.Popen[bytes]]], pg_url: str
) -> None:
    """Sessions run on member hosts by capacity; SIGKILL one member and its sessions go on
    on the other, rebuilt from PostgreSQL with gapless seqs and a newer lease epoch."""
    h, members = convention
    sids = [h.create() for _ in range(4)]
    for sid in sids:
        ack = h.send(sid, "hello")
        assert h.wait_turn(sid, ack.seq).kind == Kind.TURN_COMPLETED
    rows = {r["host"]: r for r in h.hosts()}
    assert rows["m1"]["sessions"] == 2 and rows["m2"]["sessions"] == 2
    # Session processes belong to the members, not to the leader's actor system.
    leader_procs = set(_session_pids(h))
    for sid in sids:
        assert h.session_pid(sid) not in leader_procs
    with open_log(pg_url) as log:
        epochs = {sid: log.lease(sid)[0] for sid in sids}  # type: ignore[attr-defined]

    os.kill(members["m1"].pid, signal.SIGKILL)
    members["m1"].wait(10)
    wait_for(lambda: not {r["host"]: r for r in h.hosts()}["m1"]["alive"], timeout=20)
    start = time.monotonic()
    for sid in sids:
        ack = h.send(sid, "again")
        assert h.wait_turn(sid, ack.seq).kind == Kind.TURN_COMPLETED
    assert time.monotonic() - start < 30
    assert {r["host"]: r for r in h.hosts()}["m2"]["sessions"] == 4
    with open_log(pg_url) as log:
        for sid in sids:
            evs = log.read_events(sid)
            assert [e.seq for e in evs] == list(range(1, len(evs) + 1))
            users = [e.text for e in evs if e.kind == Kind.USER_MESSAGE]
            assert users == ["hello", "again"]
            assert log.lease(sid)[0] >= epochs[sid]  # type: ignore[attr-defined]


def _session_pids(h: Host) -> list[int]:
    from actors._runtime.system import processes_in_session

    return processes_in_session(h.system_session)


def test_one_heartbeat_is_outstanding_per_member_until_answered_or_resent() -> None:
    """A silent member is pinged again only after `RESEND_AFTER`, not at every tick."""
    from actors.runner.rules.cluster import RESEND_AFTER

    t = HostTable()
    m = t.joined("m1", "a1", 1, "", 0.0)
    assert t.beats_due(0.0) == []  # no agent yet
    m.agent = "agent"
    assert t.beats_due(0.0) == [m]
    assert t.beats_due(0.25) == []
    assert t.beats_due(RESEND_AFTER) == [m]
    t.seen("m1", RESEND_AFTER + 0.1)
    assert t.beats_due(RESEND_AFTER + 0.2) == [m]


def test_a_stalled_runner_gives_members_a_fresh_window_instead_of_killing_them() -> None:
    """A heartbeat timer that fired late says the Runner, not the members, was stuck."""
    t = HostTable(miss_after=2.0)
    t.joined("m1", "a1", 1, "", 0.0)
    assert t.tick(0.25)
    assert not t.tick(10.0)  # the Runner slept 9.75 s
    assert t.overdue(10.5) == []
    assert t.tick(10.75)
    assert [m.name for m in t.overdue(12.5)] == ["m1"]


def test_a_member_restarted_under_the_same_name_is_alive_and_gets_sessions_again(
    convention: tuple[Host, dict[str, subprocess.Popen[bytes]]], pg_url: str, tmp_path: pathlib.Path
) -> None:
    """SIGKILL a member, start it again under its name: the leader lists it alive within
    seconds, not minutes, and places new sessions on it."""
    h, members = convention
    os.kill(members["m1"].pid, signal.SIGKILL)
    members["m1"].wait(10)
    wait_for(lambda: not {r["host"]: r for r in h.hosts()}["m1"]["alive"], timeout=20)
    port = int(h.admin_port)
    # Replaced in the dict, so the fixture stops the new process too.
    members["m1"] = _member(tmp_path / "m1", pg_url, port, "m1")
    wait_for(lambda: {r["host"]: r for r in h.hosts()}["m1"]["alive"], timeout=20, interval=0.1)
    sids = [h.create() for _ in range(4)]
    for sid in sids:
        ack = h.send(sid, "hello")
        assert h.wait_turn(sid, ack.seq).kind == Kind.TURN_COMPLETED
    assert {r["host"]: r for r in h.hosts()}["m1"]["sessions"] >= 1
