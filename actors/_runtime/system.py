"""Thespian plumbing: loopback-only listeners, quiet logging, free ports, system start."""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import threading
import time
from datetime import timedelta
from typing import Any

from .forking import on_fresh_chunk
from .kept_poll import kept_poll_module
from .thespian_log import route_thespian_log

_patched = False


def loopback_only() -> None:
    """Make every Thespian TCP listener of this process (and its forks) bind 127.0.0.1.

    Thespian binds its listeners to all interfaces and accepts pickles on them, which is
    remote code execution for anyone who can connect; a single-host runtime must not.
    """
    bind_only("127.0.0.1")


def bind_only(address: str) -> None:
    """Make every Thespian TCP listener of this process (and its forks) bind ``address``.

    A host of a convention listens on its one private address (``--bind``), never on the
    wildcard address. The first call of a process wins: the patch and the environment
    variable are inherited by every actor process forked after it.
    """
    global _patched
    if _patched:
        return
    os.environ["THESPIAN_BASE_IPADDR"] = address
    os.environ.setdefault("THESPLOG_FILE_MAXSIZE", "0")
    from thespian.system.transport import IPBase

    original = IPBase.IPActorAddress.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if self.bindname and self.bindname[0] in ("", "0.0.0.0"):
            self.bindname = (address, self.bindname[1])

    IPBase.IPActorAddress.__init__ = __init__
    _patched = True


#: How often an actor system's admin checks that the process that started it still runs.
WATCHDOG_INTERVAL = 0.25
_guarded = False
_starter_pid = 0


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Ask Linux to send this process ``sig`` when its parent dies (PR_SET_PDEATHSIG).

    False where there is no prctl (not Linux): the admin's watchdog still covers it.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        if libc.prctl(pr_set_pdeathsig, sig, 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    # The parent may have died between the fork and the prctl: then nobody signals.
    if os.getppid() == 1:
        os.kill(os.getpid(), sig)
    return True


def _watch_starter(pid: int) -> None:
    while True:
        time.sleep(WATCHDOG_INTERVAL)
        if not _running(pid):
            # The admin leads the process group every actor process of this system is in.
            os.killpg(os.getpgid(0), signal.SIGKILL)


def _running(pid: int) -> bool:
    # A starter that exited but was not reaped yet (a zombie) is gone too: its parent may
    # be waiting for the pipes these processes inherited before it reaps it.
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return stat[stat.rindex(")") + 2 :].split()[0] not in ("Z", "X")


def lean_select() -> None:
    """Let Thespian's TCP transport wait on a poll kept per thread (`KeptPoll`) instead of
    a new selector per pass of its loop.

    The transport builds a fresh selector on every pass and registers every socket in it:
    with Thespian's default (epoll) that is a system call to create it, one per socket
    and one to close it, for a single wait; in the profiles of the Runner, a session and a
    Host, the selector's setup and teardown was 10-25% of each process's transport time.
    ``VERTEBRA_SELECT=poll`` waits with a new ``poll`` selector per pass (the previous
    fix), ``VERTEBRA_SELECT=thespian`` (or the older ``VERTEBRA_EPOLL=1``) restores
    Thespian's own choice. Idempotent; affects every process forked after it.
    """
    choice = os.environ.get("VERTEBRA_SELECT", "kept")
    if os.environ.get("VERTEBRA_EPOLL") or choice == "thespian":
        return
    import selectors
    import types

    from thespian.system.transport import TCPTransport as tt

    if getattr(tt.selectors, "_vertebra_select", None) is not None:
        return
    if choice == "poll":
        lean = types.ModuleType("selectors")
        lean.__dict__.update(selectors.__dict__)
        lean.DefaultSelector = selectors.PollSelector  # type: ignore[attr-defined]
    else:
        lean = kept_poll_module()
    lean._vertebra_select = choice  # type: ignore[attr-defined]
    tt.selectors = lean


class _Described:
    """A Thespian intent's or envelope's description, built only if it is printed."""

    __slots__ = ("_describe", "_of")

    def __init__(self, describe: Any, of: Any) -> None:
        self._describe, self._of = describe, of

    def __str__(self) -> str:
        return str(self._describe(self._of))

    __repr__ = __str__


def lazy_descriptions() -> None:
    """Let Thespian describe a message for its debug log only when the line is written.

    Its transport passes ``intent.identify()`` to ``thesplog`` for every message it sends
    and receives (three or four per message), and the description (addresses, timers, the
    message's text) was built each time though the line is dropped: about 4% of a
    session's time in a profile. Idempotent; affects every process forked after it.
    """
    from thespian.system import transport as tr

    if getattr(tr.TransmitIntent, "_vertebra_lazy", False):
        return
    for cls in (tr.ReceiveEnvelope, tr.TransmitIntent):
        described = cls.identify

        def identify(self: Any, _describe: Any = described) -> _Described:
            return _Described(_describe, self)

        cls.identify = identify
        cls._vertebra_lazy = True
    tr.ReceiveEnvelope.__str__ = lambda self: str(self.identify())


#: Seconds between two scans of a transport's queued transmits for expired ones.
EXPIRY_SCAN = 0.05


def rare_expiry_scans() -> None:
    """Let Thespian look for expired queued transmits at most every `EXPIRY_SCAN` seconds
    instead of on every send and every completed transmit.

    Past its 20 transmits in flight a process queues the rest, and each send, each ack
    and each queued send let go re-checks the expiry of every queued transmit (a
    partition of the whole queue, and a timer view per transmit): quadratic in the
    queue. The Runner of 200 busy sessions, whose queue is long, spent about a third of
    its time there and was the whole system's bottleneck. A transmit expires after
    minutes (Thespian's default: 5), so finding it up to `EXPIRY_SCAN` later changes
    nothing. ``VERTEBRA_EXPIRY=thespian`` restores the scan on every call. Idempotent;
    affects every process forked after it.
    """
    if os.environ.get("VERTEBRA_EXPIRY") == "thespian":
        return
    from thespian.system.transport.asyncTransportBase import asyncTransportBase as atb

    if getattr(atb, "_vertebra_expiry", False):
        return
    scan = atb._complete_expired_intents

    def _complete_expired_intents(self: Any) -> tuple[int, bool]:
        now = time.monotonic()
        if now < getattr(self, "_vertebra_next_scan", 0.0):
            return len(self._aTB_queuedPendingTransmits), False
        self._vertebra_next_scan = now + EXPIRY_SCAN
        return scan(self)  # type: ignore[no-any-return]

    atb._complete_expired_intents = _complete_expired_intents
    atb._vertebra_expiry = True


#: Seconds a connection between two actor processes stays open without a message.
IDLE_SOCKET = 15.0


def short_idle_sockets() -> None:
    """Close a connection between two actor processes after `IDLE_SOCKET` seconds
    without a message, not after Thespian's 20 minutes (7 on the receiving side).

    Every pass of Thespian's TCP loop walks every open connection of its process in
    Python, so a Runner that once spoke to 1,000 sessions pays for 2,000 idle sockets
    on every message to any of them: one session's ack took 30 ms at the median beside
    1,000 quiet ones, and 3 ms with their connections closed. A session that talks keeps
    its connection; one quiet for longer pays one loopback connect on its next message.
    ``VERTEBRA_IDLE_SOCKETS=thespian`` keeps Thespian's periods. Idempotent; affects
    every process forked after it.
    """
    if os.environ.get("VERTEBRA_IDLE_SOCKETS") == "thespian":
        return
    from thespian.system.transport import TCPTransport as tt

    period = timedelta(seconds=IDLE_SOCKET)
    tt.MAX_IDLE_SOCKET_PERIOD = min(tt.MAX_IDLE_SOCKET_PERIOD, period)
    tt.MAX_INCOMING_SOCKET_PERIOD = min(tt.MAX_INCOMING_SOCKET_PERIOD, period)


def orphan_guard() -> None:
    """Make an actor system started from this process die with it.

    Thespian's admin double-forks into a session of its own, so it and every actor
    process would outlive a killed daemon and go on serving (and writing the spine). The
    admin gets a watchdog thread that kills the whole process group within
    `WATCHDOG_INTERVAL` of the starting process's death, and every actor and logger
    process asks for SIGKILL when its parent dies, so a killed admin or Runner takes its
    children along. Idempotent; call before creating a multiproc actor system.
    """
    global _guarded
    if _guarded:
        return
    lean_select()
    lazy_descriptions()
    rare_expiry_scans()
    short_idle_sockets()
    from thespian.system import multiprocCommon as mc

    mc.startAdmin = _noting_starter(mc.startAdmin)
    mc.startChild = _child_start(mc.startChild)
    mc.startupASLogger = _logger_start(mc.startupASLogger)
    mc.MultiProcAdmin = _watching_admin(mc.MultiProcAdmin)
    _guarded = True


def _noting_starter(original_admin: Any) -> Any:
    def start_admin(*args: Any, **kwargs: Any) -> Any:
        global _starter_pid
        # Runs in the first child, before Thespian's second fork: the parent is the starter.
        _starter_pid = os.getppid()
        return original_admin(*args, **kwargs)

    return start_admin


def _child_start(original_child: Any) -> Any:
    def start_child(*args: Any, **kwargs: Any) -> Any:
        die_with_parent()
        # What the child inherited stays shared with its parent only while nothing writes
        # to it; a garbage collection pass writes to every object it traverses. Frozen,
        # the inherited objects are never traversed (measured: about 1 MB less private
        # memory per session process).
        gc.freeze()
        # The child's whole life runs above the frames it was forked from; give it a
        # frame-stack chunk of its own (see actors._runtime.forking).
        return on_fresh_chunk(original_child, *args, **kwargs)

    return start_child


def _logger_start(original_logger: Any) -> Any:
    def start_logger(*args: Any, **kwargs: Any) -> Any:
        die_with_parent()
        return original_logger(*args, **kwargs)

    return start_logger


def _watching_admin(base: Any) -> Any:
    """Thespian's admin class, with the watchdog of the starting process."""

    class MultiProcAdmin(base):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            if _starter_pid > 1 and os.path.isdir(f"/proc/{_starter_pid}"):
                threading.Thread(
                    target=_watch_starter, args=(_starter_pid,), daemon=True, name="watchdog"
                ).start()

    return MultiProcAdmin


def log_defs(data_dir: str | None = None, level: int = logging.WARNING) -> dict[str, Any]:
    """A logging dict for Thespian: warnings to a file in the data directory, or nowhere.

    ``logDefs=False`` crashes multiproc bases, so quiet logging is a real dict. With a data
    directory, Thespian's internal log goes to the same file (`route_thespian_log`).
    """
    from .logformat import json_logs, log_level

    level = log_level(level)
    handlers: dict[str, Any] = {"null": {"class": "logging.NullHandler"}}
    root: dict[str, Any] = {"handlers": ["null"], "level": "CRITICAL"}
    if data_dir is not None:
        from spine import private_file

        private_file(os.path.join(data_dir, "vertebra.log"))
        route_thespian_log(data_dir)
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
            "json": {"()": "actors._runtime.logformat.JsonFormatter"},
        },
        "handlers": handlers,
        "root": root,
    }


def data_identity(data_dir: str) -> str:
    """What names a data directory on this machine, however it is spelled (device and
    inode): an attaching client compares its own with the one its daemon reports."""
    try:
        st = os.stat(data_dir)
    except OSError:
        return ""
    return f"{st.st_dev}:{st.st_ino}"


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
    from spine import private_file

    from .logformat import JsonFormatter, json_logs, log_level

    handler = logging.FileHandler(private_file(os.path.join(data_dir, "vertebra.log")))
    handler.setFormatter(
        JsonFormatter()
        if json_logs()
        else logging.Formatter(f"%(asctime)s %(levelname)s %(name)s[{os.getpid()}] %(message)s")
    )
    lg.addHandler(handler)
    lg.setLevel(log_level())
    lg.propagate = False
    route_thespian_log(data_dir)
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
