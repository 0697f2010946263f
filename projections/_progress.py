"""Where a reducer stands and what a step did: `Progress`, `FailureInfo` and `StepResult`,
sent in the projection actor's replies.
"""

from __future__ import annotations

import attrs

from ._errors import FoldError


@attrs.frozen(kw_only=True)
class FailureInfo:
    """Where and why folding stopped under a failing policy."""

    position: int
    stream: str
    seq: int
    problem: str

    def as_error(self) -> FoldError:
        return FoldError(self.problem, position=self.position, stream=self.stream, seq=self.seq)


@attrs.frozen(kw_only=True)
class Progress:
    """Where a reducer stands.

    ``position`` is the global position its queryable state has folded up to; while
    ``rebuilding``, ``rebuild_position`` climbs towards ``target`` (the log's end when last
    looked at). ``ready`` says a complete state exists to answer queries; ``stale`` that
    it comes from another code version (a rebuild is replacing it).
    """

    position: int
    rebuilding: bool
    rebuild_position: int
    target: int
    ready: bool
    stale: bool
    version: str
    generation: int
    skipped: int
    failure: FailureInfo | None = None


@attrs.frozen(kw_only=True)
class StepResult:
    """What one step folded: ``folded`` records up to ``position``; ``more`` when the page
    was full (the log may hold more), ``rebuilt`` when this step completed a rebuild."""

    folded: int
    position: int
    more: bool
    rebuilt: bool = False


# Replies carry these across processes and a pickle names a class by its module: they stay
# `projections._reducer.X`, where they were defined before the reducer was split.
for _cls in (FailureInfo, Progress, StepResult):
    _cls.__module__ = "projections._reducer"
del _cls
