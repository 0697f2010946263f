"""A goal run as an A2A task (pure): a session is an A2A context, each goal run a task
whose id names the session and the seq of the run's objective, and its events fold into
the task's state, history and answer, or become the task's stream of updates.

Every update carries ``metadata["vertebra.seq"]``, the seq of the stored event it came
from: a subscriber that sends it back (``Last-Event-ID``) resumes exactly after it.
"""

from __future__ import annotations

from typing import Any

import attrs
from a2a.types import a2a_pb2 as pb

__all__ = ["SEQ", "RunFold", "parse_task_id", "task_id"]

#: The metadata key naming the stored event an update came from.
SEQ = "vertebra.seq"

Update = pb.Task | pb.TaskStatusUpdateEvent | pb.TaskArtifactUpdateEvent

TERMINAL = (pb.TASK_STATE_COMPLETED, pb.TASK_STATE_FAILED, pb.TASK_STATE_CANCELED)


def task_id(session: str, seq: int) -> str:
    return f"{session}#{seq}"


def parse_task_id(tid: str) -> tuple[str, int] | None:
    """``(session, objective seq)`` of a task id, None if it is not one of ours."""
    session, sep, seq = tid.rpartition("#")
    if not sep or not session or not seq.isdigit() or int(seq) <= 0:
        return None
    return session, int(seq)


def _text(role: Any, text: str, mid: str, context: str, task: str) -> pb.Message:
    return pb.Message(
        message_id=mid, context_id=context, task_id=task, role=role, parts=[pb.Part(text=text)]
    )


@attrs.define
class RunFold:
    """One goal run, folded from the events stored after its objective (at `start`)."""

    session: str
    start: int
    objective: str = ""
    state: Any = pb.TASK_STATE_SUBMITTED
    #: The answer (converged) or why it stalled.
    outcome: str = ""
    #: The action waiting for a human, if any (its call).
    pending: int = 0
    last: int = 0
    history: list[pb.Message] = attrs.Factory(list)

    @property
    def id(self) -> str:
        return task_id(self.session, self.start)

    @property
    def terminal(self) -> bool:
        return bool(self.state in TERMINAL)

    @property
    def paused(self) -> bool:
        """Waiting for a human: a subscriber's stream ends here, a message resumes it."""
        return bool(self.state == pb.TASK_STATE_INPUT_REQUIRED)

    def task(self, history_length: int | None = None) -> pb.Task:
        history = self.history if history_length is None else self.history[-history_length:]
        if history_length == 0:
            history = []
        status = pb.TaskStatus(state=self.state, message=self._status_message())
        task = pb.Task(id=self.id, context_id=self.session, status=status, history=history)
        if self.state == pb.TASK_STATE_COMPLETED:
            task.artifacts.append(self._answer())
        task.metadata.update({SEQ: self.last})
        return task

    def take(self, seq: int, ev: dict[str, Any]) -> list[Update]:
        """Fold the stored event ``ev`` at ``seq``; the updates a subscriber gets for it."""
        if seq <= self.last or self.terminal:
            return []
        self.last = seq
        kind = ev.get("kind", "")
        if seq == self.start and kind == "user.message":
            self.objective = str(ev.get("text") or "")
            self.history.append(self._message(pb.ROLE_USER, self.objective, seq))
            return []
        if seq < self.start:
            return []
        handler = _TAKE.get(kind)
        return handler(self, seq, ev) if handler is not None else []

    # -- stored kinds ------------------------------------------------------------------

    def _turn(self, seq: int, ev: dict[str, Any]) -> list[Update]:
        if self.state == pb.TASK_STATE_WORKING:
            return []
        return [self._status(pb.TASK_STATE_WORKING, seq)]

    def _said(self, seq: int, ev: dict[str, Any]) -> list[Update]:
        text = str(ev.get("text") or "")
        if not text:
            return []
        msg = self._message(pb.ROLE_AGENT, text, seq)
        self.history.append(msg)
        self.state = pb.TASK_STATE_WORKING
        return [self._status(pb.TASK_STATE_WORKING, seq, msg)]

    def _pending(self, seq: int, ev: dict[str, Any]) -> list[Update]:
        self.pending = int(ev.get("call") or seq)
        tool = str(ev.get("tool") or ev.get("action") or "")
        text = f"{tool} waits for approval: reply approve or reject (call {self.pending})"
        return [self._status(pb.TASK_STATE_INPUT_REQUIRED, seq, self._message(0, text, seq))]

    def _decided(self, seq: int, ev: dict[str, Any]) -> list[Update]:
        self.pending = 0
        return [self._status(pb.TASK_STATE_WORKING, seq)]

    def _user(self, seq: int, ev: dict[str, Any]) -> list[Update]:
        # A later message of the run (a finish reminder): part of what the agent was told.
        self.history.append(self._message(pb.ROLE_USER, str(ev.get("text") or ""), seq))
        return []

    def _converged(self, seq: int, ev: dict[str, Any]) -> list[Update]:
        self.outcome = str(ev.get("text") or "")
        self.state = pb.TASK_STATE_COMPLETED
        artifact = pb.TaskArtifactUpdateEvent(
            task_id=self.id, context_id=self.session, artifact=self._answer(), last_chunk=True
        )
        artifact.metadata.update({SEQ: seq})
        return [artifact, self._status(pb.TASK_STATE_COMPLETED, seq, self._status_message())]

    def _stalled(self, seq: int, ev: dict[str, Any]) -> list[Update]:
        self.outcome = str(ev.get("error") or "stalled")
        cancelled = self.outcome == "cancelled"
        self.state = pb.TASK_STATE_CANCELED if cancelled else pb.TASK_STATE_FAILED
        return [self._status(self.state, seq, self._status_message())]

    # -- shapes ------------------------------------------------------------------------

    def _status(self, state: Any, seq: int, msg: pb.Message | None = None) -> Update:
        self.state = state
        status = pb.TaskStatus(state=state, message=msg)
        ev = pb.TaskStatusUpdateEvent(task_id=self.id, context_id=self.session, status=status)
        ev.metadata.update({SEQ: seq})
        return ev

    def _message(self, role: Any, text: str, seq: int) -> pb.Message:
        role = role or pb.ROLE_AGENT
        return _text(role, text, f"{self.session}:{seq}", self.session, self.id)

    def _status_message(self) -> pb.Message | None:
        if not self.terminal or not self.outcome:
            return None
        return _text(pb.ROLE_AGENT, self.outcome, f"{self.id}:end", self.session, self.id)

    def _answer(self) -> pb.Artifact:
        return pb.Artifact(
            artifact_id=f"{self.id}:answer", name="answer", parts=[pb.Part(text=self.outcome)]
        )


_TAKE = {
    "turn.started": RunFold._turn,
    "assistant.message": RunFold._said,
    "user.message": RunFold._user,
    "action.pending": RunFold._pending,
    "action.approval": RunFold._decided,
    "session.converged": RunFold._converged,
    "session.stalled": RunFold._stalled,
}
