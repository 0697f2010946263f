"""Decisions about sealed records: the session appends its own ``record.sealed`` and
``record.verified`` events from the computations the shell hands it (pure)."""

from __future__ import annotations

from spine.seal import seal_event, verified_event

from ... import messages as m
from .commands import (
    ComputeSeal,
    ComputeVerification,
    Decision,
    Sealed,
    SealStream,
    Session,
    Verified,
    VerifyStream,
)
from .refusals import refusal


def seal(s: Session, cmd: SealStream) -> Decision:
    refused = refusal(s, cmd.request_id)
    if refused is not None:
        return Decision(state=s, reply=refused)
    return Decision(state=s, effects=(ComputeSeal(request_id=cmd.request_id),))


def sealed(s: Session, cmd: Sealed) -> Decision:
    sid = s.session_id
    seal = cmd.seal
    if seal is None:
        return Decision(
            state=s, reply=m.SealReply(request_id=cmd.request_id, session_id=sid, seq=0)
        )
    ev = seal_event(seal)
    reply = m.SealReply(
        request_id=cmd.request_id,
        session_id=sid,
        seq=s.stored.last_seq + 1,
        first=seal.first,
        last=seal.last,
        root=seal.root.hex(),
        key_id=seal.key_id,
    )
    return Decision(state=s, events=(ev,), reply=reply)


def verify(s: Session, cmd: VerifyStream) -> Decision:
    refused = refusal(s, cmd.request_id)
    if refused is not None:
        return Decision(state=s, reply=refused)
    return Decision(state=s, effects=(ComputeVerification(request_id=cmd.request_id),))


def verified(s: Session, cmd: Verified) -> Decision:
    report = cmd.report
    reply = m.VerifyReply(
        request_id=cmd.request_id,
        session_id=s.session_id,
        ok=report.ok,
        summary=report.summary(),
        seq=s.stored.last_seq + 1,
    )
    return Decision(state=s, events=(verified_event(report, time=cmd.time),), reply=reply)
