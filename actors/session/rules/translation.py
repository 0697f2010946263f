"""Between the host protocol and the session decider (pure): the command a protocol request
carries, and where a session stands as the protocol's `SessionInfo`."""

from __future__ import annotations

from typing import Any

from spine import Kind

from ... import messages as m
from ...interceptors import Ingress
from .commands import (
    CancelTimer,
    Close,
    Command,
    Decide,
    FireDue,
    Receive,
    Resume,
    SealStream,
    SetTimer,
    Submit,
    VerifyStream,
)
from .state import SessionState


def _ingress(msg: Any) -> Ingress | None:
    """The ingress a protocol request carries (None: it carries none)."""
    if isinstance(msg, m.SendMessage):
        return Ingress(
            kind=Kind.USER_MESSAGE,
            key=msg.key,
            text=msg.text,
            mode=msg.mode,
            edits=msg.edits,
            regenerates=msg.regenerates,
        )
    if isinstance(msg, m.SwitchBranch):
        return Ingress(kind=Kind.BRANCH_SWITCHED, key=msg.key, turn=msg.turn)
    if isinstance(msg, m.SetMetadata):
        return Ingress(
            kind=Kind.PROPERTIES,
            key=msg.key,
            properties=dict(msg.properties),
            authority=msg.authority,
        )
    if isinstance(msg, m.SwitchSession):
        return Ingress(kind=Kind.SESSION_SWITCH, key=msg.key, target=msg.target)
    if isinstance(msg, m.Interrupt):
        return Ingress(kind=Kind.INTERRUPT, key=msg.key, text=msg.reason)
    return None


def command_of(msg: Any) -> Command | None:
    """The command a protocol request carries (None for requests the shell answers itself:
    reads, subscriptions, pings)."""
    ingress = _ingress(msg)
    if ingress is not None:
        return Receive(request_id=msg.request_id, ingress=ingress)
    if isinstance(msg, m.CloseSession):
        return Close(request_id=msg.request_id)
    if isinstance(msg, m.DecideAction):
        return Decide(
            request_id=msg.request_id,
            key=msg.key,
            call=msg.call,
            approve=msg.approve,
            note=msg.note,
            raise_by=msg.raise_by,
            content=msg.content,
            result=msg.result,
            is_error=msg.is_error,
        )
    if isinstance(msg, m.SetTimer | m.CancelTimer | m.FireTimers):
        return _timer_command(msg)
    if isinstance(msg, m.SubmitGoal):
        return Submit(
            request_id=msg.request_id,
            key=msg.key,
            objective=msg.objective,
            budget=dict(msg.budget),
        )
    if isinstance(msg, m.ResumeGoal):
        return Resume(request_id=msg.request_id, key=msg.key)
    if isinstance(msg, m.SealSession):
        return SealStream(request_id=msg.request_id)
    if isinstance(msg, m.VerifySession):
        return VerifyStream(request_id=msg.request_id)
    return None


def _timer_command(msg: m.SetTimer | m.CancelTimer | m.FireTimers) -> Command:
    if isinstance(msg, m.CancelTimer):
        return CancelTimer(request_id=msg.request_id, key=msg.key, timer_id=msg.timer_id)
    if isinstance(msg, m.FireTimers):
        return FireDue(request_id=msg.request_id)
    return SetTimer(
        request_id=msg.request_id,
        key=msg.key,
        timer_id=msg.timer_id,
        text=msg.text,
        at=msg.at,
        after=msg.after,
        cron=msg.cron,
        tz=msg.tz,
        policy=msg.policy,
        grace=msg.grace,
        goal=msg.goal,
        budget=dict(msg.budget),
    )


def session_info(stored: SessionState, restarts: int) -> m.SessionInfo:
    """Where the session stands, as the protocol's `SessionInfo`."""
    return m.SessionInfo(
        session_id=stored.session_id,
        state=stored.terminal or "live",
        last_seq=stored.last_seq,
        restarts=restarts,
        metadata=dict(stored.metadata),
    )
