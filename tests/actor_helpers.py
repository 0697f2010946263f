"""Test-only interceptors and agents; importable by actor processes (they are forked)."""

from __future__ import annotations

import os
import signal

from actors.interceptors import Ingress, InterceptResult, SessionView


class BoomInterceptor:
    """Raises inside the session's handler on "/boom": a poison message."""

    def intercept(self, event: Ingress, session: SessionView) -> InterceptResult:
        if event.text == "/boom":
            raise RuntimeError("boom")
        return InterceptResult(event=event)


class SuicideInterceptor:
    """Kills its own process on "/die": an ingress that crashes the session process."""

    def intercept(self, event: Ingress, session: SessionView) -> InterceptResult:
        if event.text == "/die":
            os.kill(os.getpid(), signal.SIGKILL)
        return InterceptResult(event=event)


class FailingFactory:
    """A factory whose agents cannot be built."""

    def build(self, spec, session_id):  # type: ignore[no-untyped-def]
        raise RuntimeError("no model")
