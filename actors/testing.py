"""The session test kit: run the session's decider without processes.

Its contract and an example are in `actors.session.shell.kit`, where it lives beside the
session's executor (the warm-up runs it too); this is its public name.
"""

from __future__ import annotations

from .session.shell.kit import Outcome, SessionKit

__all__ = ["Outcome", "SessionKit"]
