"""The daemon's file in the data directory, and the errors the command line reports.

``vertebra serve`` writes ``DIR/daemon.json`` (pid, admin port, version); clients read it
to attach, so a client never guesses a port and never starts a second actor system.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, NamedTuple

from .._version import __version__

DAEMON_FILE = "daemon.json"

#: Exit codes, documented in the README.
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NO_DAEMON = 3
EXIT_UNKNOWN_SESSION = 4
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """A failure the command line reports as one line on stderr with exit ``code``."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


class DaemonInfo(NamedTuple):
    pid: int
    admin_port: int
    version: str
    system_session: int
    #: The spine's URL when it is not the data directory's SQLite file.
    spine: str = ""


def start_hint(data: str) -> str:
    return f"start one with `vertebra serve --data {data}`"


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped by its parent, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2 :].split()[0] != "Z"


def read_daemon(data: str, *, check_version: bool = True) -> DaemonInfo:
    """The running daemon of ``data``; `CliError` if none runs or it is another version."""
    path = os.path.join(data, DAEMON_FILE)
    try:
        with open(path) as f:
            raw: dict[str, Any] = json.load(f)
        info = DaemonInfo(
            pid=int(raw["pid"]),
            admin_port=int(raw["admin_port"]),
            version=str(raw.get("version", "unknown")),
            system_session=int(raw.get("system_session", 0)),
            spine=str(raw.get("spine", "")),
        )
    except FileNotFoundError:
        raise CliError(f"no daemon runs on {data!r}: {start_hint(data)}", EXIT_NO_DAEMON) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CliError(f"unreadable {path!r} ({exc}): remove it if no daemon runs") from None
    if not alive(info.pid):
        raise CliError(
            f"the daemon of {data!r} (pid {info.pid}) is gone: {start_hint(data)}", EXIT_NO_DAEMON
        )
    if check_version and info.version != __version__:
        raise CliError(
            f"the daemon of {data!r} runs vertebra {info.version}, this is {__version__}: "
            f"restart it (`vertebra stop --data {data}`, then `vertebra serve --data {data}`)",
            EXIT_NO_DAEMON,
        )
    return info


def write_daemon(data: str, info: DaemonInfo) -> None:
    path = os.path.join(data, DAEMON_FILE)
    tmp = path + ".tmp"
    # Owner-only: it may hold the spine's URL with a password.
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        json.dump(info._asdict(), f)
    # Clients must never see a half-written file.
    os.replace(tmp, path)


def remove_daemon(data: str) -> None:
    try:
        os.unlink(os.path.join(data, DAEMON_FILE))
    except FileNotFoundError:
        pass


def wait_stopped(data: str, pid: int, timeout: float) -> bool:
    """Wait until the daemon ``pid`` has exited or removed its file (it does so last,
    after the actor system is down); False after ``timeout`` seconds."""
    path = os.path.join(data, DAEMON_FILE)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        try:
            with open(path) as f:
                same = int(json.load(f).get("pid", 0)) == pid
        except (OSError, ValueError):
            same = False
        if not same:
            return True
        time.sleep(0.05)
    return False


__all__ = [
    "DAEMON_FILE",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_NO_DAEMON",
    "EXIT_UNKNOWN_SESSION",
    "EXIT_USAGE",
    "CliError",
    "DaemonInfo",
    "alive",
    "read_daemon",
    "remove_daemon",
    "start_hint",
    "wait_stopped",
    "write_daemon",
]
