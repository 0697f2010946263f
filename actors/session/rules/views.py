"""What several rules read off the folded state or an append's rows (pure). Kept below
`decide`, `gate`, `goals` and `turns` so that none of them imports another only for a
query: the rules stack without cycles."""

from __future__ import annotations

from collections.abc import Sequence

from spine import Kind

from .state import SessionState

__all__ = ["history_before", "ingress_seq"]


def ingress_seq(records: Sequence[tuple[int, str]]) -> int:
    """The seq an `Ack` names for an append given as ``(seq, kind)`` rows: its last event
    before the turn start the decider may have added (its last event if none)."""
    for i, (_, kind) in enumerate(records):
        if kind == Kind.TURN_STARTED and i > 0:
            return records[i - 1][0]
    return records[-1][0] if records else 0


def history_before(st: SessionState) -> tuple[tuple[str, str], ...]:
    """The conversation an agent sees for the next waiting message: everything said so
    far except the messages still waiting for their turns, itself included (a message
    queued behind a running turn sees that turn's answer, stored after it)."""
    waiting = {at for at, _ in st.pending}
    return tuple((role, text) for role, text, at in st.history if at not in waiting)
