"""A real MCP server for the tests, built with the official SDK's ``MCPServer`` (the SDK's
FastMCP): ``python mcp_server.py`` serves stdio, ``python mcp_server.py http PORT``
Streamable HTTP on loopback. It writes its pid to ``$MCP_TEST_PIDFILE`` when set, so a
test can tell that the server is gone once its client stopped."""

from __future__ import annotations

import asyncio
import base64
import os
import sys
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import (
    ElicitRequest,
    ElicitRequestFormParams,
    ImageContent,
    InputRequiredResult,
    TextContent,
    ToolAnnotations,
)

app = MCPServer("notes")
_NOTES: dict[str, str] = {}
#: A 1x1 PNG: binary content the client must store as a reference, never its bytes.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


@app.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
def echo(text: str, ctx: Context) -> str:
    """Say the text back, with the idempotency key the client sent."""
    key = (ctx.request_context.meta or {}).get("io.vertebra/idempotency-key", "")
    return f"{text} (key {key})"


@app.tool(annotations=ToolAnnotations(destructive_hint=True))
def remember(name: str, text: str) -> dict[str, object]:
    """Store a note; answers with the number of notes as structured content."""
    _NOTES[name] = text
    return {"stored": name, "count": len(_NOTES)}


@app.tool()
def picture() -> list[object]:
    """A small picture and a caption."""
    data = base64.b64encode(PNG).decode()
    return [
        TextContent(type="text", text="a dot"),
        ImageContent(type="image", data=data, mime_type="image/png"),
    ]


@app.tool()
async def slow(seconds: float) -> str:
    """Wait, then answer."""
    await asyncio.sleep(seconds)
    return "done"


@app.tool()
async def slow_echo(text: str, seconds: float, ctx: Context) -> str:
    """Wait, then say the text back with the idempotency key the client sent."""
    key = (ctx.request_context.meta or {}).get("io.vertebra/idempotency-key", "")
    await asyncio.sleep(seconds)
    return f"{text} (key {key})"


#: What ``pick`` asks: one required string.
COLOR = {
    "type": "object",
    "properties": {"color": {"type": "string", "description": "a color"}},
    "required": ["color"],
}


@app.tool()
async def pick(ctx: Context) -> Any:
    """Ask the human which color (elicitation), then say the answer back. Each round it
    serves is appended to ``$MCP_TEST_CALLS`` when set."""
    calls = os.environ.get("MCP_TEST_CALLS")
    got = ctx.input_responses
    if calls:
        with open(calls, "a") as f:
            f.write("answered\n" if got else "asked\n")
    if not got:
        # The 2026-07-28 way: the question comes back as the call's result, the answer
        # with the call sent again.
        ask = ElicitRequestFormParams(message="Which color?", requested_schema=COLOR)
        return InputRequiredResult(
            input_requests={"color": ElicitRequest(params=ask)}, request_state="pick"
        )
    answer = got["color"]
    return f"{answer.action} {answer.content}"  # type: ignore[union-attr]


def _extra() -> str:
    """A tool that was not there at first."""
    return "extra ran"


@app.tool()
async def grow(ctx: Context) -> str:
    """Add the tool `extra` and tell the client the list changed."""
    app.add_tool(_extra, name="extra")
    try:
        await ctx.notify_tools_changed()
    except Exception:
        await ctx.request_context.session.send_tool_list_changed()
    return "grown"


def main() -> None:
    pidfile = os.environ.get("MCP_TEST_PIDFILE")
    if pidfile:
        with open(pidfile, "w") as f:
            f.write(str(os.getpid()))
    if len(sys.argv) > 2 and sys.argv[1] == "http":
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run()


if __name__ == "__main__":
    main()
