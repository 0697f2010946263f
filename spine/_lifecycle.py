"""The lifecycle rules: which phases end a session and which bring it back.

Every fold that tracks whether a session serves (the session's own state, the status
projection, the sessions index) reads these, so a phase means the same thing everywhere.
"""

from __future__ import annotations

from ._event import Phase

#: Phases after which a session takes no ingress, and the terminal state each one names.
TERMINAL_PHASES: dict[str, str] = {str(Phase.CLOSED): "closed", str(Phase.FAILED): "failed"}

#: Phases that bring a closed or failed session back to serving (an operator reopened it,
#: or restarted it after clearing the failure).
REVIVING_PHASES: frozenset[str] = frozenset(
    {str(Phase.OPENED), str(Phase.RESTARTED), str(Phase.RECOVERED)}
)


def terminal_after(terminal: str, phase: str) -> str:
    """The terminal state ("" while serving, "closed" or "failed") after a lifecycle event
    with ``phase``, given the state before it. Other phases (done, passivated, poisoned)
    change nothing."""
    end = TERMINAL_PHASES.get(phase)
    if end is not None:
        return end
    if phase in REVIVING_PHASES:
        return ""
    return terminal
