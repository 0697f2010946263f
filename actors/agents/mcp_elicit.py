"""A server's questions during an MCP tool call (elicitation), put to a human through the
session: the SDK hands the client's callback the request, the call it belongs to asks the
session (``ToolContext.ask``), which stores it as ``action.pending`` and, once a human has
answered through the approval surfaces, hands the answer back; it goes to the server as
the request's result.

Which call asks: on a 2026-07-28 connection the question comes back inside the call's own
result (``input_required``), so the call is the one running in the callback's context; on
a handshake-era connection the server sends a request of its own that names no call, so it
is the connection's only call in flight (with several, nobody can tell: ``cancel``).

A human takes longer than a server: the call's timeout is the server's, counted afresh
after each answer and never while a human is being asked.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

from .tools import ToolContext

__all__ = ["Asker", "bounded", "current"]

_T = TypeVar("_T")

_asking: contextvars.ContextVar[Asker | None] = contextvars.ContextVar("mcp_asker", default=None)


class Asker:
    """One call's way to a human, and how long it has been waiting for one."""

    def __init__(self, ctx: ToolContext, server: str, tool: str) -> None:
        self.ctx = ctx
        self.server = server
        self.tool = tool
        #: Questions waiting for an answer now.
        self.waiting = 0
        #: Loop time of the last answer (0: none yet).
        self.answered = 0.0
        self.asked = 0

    def __enter__(self) -> Asker:
        self._token = _asking.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _asking.reset(self._token)

    def question(self, params: Any) -> dict[str, Any]:
        q: dict[str, Any] = {
            "server": self.server,
            "tool": self.tool,
            "mode": getattr(params, "mode", None) or "form",
            "message": params.message,
        }
        if q["mode"] == "url":
            q["url"] = params.url
        else:
            q["requestedSchema"] = dict(params.requested_schema or {})
        return q

    async def elicit(self, params: Any) -> Any:
        """The human's answer to ``params`` as the SDK's ``ElicitResult``."""
        from mcp_types import ElicitResult

        ask = self.ctx.ask
        if ask is None:
            return ElicitResult(action="decline")  # no session, so no human to ask
        loop = asyncio.get_running_loop()
        self.waiting += 1
        self.asked += 1
        try:
            answer: Mapping[str, Any] = await asyncio.wrap_future(
                ask(self.ctx.tool_use_id, self.question(params))
            )
        finally:
            self.waiting -= 1
            self.answered = loop.time()
        action = answer.get("action")
        if action == "accept":
            content = answer.get("content")
            return ElicitResult(action="accept", content=dict(content) if content else None)
        return ElicitResult(action="decline" if action == "decline" else "cancel")


def current(in_flight: list[Asker]) -> Asker | None:
    """The call a question belongs to (see the module's note), or None."""
    mine = _asking.get()
    if mine is not None:
        return mine
    return in_flight[0] if len(in_flight) == 1 else None


async def bounded(aw: Awaitable[_T], timeout: float, asker: Asker) -> _T:
    """``aw``'s result, cut off (`TimeoutError`) once the server took ``timeout`` seconds
    without a human being asked; cancelled with the caller."""
    task = asyncio.ensure_future(aw)
    loop = asyncio.get_running_loop()
    try:
        while True:
            start = loop.time()
            done, _ = await asyncio.wait({task}, timeout=timeout)
            if done:
                return task.result()
            if asker.waiting == 0 and asker.answered <= start:
                raise TimeoutError
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
