"""Test-only interceptors and agents; importable by actor processes (they are forked)."""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
from collections.abc import Iterator, Sequence

from actors.agents import ModelFactory
from actors.host import Host
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


class _PlainAgent:
    """An agent of the caller's own: it writes its answer and knows nothing of governance
    (it never reports the model call the session admitted for its turn)."""

    def run(self, turn, out):  # type: ignore[no-untyped-def]
        if turn.text == "fail":
            raise RuntimeError("the plain agent failed")
        out.text(f"plain: {turn.text}")
        return "end_turn"


class PlainFactory:
    """A factory of the caller's own (any object with ``build``), building `_PlainAgent`."""

    def build(self, spec, session_id):  # type: ignore[no-untyped-def]
        return _PlainAgent()


def _deploy(args):  # type: ignore[no-untyped-def]
    """Appends a line per run to the file named by ``args["log"]``: runs are counted."""
    with open(args["log"], "a") as f:
        f.write(f"deploy {args.get('target', '')}\n")
    return f"deployed {args.get('target', '')}"


def governed_tools():  # type: ignore[no-untyped-def]
    """The built-ins plus ``deploy`` (needs a human's approval every time) and ``shell``
    (needs elevated trust and the exec capability)."""
    from actors.agents import Tool, builtin_tools
    from actors.agents.governance import Requirement

    params = {"type": "object"}
    deploy = Tool(
        name="deploy",
        description="Deploy a target.",
        parameters=params,
        fn=_deploy,
        requirement=Requirement(approval=True),
    )
    shell = Tool(
        name="shell",
        description="Run a command.",
        parameters=params,
        fn=_deploy,
        requirement=Requirement(trust="elevated", capabilities=frozenset({"exec"})),
    )
    return builtin_tools().with_tool(deploy).with_tool(shell)


class CountingFactory:
    """The default factory, appending a line to ``path`` per agent built (builds are
    counted across processes); ``fail`` makes every build raise instead."""

    def __init__(self, path: str, fail: bool = False) -> None:
        self.path = path
        self.fail = fail

    def build(self, spec, session_id):  # type: ignore[no-untyped-def]
        from actors.agents import ModelFactory

        with open(self.path, "a") as f:
            f.write("build\n")
        if self.fail:
            raise RuntimeError("no model")
        return ModelFactory().build(spec, session_id)


@contextlib.contextmanager
def model_host(data: pathlib.Path, servers: Sequence[str] = ()) -> Iterator[Host]:
    """A multiproc Host whose model factory retries fast, its sessions allowed to name
    ``servers``, closed after the block."""
    h = Host(
        data,
        base="multiprocTCPBase",
        timeout=20,
        factory=ModelFactory(backoff=0.01),
        model_servers=servers,
    )
    try:
        yield h
    finally:
        h.close()


def _stamp(args):  # type: ignore[no-untyped-def]
    """Appends a line per run to the file named by ``args["log"]`` and answers something
    new each time: a tool with a side effect and no deterministic result."""
    import uuid

    with open(args["log"], "a") as f:
        f.write("stamp\n")
    return f"stamp {uuid.uuid4().hex}"


def stamping_tools():  # type: ignore[no-untyped-def]
    """The built-ins plus ``stamp`` (free)."""
    from actors.agents import Tool, builtin_tools

    stamp = Tool(
        name="stamp",
        description="Stamp something.",
        parameters={"type": "object"},
        fn=_stamp,
    )
    return builtin_tools().with_tool(stamp)
