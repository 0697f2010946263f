"""The daemon's file in the data directory, and the errors the command line reports.

``vertebra serve`` writes ``DIR/daemon.json`` (pid, admin port, version); clients read it
to attach, so a client never guesses a port and never starts a second actor system.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
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


LOCK_FILE = "daemon.lock"
#: How long a starting daemon waits for the processes of a dead one to let go of the lock.
REAP_WAIT = 5.0
#: Seconds a lock holder outside the recorded actor system gets to finish exiting.
HOLDER_GRACE = 2.0


def _lock_path(data: str) -> str:
    return os.path.join(os.path.abspath(data), LOCK_FILE)


def lock_held(data: str) -> bool:
    """Whether a daemon (any process of its actor system) holds ``data``'s lock."""
    try:
        fd = os.open(_lock_path(data), os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def lock_holders(data: str) -> list[int]:
    """Processes (of this user) with ``data``'s lock file open, this one excepted."""
    target = _lock_path(data)
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            fds = os.listdir(f"/proc/{name}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{name}/fd/{fd}") == target:
                    out.append(int(name))
                    break
            except OSError:
                continue
    return out


def _lock_records(path: str) -> list[int] | None:
    """The pids /proc/locks names for an exclusive flock on the file at ``path`` (its
    inode), or None where the kernel does not say."""
    try:
        ino = os.stat(path).st_ino
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    except OSError:
        return None
    out = []
    for line in lines:
        # "1: FLOCK  ADVISORY  WRITE 4721 fe:00:2146326 0 EOF" (a blocked waiter's line
        # has "->" after its number and holds nothing).
        parts = line.split()
        if len(parts) < 6 or parts[1] != "FLOCK" or parts[3] != "WRITE":
            continue
        with contextlib.suppress(ValueError, IndexError):
            if int(parts[5].rsplit(":", 1)[1]) == ino:
                out.append(int(parts[4]))
    return out


def holds_lock(data: str, pid: int) -> bool:
    """Whether ``pid`` is proven to be ``data``'s daemon: it runs, has the lock file open,
    and the kernel records it as the process that took the lock (a reused pid, or a
    process that only names itself in daemon.json, does neither)."""
    if pid <= 0 or not alive(pid) or not lock_held(data):
        return False
    target = _lock_path(data)
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    opened = False
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                opened = True
                break
    if not opened:
        return False
    pids = _lock_records(target)
    return pids is None or pid in pids


def _session_of(pid: int) -> int:
    try:
        return os.getsid(pid)
    except OSError:
        return -1


def acquire_lock(data: str) -> int:
    """Take ``data``'s exclusive lock for this daemon's lifetime and return its fd.

    The actor processes inherit the descriptor, so the lock is held while any process of
    this daemon lives. If a dead daemon's processes still hold it, those of its recorded
    actor system (daemon.json's session, holding this very lock file) are killed first.
    A live daemon, or holders that cannot be told to be ours, are refused in one line.
    """
    try:
        fd = os.open(_lock_path(data), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise CliError(f"cannot open {_lock_path(data)!r}: {exc.strerror}") from None
    deadline = time.monotonic() + REAP_WAIT
    grace = time.monotonic() + HOLDER_GRACE
    reaped = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            pass
        raw = _raw_daemon(data)
        pid = int(raw.get("pid", 0) or 0)
        if pid and alive(pid):
            os.close(fd)
            raise CliError(f"a daemon already runs on {data!r} (pid {pid})")
        if not reaped:
            session = int(raw.get("system_session", 0) or 0)
            holders = lock_holders(data)
            stale = [h for h in holders if session > 0 and _session_of(h) == session]
            if not stale and time.monotonic() < grace:
                # Exiting holders get a moment: a zombie's other threads still hold its
                # files, and a process being torn down shows no descriptors (none seen).
                time.sleep(0.05)
                continue
            if not stale:
                os.close(fd)
                raise CliError(
                    f"{_lock_path(data)!r} is held by process(es) "
                    f"{', '.join(map(str, holders)) or 'unknown'}, not by a daemon this "
                    f"directory records: stop them first"
                )
            for h in stale:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(h, signal.SIGKILL)
            reaped = True
        if time.monotonic() > deadline:
            os.close(fd)
            raise CliError(f"the processes of an earlier daemon on {data!r} did not exit")
        time.sleep(0.05)


def _raw_daemon(data: str) -> dict[str, Any]:
    try:
        with open(os.path.join(data, DAEMON_FILE)) as f:
            raw = json.load(f)
        return raw if isinstance(raw, dict) else {}
    except (OSError, ValueError):
        return {}


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
    if info.version == __version__ and not lock_held(data):
        # A daemon of this version holds the lock while it lives (an older one may not).
        # The pid was reused, or the file was copied from another directory: attaching
        # to its port would reach someone else's actor system, or start one.
        raise CliError(
            f"{path!r} is stale (no daemon holds {LOCK_FILE}): {start_hint(data)}",
            EXIT_NO_DAEMON,
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


def remove_daemon(data: str, pid: int | None = None) -> None:
    """Remove ``data``'s daemon file; with ``pid``, only if it names that process (a
    daemon on its way out must not remove the file of one started after it)."""
    path = os.path.join(data, DAEMON_FILE)
    if pid is not None:
        try:
            with open(path) as f:
                if int(json.load(f).get("pid", 0)) != pid:
                    return
        except (OSError, ValueError, TypeError, AttributeError):
            return
    try:
        os.unlink(path)
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
    "LOCK_FILE",
    "CliError",
    "DaemonInfo",
    "acquire_lock",
    "alive",
    "holds_lock",
    "lock_held",
    "read_daemon",
    "remove_daemon",
    "start_hint",
    "wait_stopped",
    "write_daemon",
]
