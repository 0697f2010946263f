"""A session's stream as one AG-UI run (pure): which stored events and live deltas become
which AG-UI events.

A run answers one user message: it starts after the message's seq, takes the first turn
that starts after it as its own and ends with that turn (``RUN_FINISHED`` with the
``success`` or ``cancelled`` outcome, ``RUN_ERROR`` for a failed turn or a session that
closed or failed first), or pauses at an action that waits for a human (``RUN_FINISHED``
with the ``interrupt`` outcome; a later run resumes it). Stored text becomes one text
message (start, content, end); live deltas open the message early and the stored text
closes it with what the deltas had not said. Tool calls and results map one to one;
every other stored event of the turn is a ``CUSTOM`` event named ``vertebra.<kind>``
carrying the stored JSON, so governance and fan-out reach the client as they are.

Every output is tagged with the seq of the stored event it came from (None for live
deltas), and the route writes that seq as the SSE ``id`` of the last event of each group:
``Last-Event-ID`` then resumes exactly after the last stored event a client saw.
"""

from __future__ import annotations

from typing import Any

import attrs
import orjson

__all__ = ["TERMINAL_PHASES", "RunView"]

#: Lifecycle phases that end a run that has not ended with its turn.
TERMINAL_PHASES = frozenset({"closed", "failed", "poisoned"})

Out = list[dict[str, Any]]

#: Live items held while the run's turn has not started (more are dropped: the stored
#: text carries what they said).
EARLY_MAX = 1024


def _event(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, **{k: v for k, v in fields.items() if v is not None}}


@attrs.define
class RunView:
    """One AG-UI run over a session's stream."""

    session: str
    thread_id: str
    run_id: str
    #: The run answers what is stored after this seq (its user message, or the action
    #: a resumed run continues from).
    after: int
    #: The turn the run belongs to (0 until the first turn after `after` starts).
    turn: int = 0
    finished: bool = False
    #: A text message opened by live deltas: its id and what the deltas said.
    _open: str | None = None
    _said: str = ""
    #: Text messages of the turn so far: a message's id is its place in the turn, the
    #: same whether it arrived as live deltas or is read back from the log.
    _texts: int = 0
    #: Live items seen before the run's turn started: a live item names the stored event
    #: it follows, which may precede the turn's start (the two travel apart), so they
    #: wait for it; another turn's end shows they were that turn's.
    _early: list[tuple[str, str, str, int]] = attrs.Factory(list)
    #: The seq of the last stored event that carried the turn's text.
    _text_seq: int = 0

    def start(self, snapshot: Any) -> Out:
        out = [_event("RUN_STARTED", threadId=self.thread_id, runId=self.run_id)]
        if snapshot is not None:
            out.append(_event("STATE_SNAPSHOT", snapshot=snapshot))
        if self.turn:
            # A resumed run goes on inside the turn it paused in.
            out.append(_event("STEP_STARTED", stepName=f"turn {self.turn}"))
        return out

    def stored(self, seq: int, ev: dict[str, Any]) -> Out:
        """What the stored event ``ev`` at ``seq`` adds to the run."""
        if self.finished or seq <= self.after:
            return []
        kind = ev.get("kind", "")
        if kind == "session.lifecycle":
            return self._lifecycle(ev)
        if self.turn == 0:
            if kind in ("turn.completed", "turn.cancelled"):
                self._early.clear()
            if kind != "turn.started":
                return []
            self.turn = int(ev.get("turn") or 0)
            out = [_event("STEP_STARTED", stepName=f"turn {self.turn}")]
            early, self._early = self._early, []
            for item in early:
                out += self.live(*item)
            return out
        if ev.get("turn") not in (None, self.turn):
            return []
        handler = _STORED.get(kind)
        if kind in ("assistant.message", "turn.cancelled"):
            self._text_seq = seq
        if handler is not None:
            return handler(self, seq, ev)
        return [_event("CUSTOM", name=f"vertebra.{kind}", value=ev)]

    def live(self, kind: str, severity: str, text: str, after: int = 0) -> Out:
        """A live item: a text delta or a notice that follows stored event ``after``. One
        that follows an event before the last stored text was said by that text."""
        if self.finished or (after and after < self._text_seq):
            return []
        if self.turn == 0:
            if len(self._early) < EARLY_MAX:
                self._early.append((kind, severity, text, after))
            return []
        if kind == "notice":
            value = {"text": text, "severity": severity or "info"}
            return [_event("CUSTOM", name="vertebra.notice", value=value)]
        if kind != "assistant.delta" or not text:
            return []
        out: Out = []
        if self._open is None:
            self._open = self._next_id()
            self._said = ""
            out.append(_event("TEXT_MESSAGE_START", messageId=self._open, role="assistant"))
        self._said += text
        out.append(_event("TEXT_MESSAGE_CONTENT", messageId=self._open, delta=text))
        return out

    # -- stored kinds ------------------------------------------------------------------

    def _close_text(self, final: str | None = None) -> Out:
        """End the message live deltas opened, first saying what of ``final`` they had
        not (a final text that does not extend them adds nothing: AG-UI text only grows)."""
        if self._open is None:
            return []
        out: Out = []
        if final and final.startswith(self._said) and len(final) > len(self._said):
            delta = final[len(self._said) :]
            out.append(_event("TEXT_MESSAGE_CONTENT", messageId=self._open, delta=delta))
        out.append(_event("TEXT_MESSAGE_END", messageId=self._open))
        self._open, self._said = None, ""
        return out

    def _text(self, seq: int, text: str) -> Out:
        if self._open is not None:
            return self._close_text(text)
        if not text:
            return []
        mid = self._next_id()
        return [
            _event("TEXT_MESSAGE_START", messageId=mid, role="assistant"),
            _event("TEXT_MESSAGE_CONTENT", messageId=mid, delta=text),
            _event("TEXT_MESSAGE_END", messageId=mid),
        ]

    def _next_id(self) -> str:
        self._texts += 1
        return f"{self.session}:{self.turn}:{self._texts}"

    def _assistant(self, seq: int, ev: dict[str, Any]) -> Out:
        return self._text(seq, str(ev.get("text") or ""))

    def _tool_call(self, seq: int, ev: dict[str, Any]) -> Out:
        call_id = str(ev.get("toolUseID") or f"{self.session}:{seq}")
        raw = ev.get("input")
        args = raw if isinstance(raw, str) else orjson.dumps(raw if raw is not None else {})
        return [
            *self._close_text(),
            _event("TOOL_CALL_START", toolCallId=call_id, toolCallName=str(ev.get("tool") or "")),
            _event("TOOL_CALL_ARGS", toolCallId=call_id, delta=_text_of(args)),
            _event("TOOL_CALL_END", toolCallId=call_id),
        ]

    def _tool_result(self, seq: int, ev: dict[str, Any]) -> Out:
        call_id = str(ev.get("toolUseID") or "")
        meta = {"isError": True} if ev.get("isError") else None
        result = _event(
            "TOOL_CALL_RESULT",
            messageId=f"{self.session}:{seq}",
            toolCallId=call_id,
            content=str(ev.get("result") or ""),
            role="tool",
            metadata=meta,
        )
        return [*self._close_text(), result]

    def _pending(self, seq: int, ev: dict[str, Any]) -> Out:
        call = int(ev.get("call") or seq)
        tool = str(ev.get("tool") or ev.get("action") or "")
        interrupt = _event(
            "x",
            id=str(call),
            reason="approval",
            message=f"{tool} waits for a human's approval",
            toolCallId=ev.get("toolUseID") or None,
            metadata={
                "session": self.session,
                "call": call,
                "tool": tool,
                "input": ev.get("input"),
            },
        )
        del interrupt["type"]
        outcome = {"type": "interrupt", "interrupts": [interrupt]}
        return [*self._end_step(), *self._finish("RUN_FINISHED", outcome=outcome)]

    def _completed(self, seq: int, ev: dict[str, Any]) -> Out:
        out = self._end_step()
        if ev.get("stopReason") == "error":
            error = str(ev.get("error") or "the turn failed")
            return out + self._finish("RUN_ERROR", message=error, code="turn_failed")
        result = {"stopReason": ev.get("stopReason"), "usage": ev.get("usage")}
        return out + self._finish("RUN_FINISHED", outcome={"type": "success"}, result=result)

    def _cancelled(self, seq: int, ev: dict[str, Any]) -> Out:
        text = str(ev.get("text") or "")
        said = self._close_text(text) if self._open is not None else self._text(seq, text)
        out = [*said, *self._end_step()]
        return out + self._finish("RUN_FINISHED", outcome={"type": "cancelled"})

    def _lifecycle(self, ev: dict[str, Any]) -> Out:
        phase = str(ev.get("phase") or "")
        if phase not in TERMINAL_PHASES:
            return []
        error = str(ev.get("error") or ev.get("reason") or "")
        message = f"the session is {phase}" + (f": {error}" if error else "")
        return [*self._end_step(), *self._finish("RUN_ERROR", message=message, code=phase)]

    def _end_step(self) -> Out:
        """Close the text and the turn's step: AG-UI ends no run with a step open."""
        out = self._close_text()
        if self.turn:
            out.append(_event("STEP_FINISHED", stepName=f"turn {self.turn}"))
        return out

    def _finish(self, kind: str, **fields: Any) -> Out:
        self.finished = True
        if kind == "RUN_ERROR":
            return [_event(kind, **fields)]
        return [_event(kind, threadId=self.thread_id, runId=self.run_id, **fields)]


def _text_of(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw


_STORED = {
    "assistant.message": RunView._assistant,
    "tool.call": RunView._tool_call,
    "tool.result": RunView._tool_result,
    "action.pending": RunView._pending,
    "turn.completed": RunView._completed,
    "turn.cancelled": RunView._cancelled,
}
