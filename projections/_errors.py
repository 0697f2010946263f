"""The projections exception tree."""

from __future__ import annotations


class ProjectionError(Exception):
    """Base of every error the projections package raises."""


class CheckpointError(ProjectionError):
    """The checkpoint file cannot be opened, read or written."""


class CheckpointBusyError(CheckpointError):
    """Another reducer (on another host) writes these checkpoints; this one stands by."""


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
