"""Structured logs: one JSON object per line.

`JsonFormatter` writes ``time``, ``level``, ``logger``, ``pid``, ``message`` and, when a
record carries them (``extra=``), ``session``, ``seq``, ``kind`` and ``incarnation``; an
exception's traceback goes in ``exc``. The daemon selects it with ``vertebra serve
--log-format json``, which sets `FORMAT_ENV` so every actor process formats the same way.
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
        for k in FIELDS:
            if hasattr(record, k):
                out[k] = getattr(record, k)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)
