"""Where a command writes: `Out` (data to stdout, progress and errors to stderr) and
`JsonOut`, the daemon's output under ``serve --log-format json``; `interrupted`, how a
command that follows a stream hears Ctrl-C."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import IO, Any

from ._format import Style


class Out:
    """Where a command writes: data to stdout, progress and errors to stderr."""

    def __init__(self, style: Style, stdout: IO[str], stderr: IO[str]) -> None:
        self.style = style
        self.stdout = stdout
        self.stderr = stderr

    def line(self, text: str = "") -> None:
        print(text, file=self.stdout, flush=True)

    def note(self, text: str) -> None:
        print(text, file=self.stderr, flush=True)


class JsonOut(Out):
    """The daemon's output under ``--log-format json``: one JSON object per line."""

    def line(self, text: str = "") -> None:
        from .._runtime.logformat import json_record

        print(json_record("INFO", "vertebra.daemon", text), file=self.stdout, flush=True)

    def note(self, text: str) -> None:
        from .._runtime.logformat import json_record

        print(json_record("WARNING", "vertebra.daemon", text), file=self.stderr, flush=True)

    def event(self, sid: str, ev: Any, text: str) -> None:
        from .._runtime.logformat import json_record

        line = json_record(
            "INFO", "vertebra.events", text, session=sid, seq=ev.seq, kind=ev.kind, turn=ev.turn
        )
        print(line, file=self.stdout, flush=True)


__all__ = ["JsonOut", "Out"]


@contextlib.contextmanager
def interrupted() -> Iterator[threading.Event]:
    """An event Ctrl-C sets, instead of a KeyboardInterrupt that could land anywhere (in
    a lock the subscription's threads share, say) and leave the command hanging."""
    stop = threading.Event()
    before = signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, before)
