"""Running one admitted tool call: its arguments decoded, the tool run where it belongs
(a thread for a plain callable, the provider loop for an asynchronous one, so an
interrupt cancels it where it waits), and its answer as ``(text, is_error, extra)``."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import orjson

from .tools import Tool, ToolContext, ToolError, ToolOutput
from .wire import ToolCall

__all__ = ["run_tool"]

_NONE: Mapping[str, Any] = {}


async def run_tool(
    call: ToolCall, ctx: ToolContext, tool: Tool
) -> tuple[str, bool, Mapping[str, Any]]:
    """``call`` run by ``tool``; ``extra`` is what a `ToolOutput` keeps beside its text."""
    try:
        args = orjson.loads(call.arguments or "{}")
    except orjson.JSONDecodeError as exc:
        return f"the arguments are not valid JSON: {exc}", True, _NONE
    if not isinstance(args, dict):
        return "the arguments must be a JSON object", True, _NONE
    loop = asyncio.get_running_loop()
    try:
        if tool.asynchronous:
            result = await (tool.fn(args, ctx) if tool.context else tool.fn(args))
        # Off the loop: a slow tool must not hold up other sessions' streams.
        elif tool.context:
            result = await loop.run_in_executor(None, tool.fn, args, ctx)
        else:
            result = await loop.run_in_executor(None, tool.fn, args)
    except ToolError as exc:
        return str(exc), True, _NONE
    except Exception as exc:
        return f"{call.name} failed: {type(exc).__name__}: {exc}", True, _NONE
    if isinstance(result, ToolOutput):
        return result.text, result.is_error, result.extra
    return str(result), False, _NONE
