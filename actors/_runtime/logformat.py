"""Structured logs: one JSON object per line.

`JsonFormatter` writes ``time``, ``level``, ``logger``, ``pid``, ``message`` and, when a
record carries them (``extra=``) or its process set them (`set_context`), ``session``,
``seq``, ``kind`` and ``incarnation``; an exception's traceback goes in ``exc``. The daemon
selects it with ``vertebra serve --log-format json``, which sets `FORMAT_ENV` so every
actor process formats the same way.

A session process sets its session and incarnation once and its last stored seq and kind
after each append (`set_context`): every record made in that process then carries them,
whichever logger made it, also when Thespian forwards it to its logger process (the
fields travel in the record).
"""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime
from typing import Any

#: ``json`` selects `JsonFormatter` for the data directory's log; anything else is text.
FORMAT_ENV = "VERTEBRA_LOG_FORMAT"
#: The level of the data directory's log (a name such as ``INFO``; default ``WARNING``).
LEVEL_ENV = "VERTEBRA_LOG_LEVEL"
FIELDS = ("session", "seq", "kind", "incarnation")
FORMATS = ("text", "json")
#: The record attribute holding the process's context (`set_context`).
CONTEXT_ATTR = "vertebra_context"

_context: dict[str, Any] = {}
#: Context for the next process this one forks, until that process sets its own:
#: (the forking process's pid, fields).
_child: tuple[int, dict[str, Any]] = (0, {})
_factory_pid = 0


def _install() -> None:
    global _factory_pid
    if _factory_pid == os.getpid():
        return
    _factory_pid = os.getpid()
    base = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = base(*args, **kwargs)
        ctx = _context or (_child[1] if _child[0] not in (0, os.getpid()) else None)
        if ctx:
            # A copy: the record may be formatted (or pickled to Thespian's logger
            # process) after the context moved on.
            setattr(record, CONTEXT_ATTR, dict(ctx))
        return record

    logging.setLogRecordFactory(factory)


def set_context(**fields: Any) -> None:
    """Add ``fields`` (some of `FIELDS`) to every log record this process makes from now
    on; a record's own ``extra=`` fields win."""
    _context.update(fields)
    _install()


def child_context(**fields: Any) -> None:
    """Give the process forked next the context ``fields`` from its first record on (the
    Runner calls this before it creates a session actor: Thespian logs the actor's start
    before the actor has had a message), without adding them to this process's records."""
    global _child
    _child = (os.getpid(), dict(fields))
    _install()


def context_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The `FIELDS` of ``record``: its own, else its process's context when it was made."""
    ctx = getattr(record, CONTEXT_ATTR, None) or {}
    out = {}
    for k in FIELDS:
        if hasattr(record, k):
            out[k] = getattr(record, k)
        elif k in ctx:
            out[k] = ctx[k]
    return out


def json_logs() -> bool:
    return os.environ.get(FORMAT_ENV, "").strip().lower() == "json"


def log_level(default: int = logging.WARNING) -> int:
    """The configured level, or ``default`` when unset or not a level's name."""
    name = os.environ.get(LEVEL_ENV, "").strip().upper()
    value = logging.getLevelName(name) if name else default
    return value if isinstance(value, int) else default


def _record(time: datetime, level: str, logger: str, pid: int, message: str) -> dict[str, Any]:
    return {
        "time": time.isoformat(timespec="microseconds").replace("+00:00", "Z"),
        "level": level,
        "logger": logger,
        "pid": pid,
        "message": message,
    }


def json_record(level: str, logger: str, message: str, **fields: Any) -> str:
    """One log line as JSON (for writers that are not `logging` handlers)."""
    out = _record(datetime.now(UTC), level, logger, os.getpid(), message)
    out.update({k: v for k, v in fields.items() if v is not None and v != ""})
    return json.dumps(out, ensure_ascii=False, default=str)


class JsonFormatter(logging.Formatter):
    """A `logging` formatter writing one JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        out = _record(
            datetime.fromtimestamp(record.created, UTC),
            record.levelname,
            record.name,
            record.process or 0,
            record.getMessage(),
        )
        out.update(context_fields(record))
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc"] = record.exc_text  # formatted before Thespian forwarded the record
        return json.dumps(out, ensure_ascii=False, default=str)
