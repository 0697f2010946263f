"""Running the command line as users do: a real daemon, clients as processes, a terminal.

`Daemon` is ``vertebra serve`` on a data directory (stopped by its fixture, its actor
system checked for leftovers); `run` is one client command; `Terminal` runs a command on
a pseudo-terminal, types into it and reads the screen, every wait bounded.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping

from conftest import wait_for

CLI = [sys.executable, "-m", "actors.cli"]
#: Escape sequences (colors, cursor moves by readline) removed before matching screen text.
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|[\x01\x02]")


def env(**extra: str) -> dict[str, str]:
    """The environment of a client: no inherited data directory or color preference."""
    out = {k: v for k, v in os.environ.items() if k not in ("VERTEBRA_DATA", "NO_COLOR")}
    out.update(extra)
    return out


def run(
    data: pathlib.Path | None,
    *args: str,
    extra_env: Mapping[str, str] | None = None,
    stdin: str | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """``vertebra --data DATA ARGS...`` (no --data when ``data`` is None), to completion."""
    head = [] if data is None else ["--data", str(data)]
    return subprocess.run(
        [*CLI, *head, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        input=stdin,
        env=env(**(extra_env or {})),
    )


#: Binds ``$0`` onto itself read-only in a mount namespace of its own, then runs the
#: command: a read-only file system that stops root too (chmod does not).
_READ_ONLY_MOUNT = 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" && exec "$@"'


def read_only_prefix(folder: pathlib.Path) -> list[str] | None:
    """The argv prefix that runs a command with ``folder`` read-only, or None where this
    machine offers no way (root without mount namespaces). As root: a read-only bind
    mount in a private mount namespace (it ends with the command); otherwise nothing,
    the caller chmods the folder read-only (`read_only_folder`)."""
    if os.geteuid() != 0:
        return []
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", _READ_ONLY_MOUNT + ' && ! touch "$0/.w"', str(folder)],
        capture_output=True,
        timeout=30,
    )
    if probe.returncode != 0:
        return None
    return ["unshare", "-m", "sh", "-c", _READ_ONLY_MOUNT, str(folder)]


@contextlib.contextmanager
def read_only_folder(folder: pathlib.Path) -> Iterator[list[str]]:
    """``folder`` made read-only for the commands run with the prefix this yields (see
    `read_only_prefix`), restored afterwards; skips the test, saying why, where neither
    a mount namespace nor permissions can make it read-only."""
    import pytest

    prefix = read_only_prefix(folder)
    if prefix is None:
        pytest.skip("running as root without mount namespaces: nothing makes a folder read-only")
    modes = {p: p.stat().st_mode for p in [folder, *folder.rglob("*")]}
    if not prefix:
        for p in modes:
            p.chmod(0o500 if p.is_dir() else 0o400)
    try:
        yield prefix
    finally:
        for p, mode in sorted(modes.items(), key=lambda kv: len(kv[0].parts)):
            p.chmod(mode)


def run_in(
    prefix: list[str], argv: list[str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """The command ``argv`` under ``prefix`` (`read_only_folder`), to completion."""
    return subprocess.run(
        [*prefix, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env(),
    )


class Daemon:
    """A ``vertebra serve`` process on ``data``."""

    def __init__(self, data: pathlib.Path) -> None:
        self.data = data
        self.proc: subprocess.Popen[str] | None = None
        self.systems: list[int] = []

    def start(self, *extra: str) -> Daemon:
        info_path = self.data / "daemon.json"
        self.proc = subprocess.Popen(
            [*CLI, "--data", str(self.data), "serve", "--quiet", *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env(),
        )
        proc = self.proc
        wait_for(lambda: info_path.exists() or proc.poll() is not None, 30)
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        info = json.loads(wait_for(lambda: info_path.read_text() or None, 10))
        self.systems.append(int(info["system_session"]))
        return self

    def stop(self) -> None:
        """SIGTERM, then wait; a daemon that hangs is killed and the test fails."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""

    def wait_exited(self, timeout: float = 30) -> int:
        assert self.proc is not None
        code = self.proc.wait(timeout)
        self.proc = None
        return code

    def check_no_leftovers(self) -> None:
        from actors._runtime.system import processes_in_session

        wait_for(lambda: not any(processes_in_session(s) for s in self.systems), 15)


class Terminal:
    """A command on a pseudo-terminal: type into it, read its screen, bounded waits."""

    def __init__(self, argv: list[str], extra_env: Mapping[str, str] | None = None) -> None:
        environ = env(TERM="xterm", COLUMNS="120", LINES="40", **(extra_env or {}))
        pid, fd = pty.fork()
        if pid == 0:  # the child: becomes the command, the pty its controlling terminal
            try:
                os.execvpe(argv[0], argv, environ)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        self.raw = ""
        self.code: int | None = None

    @property
    def screen(self) -> str:
        return ANSI.sub("", self.raw).replace("\r", "")

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return False
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:  # the other side closed: the command exited
            return False
        self.raw += chunk.decode("utf-8", "replace")
        return bool(chunk)

    def expect(self, text: str, timeout: float = 30, after: int = 0) -> int:
        """Wait until ``text`` is on the screen past offset ``after``; its end offset."""
        deadline = time.monotonic() + timeout
        while True:
            at = self.screen.find(text, after)
            if at >= 0:
                return at + len(text)
            left = deadline - time.monotonic()
            if left <= 0 or (not self._read(min(left, 0.2)) and self.exited()):
                at = self.screen.find(text, after)
                if at >= 0:
                    return at + len(text)
                raise AssertionError(
                    f"{text!r} not on the screen within {timeout}s:\n{self.screen}"
                )

    def type(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def exited(self) -> bool:
        if self.code is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.code = os.waitstatus_to_exitcode(status)
        return self.code is not None

    def wait(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while not self.exited():
            if time.monotonic() > deadline:
                raise AssertionError(f"the command did not exit within {timeout}s:\n{self.screen}")
            self._read(0.05)
        while self._read(0.05):
            pass
        assert self.code is not None
        return self.code

    def close(self) -> None:
        """Kill the command if it still runs (a failed test), and release the terminal."""
        if not self.exited():
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self.code = -9
        os.close(self.fd)


def ok(out: subprocess.CompletedProcess[str]) -> str:
    """The command's output; it must have succeeded."""
    assert out.returncode == 0, out.stderr
    return out.stdout


@contextlib.contextmanager
def stopped_after(d: Daemon) -> Iterator[Daemon]:
    """``d`` for the block; then stopped, and none of its processes left behind."""
    try:
        yield d
    finally:
        try:
            d.stop()
        finally:
            d.check_no_leftovers()
