"""The session test kit: run the session's decider without processes.

Given events, run a command, get the events it stored, its reply, its live items, its
effects and the new state; `SessionKit.restart` refolds from the stored events as a new
incarnation would after a crash. The decisions are carried out by the session's own
`Executor` over recording ports: interceptors run inline, seals and verifications run
against the kit's in-memory log; turns are not run: a `StartTurn` effect is recorded and the
test plays the worker's part with `SessionKit.progress` and `SessionKit.finish`::

    kit = SessionKit()
    out = kit.send("hello")
    assert out.kinds == ["user.message", "turn.started", "action.admitted"]
    out = kit.finish(text="hi there")
    assert out.kinds == ["assistant.message", "turn.completed", "session.lifecycle"]
"""

from __future__ import annotations

from .session.kit import Outcome, SessionKit

__all__ = ["Outcome", "SessionKit"]
