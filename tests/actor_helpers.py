"""Test-only interceptors and agents; importable by actor processes (they are forked)."""

from __future__ import annotations

import os
import signal

from actors.interceptors import Emitter, Ingress, InterceptResult, SessionView


class CountingBoom:
    """Raises on "/boom" and appends a line to ``path`` for every call (calls are counted
    across processes)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def intercept(self, event: Ingress, session: SessionView, emitter: Emitter) -> InterceptResult:
        if event.text == "/boom":
            with open(self.path, "a") as f:
                f.write("call\n")
            raise RuntimeError("boom")
        return InterceptResult(event=event)


class SuicideInterceptor:
    """Kills its own process on "/die": an ingress that crashes the session process."""

    def intercept(self, event: Ingress, session: SessionView, emitter: Emitter) -> InterceptResult:
        if event.text == "/die":
            os.kill(os.getpid(), signal.SIGKILL)
        return InterceptResult(event=event)


class FailingFactory:
    """A factory whose agents cannot be built."""

    def build(self, spec, session_id):  # type: ignore[no-untyped-def]
        raise RuntimeError("no model")
