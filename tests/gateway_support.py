"""Test support for the HTTP gateway: a running gateway over a real Host, and an SSE reader."""

from __future__ import annotations

import contextlib
import pathlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
from conftest import wait_for

from actors._runtime.system import processes_in_session
from actors.gateway import GatewayHandle, start_gateway
from actors.host import SYSTEM_SESSIONS


@contextlib.contextmanager
def running_gateway(data: pathlib.Path, **options: Any) -> Iterator[GatewayHandle]:
    """A gateway over its own multiproc Host on loopback; afterwards no process of its
    actor system may be left."""
    before = set(SYSTEM_SESSIONS)
    options.setdefault("timeout", 20)
    gw = start_gateway(data, "127.0.0.1:0", **options)
    try:
        yield gw
    finally:
        gw.stop()
        for sid in SYSTEM_SESSIONS - before:
            wait_for(lambda sid=sid: not processes_in_session(sid), timeout=15)


def client(gw: GatewayHandle, token: str | None = None) -> httpx.Client:
    return httpx.Client(
        base_url=gw.url,
        headers={"Authorization": f"Bearer {token or gw.token}"},
        timeout=httpx.Timeout(30.0),
    )


class SseReader:
    """Parses a streamed text/event-stream response into events and comments."""

    def __init__(self, response: httpx.Response) -> None:
        self.lines = response.iter_lines()
        self.comments: list[str] = []
        self.retry: int | None = None

    def next(self) -> dict[str, Any]:
        """The next dispatched event: ``id`` (None if absent), ``event`` and ``data``."""
        ev: dict[str, Any] = {"id": None, "event": "message", "data": []}
        for line in self.lines:
            if line == "":
                if ev["data"]:
                    ev["data"] = "\n".join(ev["data"])
                    return ev
                continue
            if line.startswith(":"):
                self.comments.append(line[1:].strip())
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "data":
                ev["data"].append(value)
            elif name in ("id", "event"):
                ev[name] = value
            elif name == "retry":
                self.retry = int(value)
        raise EOFError("the stream ended")

    def until(
        self, stop: Callable[[dict[str, Any]], bool], timeout: float = 30.0
    ) -> list[dict[str, Any]]:
        """Events up to and including the first for which ``stop`` is true."""
        deadline = time.monotonic() + timeout
        out = []
        while time.monotonic() < deadline:
            ev = self.next()
            out.append(ev)
            if stop(ev):
                return out
        raise AssertionError(f"no matching event within {timeout}s; got {out[-5:]}")
