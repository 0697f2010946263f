"""Thespian's internal log (``thesplog``) routed to the data directory's ``vertebra.log``,
at the configured level and in the configured format, from every process of a system."""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

_thespian_file = ""
_thespian_handler: tuple[int, str, logging.Handler] | None = None
_thespian_lock = threading.Lock()
_thespian_busy = threading.local()
_thespian_routed = False
#: The configured level and the setting it was read from: Thespian logs at debug level on
#: every message it moves, so the check that drops those runs thousands of times a second.
_thespian_level: tuple[object, int] = (object(), 0)


def _thespian_record(level: int, msg: Any, args: tuple[Any, ...]) -> None:
    """Write one of Thespian's internal log lines (``thesplog``) to the data directory's
    log as a record of logger ``thespian``, if at or above the configured level.

    Written by a handler of this process's own, never through `logging`'s tree: in an
    actor process that tree forwards over Thespian's transport, which logs through
    ``thesplog`` itself (Thespian warns of the storm that makes).
    """
    global _thespian_handler, _thespian_level
    setting = os.environ.get("VERTEBRA_LOG_LEVEL")
    if _thespian_level[0] != setting:
        from .logformat import log_level

        _thespian_level = (setting, log_level())
    if not _thespian_file or level < _thespian_level[1] or getattr(_thespian_busy, "on", False):
        return
    from .logformat import JsonFormatter, json_logs

    _thespian_busy.on = True
    try:
        with _thespian_lock:
            current = (os.getpid(), _thespian_file)
            if _thespian_handler is None or _thespian_handler[:2] != current:
                # After a fork the parent's handler (and its lock) is not this process's;
                # a process that routed to another directory since writes there now.
                if _thespian_handler is not None and _thespian_handler[0] == os.getpid():
                    _thespian_handler[2].close()
                handler: logging.Handler = logging.FileHandler(_thespian_file)
                handler.setFormatter(
                    JsonFormatter()
                    if json_logs()
                    else logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")
                )
                _thespian_handler = (*current, handler)
            handler = _thespian_handler[2]
        make = logging.getLogRecordFactory()
        handler.handle(make("thespian", level, "", 0, str(msg), args or None, None))
    except Exception:
        pass  # Thespian's own log must never break Thespian
    finally:
        _thespian_busy.on = False


def _thesplog(msg: Any, *args: Any, **kw: Any) -> None:
    # Runs with the globals of Thespian's utilis module (its code replaces thesplog's).
    import actors._runtime.thespian_log

    actors._runtime.thespian_log._thespian_record(kw.get("level", logging.INFO), msg, args)


def route_thespian_log(data_dir: str) -> None:
    """Send Thespian's internal log (``thesplog``, otherwise a file of its own in the
    temporary directory, or nothing) to ``vertebra.log`` in ``data_dir`` at the configured
    level, in the configured format, from this process and every process it forks.

    Some twenty Thespian modules bind ``thesplog`` by name at import, so the function's
    code is replaced rather than the module attribute: every binding then runs ours.
    """
    global _thespian_file, _thespian_routed
    _thespian_file = os.path.join(data_dir, "vertebra.log")
    if _thespian_routed:
        return
    from thespian.system import utilis

    utilis.thesplog.__code__ = _thesplog.__code__
    _thespian_routed = True
