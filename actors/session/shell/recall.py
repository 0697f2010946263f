"""What a turn reads back from its own session's log (on a tool's thread): an event by its
seq (the `recall` tool), and the Merkle root of the events a compaction stands for."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import attrs

from spine import Event, Log, Record
from spine.seal import MerkleFrontier, row_leaf_hash

from ...agents.tools import ToolError

__all__ = ["recalled", "rooted"]

#: Sessions whose last rooted span is remembered in this process (one session a process,
#: a few where one process hosts many).
MAX_SPANS = 64


@attrs.define
class _Span:
    """The last span rooted for a session: its ends, their leaves, the frontier."""

    first: int
    first_leaf: bytes
    last: int
    last_leaf: bytes
    frontier: MerkleFrontier


# Each compaction covers from where the earlier ones began to a later seq, so hashing it
# whole costs the whole session so far, growing without end. The log is append-only: the
# frontier of the last span, extended by the events stored since, gives the same root.
# Both ends it was taken at are checked against the log before it is used.
_SPANS: dict[str, _Span] = {}
_SPANS_LOCK = threading.Lock()


def _records(log: Log, stream: str, first: int, last: int) -> Iterator[Record]:
    """Stored records ``first..last`` of ``stream``, read in pages."""
    after = first - 1
    while after < last:
        page = log.read(stream, after, min(1000, last - after))
        if not page:
            return
        yield from page
        after = page[-1].seq


def _leaf(r: Record) -> bytes:
    return row_leaf_hash(r.payload, r.version)


def recalled(log: Log, session_id: str, seq: int) -> str:
    """What stored event ``seq`` holds: a result, a text, else its JSON."""
    page = log.read(session_id, seq - 1, 1)
    if not page or page[0].seq != seq:
        raise ToolError(f"this session has no event {seq}")
    ev = page[0].event()
    return ev.result or ev.text or page[0].payload.decode()


def _extended(log: Log, session_id: str, first: int, last: int) -> _Span | None:
    """The remembered span of ``session_id`` grown to ``last``, if it starts at ``first``,
    ends at or before ``last`` and both its ends are still the log's."""
    with _SPANS_LOCK:
        span = _SPANS.get(session_id)
    if span is None or span.first != first or span.last > last:
        return None
    head = log.read(session_id, first - 1, 1)
    if not head or head[0].seq != first or _leaf(head[0]) != span.first_leaf:
        return None
    rows = list(_records(log, session_id, span.last, last))
    if len(rows) != last - span.last + 1 or _leaf(rows[0]) != span.last_leaf:
        return None
    frontier = span.frontier.copy()
    frontier.extend([_leaf(r) for r in rows[1:]])
    return _Span(first, span.first_leaf, last, _leaf(rows[-1]), frontier)


def _span(log: Log, session_id: str, first: int, last: int) -> _Span | None:
    span = _extended(log, session_id, first, last)
    if span is None:
        leaves = [_leaf(r) for r in _records(log, session_id, first, last)]
        if len(leaves) != last - first + 1:
            return None
        frontier = MerkleFrontier()
        frontier.extend(leaves)
        span = _Span(first, leaves[0], last, leaves[-1], frontier)
    with _SPANS_LOCK:
        _SPANS.pop(session_id, None)
        _SPANS[session_id] = span
        while len(_SPANS) > MAX_SPANS:
            _SPANS.pop(next(iter(_SPANS)))
    return span


def rooted(log: Log, session_id: str, ev: Event) -> Event:
    """A compaction with the Merkle root of the events it covers (the seals' leaves), so
    that a sealed record proves exactly which events the summary stands for."""
    first, last = ev.extra.get("fromSeq"), ev.extra.get("toSeq")
    if not isinstance(first, int) or not isinstance(last, int) or first > last or first < 1:
        return ev
    try:
        span = _span(log, session_id, first, last)
    except Exception:  # the summary stands without its root
        return ev
    if span is None:
        return ev
    root = span.frontier.root()
    return attrs.evolve(ev, extra={**ev.extra, "root": root.hex(), "count": span.frontier.size})
