"""Replies a session gives when it will not do what it is asked (pure)."""

from __future__ import annotations

from ... import messages as m
from .commands import Session


def failed(s: Session, request_id: str, error: str, message: str) -> m.RequestFailed:
    return m.RequestFailed(
        request_id=request_id, error=error, message=message, session_id=s.session_id
    )


def refusal(s: Session, request_id: str) -> m.RequestFailed | None:
    """A closed or failed session refuses everything but reads."""
    if s.stored.closed:
        return failed(s, request_id, "SessionClosed", f"session {s.session_id} is closed")
    if s.stored.failed:
        return failed(s, request_id, "SessionFailed", f"session {s.session_id} has failed")
    return None
