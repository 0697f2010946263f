"""MCP servers' tools for a session's turns: one connection per (process, server) through
the official SDK, opened on first use, on the process's provider loop.

A stdio server is launched by the daemon from the operator's configuration only, under a
small launcher that asks Linux to kill it when the session process that started it dies
(SIGKILL included); it also sees its stdin close then. A Streamable HTTP server's URL is
checked by the egress guard before every connection. A connection that broke (the server
exited) is opened again on the next use, at most once per `RETRY_AFTER` seconds.

Tools are listed once per connection and again after the server says its list changed
(``notifications/tools/list_changed``, or a ``subscriptions/listen`` event on a
2026-07-28 connection). Each call carries its idempotency key in ``_meta``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED

from spine import Event, Kind

from .base import AgentError
from .egress import resolve, verdict
from .mcp_config import McpConfigError, ServerConfig
from .mcp_elicit import Asker, bounded, current
from .mcp_results import IDEMPOTENCY_META, hints, idempotency_key, render
from .provider_loop import provider_loop
from .tools import Tool, ToolContext, ToolError, ToolOutput, ToolRegistry

__all__ = ["RETRY_AFTER", "Connection", "McpTools", "close_all", "connection"]

#: Seconds after a failed start before a server is started again.
RETRY_AFTER = 1.0
#: Seconds a server may take to start and answer the handshake.
START_TIMEOUT = 30.0

# Run by the launcher's own interpreter before the server's command replaces it.
_LAUNCH = (
    "import ctypes,os,signal,sys\n"
    "try:\n"
    " ctypes.CDLL(None).prctl(1,signal.SIGKILL,0,0,0)\n"
    "except (OSError,AttributeError):\n"
    " pass\n"
    "if os.getppid()!=int(sys.argv[1]):\n"
    " os._exit(1)\n"
    "os.execvp(sys.argv[2],sys.argv[2:])\n"
)


def _stdio(server: ServerConfig) -> Any:
    from mcp.client.stdio import StdioServerParameters, get_default_environment

    env = get_default_environment()
    for name in server.env:
        value = os.environ.get(name)
        if value is None:
            raise McpConfigError(
                f"MCP server {server.name!r}: the environment variable {name} (env) is not "
                "set in the daemon's environment"
            )
        env[name] = value
    return StdioServerParameters(
        command=sys.executable,
        args=["-c", _LAUNCH, str(os.getpid()), server.command, *server.args],
        env=env,
        cwd=server.cwd,
    )


def _http(server: ServerConfig, emit: Callable[[Event], None]) -> tuple[Any, Any]:
    """The transport to ``server`` and the HTTP client under it (the SDK leaves closing
    a client it was given to its owner)."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    parts = urlsplit(server.url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    d = verdict(host, resolve(host, port), server.egress_allow)
    emit(Event(kind=Kind.EGRESS, host=d.host, allowed=d.allowed, reason=d.reason))
    if not d.allowed:
        raise AgentError(f"MCP server {server.name!r}: egress to {host} refused: {d.reason}")
    headers = {}
    for header, name in server.headers.items():
        value = os.environ.get(name)
        if value is None:
            raise AgentError(
                f"MCP server {server.name!r}: the environment variable {name} "
                f"(headers.{header}) is not set in the daemon's environment"
            )
        headers[header] = value
    client = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0))
    return streamable_http_client(server.url, http_client=client), client


class Connection:
    """One server's session on this process's provider loop; every method runs there."""

    def __init__(self, server: ServerConfig) -> None:
        self.server = server
        self.client: Any = None
        self.tools: tuple[Any, ...] | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._error: BaseException | None = None
        self._failed_at = 0.0
        #: The calls in flight, each with its way to a human (a server may ask one).
        self.in_flight: list[Asker] = []

    async def open(self, emit: Callable[[Event], None]) -> Any:
        """The live client, started when there is none (or the last one ended)."""
        if self._task is not None and self._task.done():
            self._task = None
        if self._task is None:
            wait = self._failed_at + RETRY_AFTER - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
        # Another call may have started it while this one waited.
        if self._task is None:
            self._ready, self._stop, self._error, self.tools = (
                asyncio.Event(),
                asyncio.Event(),
                None,
                None,
            )
            self._task = asyncio.get_running_loop().create_task(
                self._own(emit, self._ready, self._stop)
            )
        try:
            await asyncio.wait_for(self._ready.wait(), START_TIMEOUT)
        except TimeoutError:
            await self.close()
            raise AgentError(
                f"MCP server {self.server.name!r} did not start within {START_TIMEOUT:g}s"
            ) from None
        if self.client is None:
            why = self._error
            raise AgentError(
                f"MCP server {self.server.name!r} could not be started: {type(why).__name__}: {why}"
            )
        return self.client

    async def _own(
        self, emit: Callable[[Event], None], ready: asyncio.Event, stop: asyncio.Event
    ) -> None:
        """Hold the client's context for the connection's life (the SDK's task groups
        must be entered and left by one task). ``ready`` and ``stop`` are this start's
        own: a late end of an older start must not touch a newer one."""
        from mcp import Client

        http = None
        mine: Any = None
        try:
            s = self.server
            if s.transport == "stdio":
                target = _stdio(s)
            else:
                target, http = _http(s, emit)
            async with Client(
                target,
                cache=None,
                message_handler=self._on_message,
                elicitation_callback=self._on_elicit,
            ) as client:
                mine = self.client = client
                ready.set()
                await self._run(client, stop)
        except BaseException as exc:  # reported to whoever waits for the connection
            if self._ready is ready:
                self._error = exc
                self._failed_at = time.monotonic()
        finally:
            if self.client is mine:
                self.client = None
            ready.set()
            if http is not None:
                with contextlib.suppress(Exception):
                    await http.aclose()

    async def _run(self, client: Any, stop: asyncio.Event) -> None:
        """Until closed; on a 2026-07-28 connection, listen for tool-list changes."""
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        if client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            await stop.wait()
            return

        async def listen() -> None:
            with contextlib.suppress(Exception):
                async with client.listen(tools_list_changed=True) as sub:
                    async for _event in sub:
                        self.tools = None

        watcher = asyncio.get_running_loop().create_task(listen())
        try:
            await stop.wait()
        finally:
            watcher.cancel()
            with contextlib.suppress(BaseException):
                await watcher

    async def _on_message(self, message: Any) -> None:
        if getattr(message, "method", "") == "notifications/tools/list_changed":
            self.tools = None

    async def _on_elicit(self, context: Any, params: Any) -> Any:
        from mcp_types import ElicitResult

        asker = current(self.in_flight)
        if asker is None:  # no call, or several, to tie the question to
            return ElicitResult(action="cancel")
        return await asker.elicit(params)

    async def list_tools(self, emit: Callable[[Event], None]) -> tuple[Any, ...]:
        client = await self.open(emit)
        if self.tools is None:
            listed: list[Any] = []
            cursor = None
            for _page in range(100):
                page = await client.list_tools(cursor=cursor, cache_mode="refresh")
                listed.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
            self.tools = tuple(listed)
        return self.tools

    async def call(self, name: str, args: Mapping[str, Any], key: str, asker: Asker) -> Any:
        client = await self.open(asker.ctx.emit)
        self.in_flight.append(asker)
        try:
            with asker:
                sent = client.call_tool(name, dict(args), meta={IDEMPOTENCY_META: key})
                return await bounded(sent, self.server.timeout, asker)
        finally:
            self.in_flight.remove(asker)

    async def close(self) -> None:
        """End the connection (a stdio server exits); the next use starts it again."""
        self._stop.set()
        task = self._task
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), 5.0)
            except (TimeoutError, asyncio.CancelledError):
                task.cancel()


_connections: dict[str, Connection] = {}


def _forget_in_child() -> None:
    # A forked process shares none of its parent's servers (nor their loop).
    _connections.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def connection(server: ServerConfig) -> Connection:
    """This process's connection to ``server`` (a changed configuration gets a new one)."""
    c = _connections.get(server.name)
    if c is None or c.server != server:
        c = Connection(server)
        _connections[server.name] = c
    return c


def close_all(timeout: float = 10.0) -> None:
    """Close every connection of this process (its stdio servers exit), from any thread
    but the provider loop's."""
    conns = list(_connections.values())
    _connections.clear()
    if not conns:
        return

    async def close() -> None:
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)

    fut = asyncio.run_coroutine_threadsafe(close(), provider_loop())
    with contextlib.suppress(Exception):
        fut.result(timeout)


class McpCall:
    """A tool's callable: call ``tool`` on ``server`` (awaited on the provider loop, so
    an interrupt or the timeout cancels the request)."""

    def __init__(
        self, server: ServerConfig, tool: str, hinted: Mapping[str, bool], task: bool = False
    ) -> None:
        self.server = server
        self.tool = tool
        self.hints = dict(hinted)
        #: The server runs this tool only as a task (``execution.taskSupport: required``).
        self.task = task

    async def __call__(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        if self.task:
            # Refused here, so nothing reaches the server and nothing is in doubt.
            raise ToolError(
                f"MCP server {self.server.name!r}: {self.tool} runs only as an MCP task, "
                "and this client cannot run tasks (the MCP SDK it is built on has no tasks client)"
            )
        # The effect ledger's key for the call (the same when a crash makes it run again);
        # derived here where no session runs the turn.
        key = ctx.idempotency_key or idempotency_key(ctx.session_id, ctx.tool_use_id)
        record: dict[str, Any] = {
            "server": self.server.name,
            "tool": self.tool,
            "idempotencyKey": key,
            "inDoubt": self.server.policy(self.tool).in_doubt,
        }
        if self.hints:
            record["hints"] = self.hints
        conn = connection(self.server)
        asker = Asker(ctx, self.server.name, self.tool)
        try:
            result = await conn.call(self.tool, args, key, asker)
        except AgentError as exc:  # not started: nothing was sent
            raise ToolError(str(exc)) from None
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:  # the server's own answer, not a doubt
                raise ToolError(f"MCP server {self.server.name!r}: {self.tool}: {exc}") from None
            return await self._unknown(conn, exc, record)
        except Exception as exc:
            return await self._unknown(conn, exc, record)
        text, is_error, stored = render(result)
        return ToolOutput(text=text, is_error=is_error, extra={"mcp": {**record, **stored}})

    async def _unknown(
        self, conn: Connection, exc: BaseException, record: Mapping[str, Any]
    ) -> ToolOutput:
        """A call that was sent and got no answer: the server may have done it.
        Never sent again here; a broken connection is started afresh for the next call
        (a timeout keeps it)."""
        if not isinstance(exc, TimeoutError):
            await conn.close()
        why = (
            f"did not answer within {self.server.timeout:g}s (timeout)"
            if isinstance(exc, TimeoutError)
            else f"failed: {type(exc).__name__}: {exc}"
        )
        text = f"MCP server {self.server.name!r}: {self.tool} {why}; its outcome is unknown"
        return ToolOutput(text=text, is_error=True, extra={"mcp": {**record, "outcome": "unknown"}})


class McpTools:
    """The tools of the servers a session picked, added to its registry at each turn's
    start (listed again only when a server said its list changed)."""

    def __init__(self, servers: tuple[ServerConfig, ...]) -> None:
        self.servers = servers

    async def registry(self, base: ToolRegistry, emit: Callable[[Event], None]) -> ToolRegistry:
        reg = base
        for server in self.servers:
            for t in await _listed(server, emit):
                reg = reg.with_tool(_tool(server, t))
        return reg


async def _listed(server: ServerConfig, emit: Callable[[Event], None]) -> tuple[Any, ...]:
    """The server's tools; listing again on a fresh connection once if the first one
    broke (a listing changes nothing, so it may be repeated)."""
    conn = connection(server)
    try:
        return await conn.list_tools(emit)
    except AgentError:
        raise
    except Exception as exc:
        await conn.close()
        try:
            return await connection(server).list_tools(emit)
        except AgentError:
            raise
        except Exception:
            raise AgentError(
                f"MCP server {server.name!r}: its tools could not be listed: "
                f"{type(exc).__name__}: {exc}"
            ) from None


def _tool(server: ServerConfig, t: Any) -> Tool:
    hinted = hints(t.annotations)
    description = t.description or t.title or t.name
    return Tool(
        name=f"{server.name}.{t.name}",
        description=description,
        parameters=dict(t.input_schema or {"type": "object", "properties": {}}),
        fn=McpCall(server, t.name, hinted, _task_only(t)),
        requirement=server.policy(t.name).requirement(),
        idempotent=server.policy(t.name).in_doubt == "retry",
        context=True,
        asynchronous=True,
    )


def _task_only(t: Any) -> bool:
    execution = getattr(t, "execution", None)
    return getattr(execution, "task_support", None) == "required"
