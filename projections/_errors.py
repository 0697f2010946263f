"""The projections exception tree."""

from __future__ import annotations

# The checkpoint stores are the spine's (beside the log, by backend), and so are their errors.
from spine import CheckpointBusyError, CheckpointError

__all__ = [
    "CheckpointBusyError",
    "CheckpointError",
    "FoldError",
    "ProjectionError",
]


class ProjectionError(Exception):
    """Base of every error the projections package raises, but for the checkpoints'
    (`CheckpointError`: a `spine.StorageError`)."""


class FoldError(ProjectionError):
    """An event could not be folded and the failure policy said to stop.

    Carries where: the event's global ``position``, ``stream`` and ``seq``, and the
    ``problem``.
    """

    def __init__(self, problem: str, *, position: int, stream: str, seq: int) -> None:
        super().__init__(f"cannot fold {stream!r} seq {seq} (position {position}): {problem}")
        self.problem = problem
        self.position = position
        self.stream = stream
        self.seq = seq
