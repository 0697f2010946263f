"""What a child's stream leaves on its parent's when the child folds back (a goal's
delegate, a fan-out's children): the events the parent's projections need, attributed to
the child."""

from __future__ import annotations

import attrs

from spine import Event, Kind

__all__ = ["MIRRORED", "mirror"]

#: A child's events copied onto its parent's stream when it folds back: what the parent's
#: status projection folds into the child's node (turns, trust, blocked, grandchildren)
#: and its action ledger, each admission with its outcome (paired by child and call).
MIRRORED = frozenset(
    {
        Kind.TURN_COMPLETED,
        Kind.ACTION_ADMITTED,
        Kind.ACTION_COMPLETED,
        Kind.ACTION_IN_DOUBT,
        Kind.ACTION_REJECTED,
        Kind.EGRESS,
        Kind.CHILD_SPAWNED,
        Kind.CHILD_COMPLETED,
    }
)


def mirror(ev: Event, child: str) -> Event:
    """``ev`` of ``child``'s stream as its parent stores it: attributed to the child (a
    grandchild's events keep their own goal), numbered by the parent's log; its turn and
    call stay the child's own."""
    return attrs.evolve(ev, seq=0, goal=ev.goal or child)
