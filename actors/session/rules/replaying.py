"""What a replay's turn is answered from: the tool calls the replayed turn stored, each with
its stored result (pure: events in, calls out)."""

from __future__ import annotations

from collections.abc import Sequence

from projections import thread_from
from spine import Event, Kind

#: One stored call: (tool, input JSON, result, is_error).
Recorded = tuple[str, str, str, bool]


def recorded_calls(events: Sequence[Event], turn_id: int) -> tuple[Recorded, ...]:
    """The calls of the turn answering the user message at seq ``turn_id`` in ``events``
    (a session's stream), in the order they were made, each with its stored result; a
    call without a result (its turn was cut) is left out: it has nothing to serve."""
    turn = thread_from(list(events)).turn(turn_id)
    if turn is None:
        return ()
    answers = set(turn.answers)
    mine = [e for e in events if e.seq in answers]
    results = {e.tool_use_id: e for e in mine if e.kind == Kind.TOOL_RESULT}
    out: list[Recorded] = []
    for e in mine:
        if e.kind != Kind.TOOL_CALL:
            continue
        r = results.get(e.tool_use_id)
        if r is not None:
            out.append((e.tool, e.input, r.result, r.is_error))
    return tuple(out)
