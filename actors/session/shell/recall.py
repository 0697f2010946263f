"""What a turn reads back from its own session's log (on a tool's thread): an event by its
seq (the `recall` tool), and the Merkle root of the events a compaction stands for."""

from __future__ import annotations

from collections.abc import Iterator

import attrs

from spine import Event, Log, Record
from spine.seal import merkle_root, row_leaf_hash

from ...agents.tools import ToolError

__all__ = ["recalled", "rooted"]


def _records(log: Log, stream: str, first: int, last: int) -> Iterator[Record]:
    """Stored records ``first..last`` of ``stream``, read in pages."""
    after = first - 1
    while after < last:
        page = log.read(stream, after, min(1000, last - after))
        if not page:
            return
        yield from page
        after = page[-1].seq


def recalled(log: Log, session_id: str, seq: int) -> str:
    """What stored event ``seq`` holds: a result, a text, else its JSON."""
    page = log.read(session_id, seq - 1, 1)
    if not page or page[0].seq != seq:
        raise ToolError(f"this session has no event {seq}")
    ev = page[0].event()
    return ev.result or ev.text or page[0].payload.decode()


def rooted(log: Log, session_id: str, ev: Event) -> Event:
    """A compaction with the Merkle root of the events it covers (the seals' leaves), so
    that a sealed record proves exactly which events the summary stands for."""
    first, last = ev.extra.get("fromSeq"), ev.extra.get("toSeq")
    if not isinstance(first, int) or not isinstance(last, int) or first > last:
        return ev
    try:
        rows = list(_records(log, session_id, first, last))
    except Exception:  # the summary stands without its root
        return ev
    if len(rows) != last - first + 1:
        return ev
    root = merkle_root([row_leaf_hash(r.payload, r.version) for r in rows])
    return attrs.evolve(ev, extra={**ev.extra, "root": root.hex(), "count": len(rows)})
