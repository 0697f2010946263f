"""One daemon per data directory, one process tree that dies with it, and clients that
never start an actor system of their own."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys

import pytest
from cli_support import CLI, Daemon, env, run
from conftest import wait_for

from actors._version import __version__
from actors.cli._daemon import EXIT_NO_DAEMON, LOCK_FILE, lock_held, lock_holders
from actors.system import free_port, processes_in_session


def one_line(out: subprocess.CompletedProcess[str]) -> str:
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


def info_of(data: pathlib.Path) -> dict[str, int]:
    raw: dict[str, int] = json.loads((data / "daemon.json").read_text())
    return raw


def new_daemon_file(data: pathlib.Path, old_pid: int) -> bool:
    try:
        return info_of(data)["pid"] != old_pid
    except (OSError, ValueError):
        return False


@pytest.fixture
def own(tmp_path: pathlib.Path):  # type: ignore[no-untyped-def]
    d = Daemon(tmp_path / "data")
    try:
        yield d
    finally:
        d.stop()
        d.check_no_leftovers()


def test_killing_the_daemon_takes_every_actor_process_along(own: Daemon) -> None:
    """SIGKILL of `vertebra serve` alone (not its group): the admin's watchdog and the
    parent-death signal end every actor process, the lock is free, and a new daemon on
    the directory serves the same sessions."""
    own.start()
    assert run(own.data, "send", "k-1", "--create", "hello").returncode == 0
    session = info_of(own.data)["system_session"]
    assert len(processes_in_session(session)) >= 4
    assert own.proc is not None
    own.proc.kill()
    own.wait_exited()
    wait_for(lambda: not processes_in_session(session), 15)
    # A process whose main thread has exited reads as a zombie while its other threads
    # (a session's turn and provider threads) still hold its files, the lock among them.
    wait_for(lambda: not lock_held(str(own.data)), 5)
    # The dead daemon's file stays; the helper waits for the new one to appear.
    (own.data / "daemon.json").unlink()
    own.start()
    out = run(own.data, "send", "k-1", "again")
    assert out.returncode == 0, out.stderr


def test_a_second_daemon_is_refused_by_the_lock_even_without_daemon_json(
    own: Daemon,
) -> None:
    """The lock, not the file, decides: with daemon.json removed, a second serve is still
    refused in one line and the first keeps serving."""
    own.start()
    (own.data / "daemon.json").rename(own.data / "daemon.json.saved")
    try:
        out = run(own.data, "serve", "--quiet", timeout=30)
        assert out.returncode != 0
        assert "held by" in one_line(out) or "already runs" in one_line(out)
    finally:
        (own.data / "daemon.json.saved").rename(own.data / "daemon.json")
    assert run(own.data, "send", "s-2", "--create", "still here").returncode == 0


def test_a_starting_daemon_reaps_the_leftovers_of_a_dead_one(own: Daemon) -> None:
    """With the old admin stopped (so its watchdog cannot act) and its daemon killed,
    the old actor processes still hold the lock: a new serve kills exactly them and
    starts."""
    own.start()
    old = info_of(own.data)
    session = old["system_session"]
    procs = processes_in_session(session)
    admin = min(procs)
    os.kill(admin, signal.SIGSTOP)
    assert own.proc is not None
    own.proc.kill()
    own.wait_exited()
    assert lock_held(str(own.data))
    own.proc = subprocess.Popen(
        [*CLI, "--data", str(own.data), "serve", "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
    )
    wait_for(lambda: new_daemon_file(own.data, old["pid"]), 30)
    own.systems.append(info_of(own.data)["system_session"])
    wait_for(lambda: not processes_in_session(session), 15)
    assert info_of(own.data)["pid"] != old["pid"]
    assert run(own.data, "send", "r-1", "--create", "hello").returncode == 0


@pytest.mark.parametrize(
    "content",
    [
        "",
        "{not json",
        "[1, 2]",
        "STALE",  # a live pid (this test's) and a port nobody serves, no lock held
        "FOREIGN",  # a running daemon's file copied from its own directory
    ],
)
def test_a_client_on_a_bad_daemon_file_says_so_in_one_line_and_starts_nothing(
    tmp_path: pathlib.Path, content: str, request: pytest.FixtureRequest
) -> None:
    """Empty, corrupt, stale or foreign daemon.json: `send` exits non-zero with one line,
    writes no spine and starts no actor system."""
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    other = None
    try:
        if content == "STALE":
            port = free_port()
            content = json.dumps(
                {"pid": os.getpid(), "admin_port": port, "version": "0.1.0", "system_session": 1}
            )
        elif content == "FOREIGN":
            other = Daemon(tmp_path / "other").start()
            content = (other.data / "daemon.json").read_text()
        (data / "daemon.json").write_text(content)
        before = set(lock_holders(str(data)))
        out = run(data, "send", "x-1", "--create", "hello", timeout=15)
        assert out.returncode != 0
        line = one_line(out)
        assert "daemon" in line, line
        assert not (data / "spine.db").exists()
        assert set(lock_holders(str(data))) == before
        if other is not None:
            assert out.returncode == EXIT_NO_DAEMON
            assert "x-1" not in run(other.data, "sessions").stdout
    finally:
        if other is not None:
            other.stop()
            other.check_no_leftovers()


@pytest.fixture
def bystander():  # type: ignore[no-untyped-def]
    """A live process that has nothing to do with vertebra (stopped after the test)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(10)


@pytest.mark.parametrize(
    "version",
    ["0.0.1", None, __version__],
    ids=["another-version", "no-version", "this-version"],
)
def test_stop_signals_no_process_that_does_not_hold_the_data_directorys_lock(
    tmp_path: pathlib.Path, bystander: subprocess.Popen[bytes], version: str | None
) -> None:
    """A daemon.json naming a live unrelated process (of any version, or none): stop
    sends it nothing and says, with exit 3, that no daemon runs there."""
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    raw: dict[str, object] = {"pid": bystander.pid, "admin_port": free_port()}
    if version is not None:
        raw["version"] = version
    (data / "daemon.json").write_text(json.dumps(raw))
    out = run(data, "stop", "--timeout", "5", timeout=30)
    assert out.returncode == EXIT_NO_DAEMON, out.stderr
    assert "no daemon runs" in one_line(out) or "stale" in one_line(out)
    assert "stopped" not in out.stdout
    assert bystander.poll() is None


def test_stop_signals_no_process_while_another_holds_the_lock(
    tmp_path: pathlib.Path, bystander: subprocess.Popen[bytes]
) -> None:
    """The lock is held, but not by the pid daemon.json names: that pid is not the
    daemon, and stop leaves it alone."""
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            f"fd = os.open({str(data / LOCK_FILE)!r}, os.O_RDWR | os.O_CREAT, 0o600)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('locked', flush=True)\n"
            "time.sleep(120)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        (data / "daemon.json").write_text(
            json.dumps({"pid": bystander.pid, "admin_port": free_port(), "version": "0.0.1"})
        )
        out = run(data, "stop", "--timeout", "5", timeout=30)
        assert out.returncode == EXIT_NO_DAEMON, out.stderr
        assert f"pid {bystander.pid}" in one_line(out) and "nothing was signalled" in out.stderr
        assert bystander.poll() is None and holder.poll() is None
    finally:
        holder.kill()
        holder.wait(10)


def test_serve_on_a_damaged_database_fails_in_one_line_and_leaves_nothing(
    tmp_path: pathlib.Path,
) -> None:
    """A spine.db that is not a database: one line naming it, a non-zero exit, no
    process holding the directory, no daemon.json."""
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "spine.db").write_bytes(b"this is not a database" * 100)
    out = run(data, "serve", "--quiet", timeout=60)
    assert out.returncode != 0
    assert "spine.db" in one_line(out)
    wait_for(lambda: not lock_holders(str(data)), 15)
    assert not (data / "daemon.json").exists()


def test_serve_on_an_invalid_port_fails_in_one_line(tmp_path: pathlib.Path) -> None:
    """--port 70000 is refused before anything starts."""
    out = run(tmp_path / "data", "serve", "--port", "70000", timeout=30)
    assert out.returncode != 0
    assert "65535" in one_line(out)
