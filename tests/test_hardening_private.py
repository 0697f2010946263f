"""Private data: the data directory is owner-only, every file in it too, and a directory
other users can write is refused."""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import stat
import subprocess
from collections.abc import Iterator

import pytest
from cli_support import CLI, env, run
from conftest import wait_for

from spine import Event, Kind, SqliteLog, UnsafeDataDirError, private_dir


@contextlib.contextmanager
def loose_umask() -> Iterator[None]:
    """The umask most accounts run with (022): files would be world-readable by default."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def modes(root: pathlib.Path) -> dict[str, int]:
    """Every path under ``root`` (itself included) and its permission bits."""
    out = {".": stat.S_IMODE(root.stat().st_mode)}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = pathlib.Path(dirpath, name)
            with contextlib.suppress(FileNotFoundError):
                out[str(p.relative_to(root))] = stat.S_IMODE(p.stat().st_mode)
    return out


def assert_private(root: pathlib.Path) -> dict[str, int]:
    found = modes(root)
    bad = {}
    for name, mode in found.items():
        is_dir = (root / name).is_dir()
        if mode != (0o700 if is_dir else 0o600):
            bad[name] = oct(mode)
    assert not bad, f"not owner-only: {bad}"
    return found


def test_a_spine_database_and_its_journal_files_are_owner_only(tmp_path: pathlib.Path) -> None:
    """Under a 022 umask the database, its WAL and its SHM are 0600; a file an earlier
    version left 0644 is tightened when the log opens it again."""
    with loose_umask():
        path = tmp_path / "spine.db"
        log = SqliteLog(path)
        try:
            log.append("s-1", [Event(kind=Kind.USER_MESSAGE, text="secret")])
            for name in ("spine.db", "spine.db-wal", "spine.db-shm"):
                assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600, name
        finally:
            log.close()
        os.chmod(path, 0o644)
        SqliteLog(path).close()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_data_directory_others_can_write_is_refused_and_a_readable_one_tightened(
    tmp_path: pathlib.Path,
) -> None:
    """Group- or world-writable: refused naming the mode; only readable: made 0700."""
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    with pytest.raises(UnsafeDataDirError, match="writable by other users"):
        private_dir(open_dir)
    readable = tmp_path / "readable"
    readable.mkdir()
    os.chmod(readable, 0o755)
    private_dir(readable)
    assert stat.S_IMODE(readable.stat().st_mode) == 0o700
    fresh = tmp_path / "a" / "b"
    with loose_umask():
        private_dir(fresh)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700


def test_serve_on_a_directory_others_can_write_says_so_in_one_line(
    tmp_path: pathlib.Path,
) -> None:
    """`vertebra serve` on a 0777 directory exits non-zero with one line and starts nothing."""
    data = tmp_path / "shared"
    data.mkdir()
    os.chmod(data, 0o777)
    out = run(data, "serve", "--quiet", timeout=30)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "writable by other users" in lines[0], out.stderr
    assert not (data / "daemon.json").exists()
    assert not (data / "spine.db").exists()


def test_every_file_a_daemon_writes_is_owner_only(tmp_path: pathlib.Path) -> None:
    """A daemon with the HTTP gateway, started under a 022 umask, a session with a turn,
    a seal (keys), a scoped token and a chat: the directory is 0700 and every file 0600,
    while it runs (WAL and SHM present) and after it stopped."""
    data = tmp_path / "data"
    with loose_umask():
        proc = subprocess.Popen(
            [*CLI, "--data", str(data), "serve", "--quiet", "--http", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env(),
        )
    try:
        wait_for(lambda: (data / "daemon.json").exists() or proc.poll() is not None, 30)
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        with loose_umask():
            for args in (
                ("new", "p-1", "--meta", "owner=ops"),
                ("send", "p-1", "hello"),
                ("seal", "p-1"),
                ("token", "create", "--session", "p-1"),
            ):
                out = run(data, *args)
                assert out.returncode == 0, (args, out.stderr)
            out = run(data, "chat", "p-1", stdin="again\n")
            assert out.returncode == 0, out.stderr
        wait_for(lambda: (data / "gateway-token").exists(), 30)
        found = assert_private(data)
        for name in ("spine.db", "spine.db-wal", "spine.db-shm", "snapshots.db", "daemon.json"):
            assert name in found, sorted(found)
        assert "keys" in found and "gateway-tokens.json" in found, sorted(found)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    assert_private(data)
