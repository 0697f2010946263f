"""One daemon per data directory, one process tree that dies with it, and clients that
never start an actor system of their own."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import sqlite3
import subprocess
import sys

import pytest
from cli_support import CLI, Daemon, env, read_only_folder, run, run_in
from conftest import wait_for

from actors._runtime.system import free_port, processes_in_session
from actors._version import __version__
from actors.cli._daemon import EXIT_NO_DAEMON, LOCK_FILE, lock_held, lock_holders
from spine import Event, Kind, SqliteLog


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


# -- a read-only data directory ----------------------------------------------------------------


@pytest.fixture(scope="module")
def sealed_data(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A data directory a daemon left behind (stopped): one session, one turn, sealed."""
    d = Daemon(tmp_path_factory.mktemp("sealed") / "data").start()
    try:
        assert run(d.data, "send", "ro-1", "--create", "hello").returncode == 0
        assert run(d.data, "seal", "ro-1").returncode == 0
    finally:
        d.stop()
        d.check_no_leftovers()
    return d.data


def _copy(src: pathlib.Path, dst: pathlib.Path) -> pathlib.Path:
    shutil.copytree(src, dst)
    dst.chmod(0o700)
    return dst


def _checkpointed(data: pathlib.Path) -> pathlib.Path:
    """``data`` with its WAL copied into the database and removed (no -wal, no -shm)."""
    c = sqlite3.connect(data / "spine.db")
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.close()
    assert not (data / "spine.db-wal").exists() and not (data / "spine.db-shm").exists()
    return data


@pytest.mark.parametrize("wal", ["as-left", "checkpointed"])
def test_a_read_only_data_directory_is_read_exported_and_verified(
    sealed_data: pathlib.Path, tmp_path: pathlib.Path, wal: str
) -> None:
    """On a read-only file system (with or without the WAL's files beside the database)
    history, status, export, check and the offline seal verifier all work, and write
    nothing there."""
    data = _copy(sealed_data, tmp_path / "data")
    if wal == "checkpointed":
        _checkpointed(data)
    before = sorted((p.name, p.stat().st_size) for p in data.iterdir())
    out_file = tmp_path / "ro-1.jsonl"
    cli = [*CLI, "--data", str(data)]
    seal = [sys.executable, "-m", "spine.seal"]
    with read_only_folder(data) as ro:
        history = run_in(ro, [*cli, "history", "ro-1"])
        assert history.returncode == 0, history.stderr
        assert "[scripted] hello" in history.stdout and "record.sealed" in history.stdout
        status = run_in(ro, [*cli, "status", "ro-1", "--json"])
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["turns"] == 1
        export = run_in(ro, [*cli, "export", "ro-1", str(out_file)])
        assert export.returncode == 0, export.stderr
        check = run_in(ro, [*cli, "check"])
        assert check.returncode == 0 and "ro-1: 1 seal(s), ok" in check.stdout, check
        keys = ["--keyring", str(data / "keys")]
        verify = run_in(
            ro, [*seal, "verify-log", str(data / "spine.db"), "ro-1", "--no-record", *keys]
        )
        assert verify.returncode == 0 and "proofs     ok" in verify.stdout, verify
        prove = run_in(ro, [*seal, "prove", str(data / "spine.db"), "ro-1", "2"])
        assert prove.returncode == 0 and json.loads(prove.stdout)["seq"] == 2, prove
    assert len(out_file.read_text().splitlines()) == history.stdout.count("\n") + 1
    assert sorted((p.name, p.stat().st_size) for p in data.iterdir()) == before


def test_a_read_only_copy_whose_wal_has_no_shm_is_refused_naming_why(
    tmp_path: pathlib.Path,
) -> None:
    """A write-ahead log with commits but no -shm file cannot be read on a read-only
    file system: one line says so, instead of showing the file without those commits."""
    live = tmp_path / "live"
    live.mkdir(mode=0o700)
    log = SqliteLog(live / "spine.db", autocheckpoint=False)
    try:
        log.append("w-1", [Event(kind=Kind.USER_MESSAGE, text="only in the WAL")])
        data = tmp_path / "data"
        data.mkdir(mode=0o700)
        for name in ("spine.db", "spine.db-wal"):
            shutil.copy(live / name, data / name)
    finally:
        log.close()
    assert (data / "spine.db-wal").stat().st_size > 0
    with read_only_folder(data) as ro:
        out = run_in(ro, [*CLI, "--data", str(data), "history", "w-1"])
    assert out.returncode == 1
    assert "write-ahead log" in one_line(out) and "read-only" in one_line(out)


def test_serve_on_a_read_only_data_directory_fails_in_one_line(
    sealed_data: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """A daemon cannot run where it cannot write: one line, no traceback, exit 1."""
    data = _copy(sealed_data, tmp_path / "data")
    with read_only_folder(data) as ro:
        out = run_in(ro, [*CLI, "--data", str(data), "serve", "--quiet"])
    assert out.returncode == 1
    assert "read-only" in one_line(out) and "Traceback" not in out.stderr
    assert not (data / "daemon.json").exists()
