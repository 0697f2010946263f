"""Thespian plumbing: loopback-only listeners, quiet logging, free ports, system start."""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

_patched = False


def loopback_only() -> None:
    """Make every Thespian TCP listener of this process (and its forks) bind 127.0.0.1.

    Thespian binds its listeners to all interfaces and accepts pickles on them, which is
    remote code execution for anyone who can connect; a single-host runtime must not.
    """
    global _patched
    if _patched:
        return
    os.environ.setdefault("THESPIAN_BASE_IPADDR", "127.0.0.1")
    os.environ.setdefault("THESPLOG_FILE_MAXSIZE", "0")
    from thespian.system.transport import IPBase

    original = IPBase.IPActorAddress.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if self.bindname and self.bindname[0] in ("", "0.0.0.0"):
            self.bindname = ("127.0.0.1", self.bindname[1])

    IPBase.IPActorAddress.__init__ = __init__
    _patched = True


def log_defs(data_dir: str | None = None, level: int = logging.WARNING) -> dict[str, Any]:
    """A logging dict for Thespian: warnings to a file in the data directory, or nowhere.

    ``logDefs=False`` crashes multiproc bases, so quiet logging is a real dict.
    """
    from .logformat import json_logs, log_level

    level = log_level(level)
    handlers: dict[str, Any] = {"null": {"class": "logging.NullHandler"}}
    root: dict[str, Any] = {"handlers": ["null"], "level": "CRITICAL"}
    if data_dir is not None:
        handlers["file"] = {
            "class": "logging.FileHandler",
            "filename": os.path.join(data_dir, "vertebra.log"),
            "level": level,
            "formatter": "json" if json_logs() else "plain",
        }
        root = {"handlers": ["file"], "level": level}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
            "json": {"()": "actors.logformat.JsonFormatter"},
        },
        "handlers": handlers,
        "root": root,
    }


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_configured: tuple[int, str] | None = None


def configure_actor_logging(data_dir: str) -> None:
    """Send this process's ``vertebra.*`` records to ``vertebra.log`` in the data directory.

    Actor processes inherit whatever logging the process that forked them had; writing our
    own records straight to the file keeps them off the host's terminal and in one place.
    """
    global _configured
    if _configured == (os.getpid(), data_dir):
        return
    lg = logging.getLogger("vertebra")
    for h in list(lg.handlers):
        lg.removeHandler(h)
        h.close()
    from .logformat import JsonFormatter, json_logs

    handler = logging.FileHandler(os.path.join(data_dir, "vertebra.log"))
    handler.setFormatter(
        JsonFormatter()
        if json_logs()
        else logging.Formatter(f"%(asctime)s %(levelname)s %(name)s[{os.getpid()}] %(message)s")
    )
    lg.addHandler(handler)
    lg.setLevel(logging.INFO)
    lg.propagate = False
    _configured = (os.getpid(), data_dir)


def processes_in_session(sid: int) -> list[int]:
    """Live (non-zombie) processes whose session id is ``sid``.

    Thespian's admin starts a new session when it daemonizes, and every actor process it
    forks inherits it, so the session id names exactly one actor system's processes.
    """
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2 :].split()
        if rest[0] != "Z" and int(rest[3]) == sid:
            out.append(int(name))
    return out
