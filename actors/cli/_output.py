"""Where a command writes: `Out` (data to stdout, progress and errors to stderr) and
`JsonOut`, the daemon's output under ``serve --log-format json``."""

from __future__ import annotations

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
        from ..logformat import json_record

        print(json_record("INFO", "vertebra.daemon", text), file=self.stdout, flush=True)

    def note(self, text: str) -> None:
        from ..logformat import json_record

        print(json_record("WARNING", "vertebra.daemon", text), file=self.stderr, flush=True)

    def event(self, sid: str, ev: Any, text: str) -> None:
        from ..logformat import json_record

        line = json_record(
            "INFO", "vertebra.events", text, session=sid, seq=ev.seq, kind=ev.kind, turn=ev.turn
        )
        print(line, file=self.stdout, flush=True)


__all__ = ["JsonOut", "Out"]
