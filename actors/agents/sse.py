"""`SseDecoder`: server-sent events framed out of a byte stream (pure)."""

from __future__ import annotations

__all__ = ["SseDecoder"]


class SseDecoder:
    """Server-sent events from a byte stream: ``(event, data)`` per dispatched event.

    Lines end in LF, CR or CRLF; comment lines (``:``) are heartbeats and skipped;
    several ``data`` lines join with newlines, as the SSE grammar says.
    """

    def __init__(self) -> None:
        self._buf = b""
        self._event = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[tuple[str, str]]:
        buf = self._buf + chunk
        tail = b""
        if b"\r" in buf:
            if buf.endswith(b"\r"):
                # Perhaps the first half of a CRLF: keep it until the next read.
                buf, tail = buf[:-1], b"\r"
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        self._buf = lines.pop() + tail
        out: list[tuple[str, str]] = []
        for line in lines:
            self._line(line.decode("utf-8", "replace"), out)
        return out

    def close(self) -> list[tuple[str, str]]:
        """Dispatch what an unterminated last event holds."""
        out: list[tuple[str, str]] = []
        if self._buf.strip(b"\r"):
            self._line(self._buf.strip(b"\r").decode("utf-8", "replace"), out)
        self._buf = b""
        self._line("", out)
        return out

    def _line(self, line: str, out: list[tuple[str, str]]) -> None:
        if line.startswith("data: "):
            self._data.append(line[6:])
            return
        if not line:
            if self._data:
                out.append((self._event or "message", "\n".join(self._data)))
            self._event = ""
            self._data = []
            return
        if line.startswith(":"):
            return
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
