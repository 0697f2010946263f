"""The AG-UI door: ``POST /v1/agui/{id}`` takes AG-UI's ``RunAgentInput`` and answers with
the run as AG-UI events over SSE, read from the session's log (`_agui_map.RunView`).

The input's last user message is ordinary ingress (busy policies, governance and budgets
apply), sent with the idempotency key ``agui:THREAD:MESSAGE``: the same input posted again
(a client retrying after a dropped connection) stores nothing and streams the same run,
and with ``Last-Event-ID`` (the seq of the last stored event it saw) it resumes exactly
after that event. An input with ``resume`` entries answers the interrupts a paused run
ended with (each an approval's call number) and streams the run on from there.
"""

from __future__ import annotations

import functools
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from spine import Record

from .. import errors as e
from ._agui_map import RunView
from ._gateway import Gateway, call, known
from ._hub import Client, Recorder
from ._replies import HttpError, status_json
from ._requests import json_body, session_id
from ._stream_routes import _resume_point, _sse_response
from ._wire import RETRY_MS, Out

#: AG-UI's own type of a run's input (the agui extra), which checks what a client sends.
RUN_INPUT: Any = None
try:
    from ag_ui.core import RunAgentInput
    from pydantic import ValidationError

    RUN_INPUT = RunAgentInput
except ImportError:  # pragma: no cover - exercised only without the extra
    ValidationError = ValueError  # type: ignore[misc,assignment]


def frame(events: list[dict[str, Any]], seq: int | None) -> bytes:
    """AG-UI's SSE framing (``data:`` lines, ``\\n`` endings), the stored seq as the ``id``
    of the group's last event so that a resume never splits a group."""
    parts = [b"data: " + orjson.dumps(ev) + b"\n\n" for ev in events]
    if parts and seq is not None:
        parts[-1] = b"id: %d\n" % seq + parts[-1]
    return b"".join(parts)


class AguiClient(Client):
    """A hub client that writes one AG-UI run instead of the REST stream."""

    hello = b": vertebra ag-ui\nretry: %d\n\n" % RETRY_MS
    shared = False

    def __init__(
        self, view: RunView, skip_to: int, snapshot: Any, early: Recorder, out: Out, limit: int
    ) -> None:
        super().__init__(view.after, None, out, limit)
        self.view = view
        #: Stored events up to here were seen by the client: folded into the view, unsent.
        self.skip_to = skip_to
        self._pending.append(frame(view.start(snapshot), None))
        # Live items from before the client joined (the turn's first deltas) wait for
        # the stored event they follow; those before the run's start are another's.
        self._held.extend(item for item in early.take() if item[0] >= view.after)

    def encode(self, r: Record, data: bytes | None) -> bytes:
        events = self.view.stored(r.seq, orjson.loads(r.payload))
        if self.view.finished:
            self.end()
        return b"" if r.seq <= self.skip_to else frame(events, r.seq)

    def encode_live(self, item: tuple[int, str, str, str], data: bytes | None) -> bytes:
        after, kind, severity, text = item
        return frame(self.view.live(kind, severity, text, after), None)

    def live_item(
        self,
        item: tuple[int, str, str, str],
        data: bytes | None = None,
        framed: bytes | None = None,
    ) -> None:
        # A delta may name a stored event older than one this client already read from
        # the log (the two travel apart). The REST stream drops it, its stored text says
        # it; an AG-UI message only grows, so the view takes it unless that text came.
        if not self.ended and item[0] < self.cursor:
            if encoded := self.encode_live(item, None):
                self.out.write(encoded)
                self._check()
            return
        super().live_item(item, data, framed)


def _input(body: Any) -> Any:
    if RUN_INPUT is None:
        raise HttpError(501, "not_installed", "the AG-UI door needs the agui extra")
    try:
        return RUN_INPUT.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "body"
        raise HttpError(
            422, "invalid_field", f"not an AG-UI RunAgentInput: {where}: {first.get('msg')}"
        ) from None


def _user_message(inp: Any) -> tuple[str, str]:
    """The text and id of the input's last user message."""
    for msg in reversed(inp.messages):
        if getattr(msg, "role", "") != "user":
            continue
        content = msg.content
        if isinstance(content, str):
            return content, msg.id
        texts = [getattr(p, "text", None) for p in content]
        if any(t is None for t in texts):
            raise HttpError(422, "invalid_field", "only text parts of a user message are read")
        return "".join(str(t) for t in texts), msg.id
    raise HttpError(422, "invalid_field", "the input has no user message to answer")


def _decision(payload: Any) -> tuple[bool, str]:
    """An interrupt's answer: ``true``/absent approves, ``false`` rejects; an object may
    say ``{"approve": bool, "note": str}``."""
    if payload is None or isinstance(payload, bool):
        return payload is not False, ""
    if isinstance(payload, dict):
        approve = payload.get("approve", True)
        note = payload.get("note", "")
        if isinstance(approve, bool) and isinstance(note, str):
            return approve, note
    raise HttpError(
        422, "invalid_field", 'a resume payload is true, false or {"approve": bool, "note": str}'
    )


async def _resume(gw: Gateway, sid: str, entries: list[Any]) -> tuple[int, int]:
    """Answer each interrupt; the run goes on after the earliest, in its turn."""
    calls = []
    for entry in entries:
        raw = entry.interrupt_id
        if not raw.isdigit() or int(raw) <= 0:
            raise HttpError(422, "invalid_field", f"interrupt {raw!r} is not an approval's call")
        approve, note = _decision(entry.payload)
        approve = approve and entry.status == "resolved"
        await call(gw.host.approve if approve else gw.host.reject, sid, int(raw), note)
        calls.append(int(raw))
    first = min(calls)
    rows = await call(gw.log.read, sid, first - 1, 1)
    turn = rows[0].event().turn if rows else 0
    return first, turn


async def run(gw: Gateway, request: Request) -> Response:
    sid = session_id(request)
    inp = _input(await json_body(request))
    last = _resume_point(request, "after")
    await known(gw, sid)
    if gw.stopping:
        raise HttpError(503, "unavailable", "the gateway is stopping")
    early = gw.hubs.record(sid)
    try:
        return await _start(gw, sid, inp, last, early, request.state.grant)
    except BaseException:
        gw.hubs.release(early)
        raise


async def _start(
    gw: Gateway, sid: str, inp: Any, last: int, early: Recorder, grant: Any
) -> Response:
    """Send the input's message (or answer its interrupts) and stream the run."""
    if inp.resume:
        after, turn = await _resume(gw, sid, inp.resume)
    else:
        text, mid = _user_message(inp)
        key = f"agui:{inp.thread_id}:{mid}"
        try:
            ack = await call(gw.host.send, sid, text, key=key)
        except e.IdempotencyConflict:
            raise HttpError(
                422, "idempotency_conflict", f"message {mid!r} was sent before with other text"
            ) from None
        if ack.consumed:
            gw.hubs.release(early)
            return _consumed(inp, ack.notices)
        after, turn = ack.seq, 0
    snapshot = status_json(await call(gw.host.status, sid))
    view = RunView(session=sid, thread_id=inp.thread_id, run_id=inp.run_id, after=after, turn=turn)

    def make(start: int, out: Out, limit: int) -> Client:
        return AguiClient(view, max(after, last), snapshot, early, out, limit)

    serve = functools.partial(gw.hubs.serve, sid, after, None, make=make)
    return _sse_response(gw, grant, serve)


def _consumed(inp: Any, notices: Any) -> Response:
    """A message an interceptor took (a slash command): a run of its notices alone."""
    view = RunView(session="", thread_id=inp.thread_id, run_id=inp.run_id, after=0)
    events = view.start(None)
    for severity, text in notices:
        events.append(
            {
                "type": "CUSTOM",
                "name": "vertebra.notice",
                "value": {"text": text, "severity": severity},
            }
        )
    events.append(
        {
            "type": "RUN_FINISHED",
            "threadId": inp.thread_id,
            "runId": inp.run_id,
            "outcome": {"type": "success"},
            "result": {"consumed": True},
        }
    )
    return Response(frame(events, None), media_type="text/event-stream")
