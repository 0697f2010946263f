"""MCP benchmark: the added latency of a tool call through vertebra's MCP client over a
direct call of the same server with the SDK's own ``Client``, in one run.

For stdio and for Streamable HTTP on loopback, the test suite's server (``tests/
mcp_server.py``) runs twice: one instance behind a bare SDK ``Client``, one behind the
tool vertebra registers for it (``McpCall``: the per-process connection, the idempotency
key in ``_meta``, the rendering of the result into text and its stored record). Both are
called from the provider loop, as a turn calls them, in alternating rounds; the figure is
the difference of the medians (targets: at most 2 ms for stdio, 5 ms for HTTP). The
turn's governance round trip is not part of it: every tool has that.

Run ``python bench/mcp.py`` (``--quick`` for a smoke run). Every server it starts is
stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

from actors._runtime.system import free_port  # noqa: E402
from actors.agents.loop import provider_loop  # noqa: E402
from actors.agents.mcp_client import McpCall, close_all  # noqa: E402
from actors.agents.mcp_config import ServerConfig  # noqa: E402
from actors.agents.tools import ToolContext  # noqa: E402

SERVER = os.path.join(os.path.dirname(_HERE), "tests", "mcp_server.py")


def _http_server() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, SERVER, "http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc, f"http://127.0.0.1:{port}/mcp"
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the HTTP server did not start")


async def _rounds(direct_target: Any, ours: McpCall, n: int) -> tuple[list[float], list[float]]:
    ctx = ToolContext(emit=lambda ev: None, session_id="bench", tool_use_id="t")
    direct: list[float] = []
    mine: list[float] = []
    async with Client(direct_target, cache=None) as client:
        for i in range(n + 20):
            args = {"text": f"ping {i}"}
            # Each goes first every other round: neither gains from the other's wake-up.
            for first in (i % 2 == 0, i % 2 == 1):
                t0 = time.perf_counter()
                if first:
                    await client.call_tool("echo", args)
                else:
                    await ours(args, ctx)
                took = time.perf_counter() - t0
                if i >= 20:  # warm-up: both connections started, code paths hot
                    (direct if first else mine).append(took)
    return direct, mine


def _report(name: str, direct: list[float], mine: list[float], target_ms: float) -> None:
    d, m = statistics.median(direct) * 1e3, statistics.median(mine) * 1e3
    added = m - d
    verdict = "ok" if added <= target_ms else "over target"
    print(
        f"{name:6} direct p50 {d:7.3f} ms   vertebra p50 {m:7.3f} ms   "
        f"added {added:+.3f} ms (target <= {target_ms:g} ms: {verdict})"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    n = 50 if ap.parse_args().quick else 500
    loop = provider_loop()
    stdio = StdioServerParameters(command=sys.executable, args=[SERVER])
    server = ServerConfig(name="bench", command=sys.executable, args=(SERVER,))
    fut = asyncio.run_coroutine_threadsafe(_rounds(stdio, McpCall(server, "echo", {}), n), loop)
    _report("stdio", *fut.result(600), target_ms=2.0)
    close_all()
    procs = [_http_server(), _http_server()]
    try:
        (_, url_direct), (_, url_ours) = procs
        http = ServerConfig(name="benchhttp", url=url_ours, egress_allow=("127.0.0.1",))
        ours = McpCall(http, "echo", {})
        fut = asyncio.run_coroutine_threadsafe(_rounds(url_direct, ours, n), loop)
        _report("http", *fut.result(600), target_ms=5.0)
    finally:
        close_all()
        for proc, _ in procs:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
