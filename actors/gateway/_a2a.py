"""The A2A door (the ``a2a`` extra, on the official ``a2a-sdk``): a session is an A2A
context and each goal run a task, served from the session's log.

``SendMessage`` opens a goal run (the message's id is the idempotency key, so a retry
opens nothing new) or, on a task waiting for input, answers the approval it waits for;
streams and subscriptions fold the run's stored events into task updates
(`_a2a_map.RunFold`), each naming the seq it came from, and a subscription with
``Last-Event-ID`` resumes exactly after that seq. The JSON-RPC endpoint is the SDK's
dispatcher behind the gateway's bearer tokens; the agent card is signed with the data
directory's record key.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncGenerator
from typing import Any

import orjson
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types import a2a_pb2 as pb
from a2a.utils import errors as ae

from spine import Log

from .. import errors as e
from ..authority import Authority
from ._a2a_map import SEQ, RunFold, parse_task_id
from ._gateway import Gateway, call
from ._replies import HttpError
from ._session_routes import within_quota
from ._tenants import TENANT_KEY
from ._tokens import Grant

#: How long a non-streaming ``SendMessage`` or a cancel waits for the run (seconds).
WAIT_MAX = 300.0
#: Records read per page while a run is folded.
PAGE = 500
#: The namespace of the sessions messages without a context open.
CONTEXTS = uuid.UUID("6f1c8a62-5d0e-4a55-9a4e-3b2f7f0c9e11")
APPROVE = frozenset({"approve", "approved", "yes", "y", "ok"})
REJECT = frozenset({"reject", "rejected", "no", "n", "deny"})


def _grant(ctx: ServerCallContext) -> Grant:
    g = ctx.state.get("grant")
    if not isinstance(g, Grant):  # the route's wrapper always sets it
        raise ae.InvalidRequestError(message="no bearer token")
    return g


def _resume_after(ctx: ServerCallContext) -> int | None:
    raw = (ctx.state.get("headers") or {}).get("last-event-id", "").strip()
    if not raw:
        return None
    if not raw.isdigit():
        raise ae.InvalidParamsError(message="Last-Event-ID must be a seq (a non-negative integer)")
    return int(raw)


def _text_of(msg: pb.Message) -> str:
    texts = [p.text for p in msg.parts if p.WhichOneof("content") == "text"]
    if not texts:
        raise ae.ContentTypeNotSupportedError(message="only text parts are read")
    return "".join(texts)


class VertebraA2A(RequestHandler):
    """The SDK's request handler over a gateway's Host and spine."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw

    # -- reading a run -----------------------------------------------------------------

    async def _may(self, ctx: ServerCallContext, sid: str, write: bool = False) -> bool:
        """Whether the call's token may read (or write) ``sid``: its sessions, or its
        tenant's."""
        g = _grant(ctx)
        tenant = await call(self.gw.tenants.tenant_of, sid) if g.tenant is not None else None
        return g.may_write(sid, tenant) if write else g.may_read(sid, tenant)

    async def _task(self, ctx: ServerCallContext, tid: str, write: bool = False) -> tuple[str, int]:
        parsed = parse_task_id(tid)
        # Another token's task is not found, never forbidden: ids are not disclosed.
        if parsed is None or not await self._may(ctx, parsed[0]):
            raise ae.TaskNotFoundError(message=f"no task {tid!r}")
        if write and not await self._may(ctx, parsed[0], write=True):
            raise ae.InvalidRequestError(message=f"this token may not write to {parsed[0]!r}")
        return parsed

    async def _fold(self, sid: str, start: int, upto: int | None = None) -> RunFold:
        fold: RunFold = await call(fold_run, self.gw.log, sid, start, upto)
        if fold.last < start or not fold.history:
            raise ae.TaskNotFoundError(message=f"no task {fold.id!r}")
        return fold

    async def _follow(self, fold: RunFold) -> AsyncGenerator[Any]:
        """The run's updates after what ``fold`` holds, live, until it ends or pauses."""
        gw, sid = self.gw, fold.session
        with gw.hubs.waiting(sid, None) as waiter:
            cursor = fold.last
            while not (fold.terminal or fold.paused):
                page = await call(gw.log.read, sid, cursor, PAGE)
                fresh = page or [r for r in waiter.found if r.seq > cursor]
                waiter.found = [r for r in waiter.found if r.seq > cursor]
                for r in fresh:
                    cursor = max(cursor, r.seq)
                    for update in fold.take(r.seq, orjson.loads(r.payload)):
                        yield update
                    if fold.terminal or fold.paused:
                        return
                if fresh or gw.stopping:
                    if gw.stopping:
                        return
                    continue
                waiter.changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter.changed.wait(), 1.0)

    # -- starting and continuing a run ---------------------------------------------------

    async def _context(self, ctx: ServerCallContext, msg: pb.Message) -> str:
        """The message's session: its context, made if new. A message without one opens a
        session named after the message's id, so a retry finds the same one."""
        g = _grant(ctx)
        sid = msg.context_id or str(uuid.uuid5(CONTEXTS, msg.message_id))
        if sid and self.gw.log.last_seq(sid):
            if not await self._may(ctx, sid, write=True):
                raise ae.InvalidRequestError(message=f"this token may not write to {sid!r}")
            return sid
        if g.tenant is not None:
            return await self._tenant_context(g.tenant, sid)
        if not g.admin and not g.may_write(sid):
            raise ae.InvalidRequestError(message="this token may only use its own sessions")
        try:
            return str(await call(self.gw.host.create, sid, {}))
        except e.SessionAlreadyExists:
            return sid  # made by the same message a moment ago
        except (e.InvalidRequest, ValueError) as exc:
            raise ae.InvalidParamsError(message=str(exc)) from None

    async def _tenant_context(self, tenant: str, sid: str) -> str:
        """A new session of ``tenant``, within its quota, as the REST door makes one."""
        try:
            await within_quota(self.gw, tenant)
        except HttpError as exc:
            raise ae.InvalidRequestError(message=exc.message) from None
        meta = {TENANT_KEY: tenant}
        try:
            await call(self.gw.host.create, sid, meta, authority=Authority.OPERATOR)
        except e.SessionAlreadyExists:
            pass  # made by the same message a moment ago
        self.gw.tenants.remember(sid, tenant)
        return sid

    async def _send(self, params: pb.SendMessageRequest, ctx: ServerCallContext) -> RunFold:
        msg = params.message
        if msg.task_id:
            return await self._answer(ctx, msg)
        text = _text_of(msg)
        if not msg.message_id:
            raise ae.InvalidParamsError(message="a message needs its messageId")
        sid = await self._context(ctx, msg)
        try:
            ack = await call(self.gw.host.submit, sid, text, key=f"a2a:{msg.message_id}")
        except (e.InvalidRequest, e.IdempotencyConflict) as exc:
            raise ae.InvalidRequestError(message=str(exc)) from None
        except (e.SessionClosed, e.SessionFailed) as exc:
            raise ae.InvalidRequestError(message=f"session {sid!r}: {exc}") from None
        return await self._fold(sid, ack.seq, upto=ack.seq)

    async def _answer(self, ctx: ServerCallContext, msg: pb.Message) -> RunFold:
        """A message to a task waiting for input: the approval it waits for."""
        sid, start = await self._task(ctx, msg.task_id, write=True)
        fold = await self._fold(sid, start)
        if not fold.paused:
            raise ae.InvalidParamsError(message=f"task {msg.task_id!r} is not waiting for input")
        word = _text_of(msg).strip().lower()
        if word not in APPROVE | REJECT:
            raise ae.InvalidParamsError(message="answer approve or reject")
        host = self.gw.host
        await call(host.approve if word in APPROVE else host.reject, sid, fold.pending, "via A2A")
        # Decided: the run goes on (its stored decision follows in the stream).
        fold.state = pb.TASK_STATE_WORKING
        return fold

    # -- the SDK's methods ---------------------------------------------------------------

    async def on_message_send(
        self, params: pb.SendMessageRequest, context: ServerCallContext
    ) -> pb.Task:
        fold = await self._send(params, context)
        if not params.configuration.return_immediately:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(WAIT_MAX):
                    async for _ in self._follow(fold):
                        pass
        return fold.task(self._history_length(params.configuration))

    async def on_message_send_stream(
        self, params: pb.SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Any]:
        fold = await self._send(params, context)
        yield fold.task()
        async for update in self._follow(fold):
            yield update

    async def on_subscribe_to_task(
        self, params: pb.SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Any]:
        sid, start = await self._task(context, params.id)
        after = _resume_after(context)
        fold = await self._fold(sid, start, upto=after)
        # The task as of the resume point, then every update after it, exactly once.
        yield fold.task()
        async for update in self._follow(fold):
            yield update

    async def on_get_task(self, params: pb.GetTaskRequest, context: ServerCallContext) -> pb.Task:
        sid, start = await self._task(context, params.id)
        fold = await self._fold(sid, start)
        length = params.history_length if params.HasField("history_length") else None
        return fold.task(length)

    async def on_cancel_task(
        self, params: pb.CancelTaskRequest, context: ServerCallContext
    ) -> pb.Task:
        sid, start = await self._task(context, params.id, write=True)
        fold = await self._fold(sid, start)
        if fold.terminal:
            raise ae.TaskNotCancelableError(message=f"task {params.id!r} has ended")
        await call(self.gw.host.interrupt, sid, reason="cancelled over A2A")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(WAIT_MAX):
                async for _ in self._follow(fold):
                    pass
        return fold.task()

    async def on_list_tasks(
        self, params: pb.ListTasksRequest, context: ServerCallContext
    ) -> pb.ListTasksResponse:
        sids = [params.context_id] if params.context_id else None
        if sids is None:
            sids = [i.session_id for i in await call(self.gw.host.sessions)]
        tasks = []
        for sid in sids:
            if await self._may(context, sid):
                tasks += [
                    await self._fold(sid, s) for s in await call(goal_starts, self.gw.log, sid)
                ]
        if params.status:
            tasks = [f for f in tasks if f.state == params.status]
        size = params.page_size or 50
        length = params.history_length if params.HasField("history_length") else None
        out = [f.task(length) for f in tasks[:size]]
        return pb.ListTasksResponse(tasks=out, page_size=size, total_size=len(tasks))

    @staticmethod
    def _history_length(config: pb.SendMessageConfiguration) -> int | None:
        return config.history_length if config.HasField("history_length") else None

    async def on_create_task_push_notification_config(self, params: Any, context: Any) -> Any:
        raise ae.PushNotificationNotSupportedError()

    async def on_get_task_push_notification_config(self, params: Any, context: Any) -> Any:
        raise ae.PushNotificationNotSupportedError()

    async def on_list_task_push_notification_configs(self, params: Any, context: Any) -> Any:
        raise ae.PushNotificationNotSupportedError()

    async def on_delete_task_push_notification_config(self, params: Any, context: Any) -> None:
        raise ae.PushNotificationNotSupportedError()

    async def on_get_extended_agent_card(self, params: Any, context: Any) -> Any:
        raise ae.ExtendedAgentCardNotConfiguredError()


def fold_run(log: Log, sid: str, start: int, upto: int | None = None) -> RunFold:
    """The goal run of ``sid`` whose objective is at ``start``, folded up to ``upto``."""
    fold = RunFold(session=sid, start=start)
    cursor = start - 1
    while True:
        page = log.read(sid, cursor, PAGE)
        for r in page:
            if upto is not None and r.seq > upto:
                return fold
            fold.take(r.seq, orjson.loads(r.payload))
            cursor = r.seq
        if len(page) < PAGE:
            return fold


def goal_starts(log: Log, sid: str) -> list[int]:
    """The seqs of the objectives of ``sid``'s goal runs, oldest first."""
    starts: list[int] = []
    opened = False
    cursor = 0
    while True:
        page = log.read(sid, cursor, PAGE, ("session.started", "user.message"))
        for r in page:
            ev = r.event()
            if ev.kind == "session.started":
                opened = bool(ev.goal)
            elif opened and ev.goal:
                starts.append(r.seq)
                opened = False
            cursor = r.seq
        if len(page) < PAGE:
            return starts


__all__ = ["SEQ", "VertebraA2A", "fold_run", "goal_starts"]
