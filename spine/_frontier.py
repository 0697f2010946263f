"""The Merkle root of any prefix of a stream without reading the prefix: each seal event
stores the RFC 6962 frontier of seqs 1..``last`` of its stream (``extra.frontier``: the
roots of its perfect subtrees, largest first), so the root at ``at`` is the frontier of
the newest seal whose range ends at or below ``at``, extended by the rows after it.

A stream with no such seal (never sealed, or sealed before seals stored frontiers) is read
from its first row. The frontier is not part of the signed seal; verification recomputes
it (`frontier_problem`) and the next seal covers the event that holds it, as it covers the
seal itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._errors import InvalidArgumentError
from ._event import Kind
from ._log import Log, Record
from ._merkle import HASH_SIZE, MerkleFrontier, row_leaf_hashes
from ._seal_divergence import stored_leaves
from ._seal_record import Seal
from ._seal_report import Finding, FindingKind

#: The seal event's ``extra`` key holding the frontier of seqs 1..the seal's ``last``.
FRONTIER = "frontier"

_PAGE = 5000
#: Seal rows read per page while looking for the newest frontier (they are large: each
#: holds its range's leaf index).
_SEAL_PAGE = 8
#: Seqs back from ``at`` first searched for a seal (the daemon seals every 1000 events).
_WINDOW = 2048


def frontier_extra(frontier: MerkleFrontier) -> dict[str, Any]:
    return {FRONTIER: [h.hex() for h in frontier.peaks()]}


def parse_frontier(extra: Mapping[str, Any], size: int) -> MerkleFrontier | None:
    """The frontier of ``size`` leaves an event's ``extra`` holds; None when it holds
    none; ValueError when it holds a malformed one."""
    raw = extra.get(FRONTIER)
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(
        isinstance(h, str) and len(h) == 2 * HASH_SIZE and h == h.lower() for h in raw
    ):
        raise ValueError("'frontier' must be a list of lowercase hex SHA-256 digests")
    try:
        roots = [bytes.fromhex(h) for h in raw]
    except ValueError:
        raise ValueError("'frontier' must be a list of lowercase hex SHA-256 digests") from None
    return MerkleFrontier.from_peaks(size, roots)


def _stored(r: Record) -> tuple[int, MerkleFrontier] | None:
    """(the seal's last seq, its frontier) from a seal row, None without a usable one."""
    try:
        ev = r.event()
        last = ev.record.get("last") if ev.record else None
        if not isinstance(last, int) or isinstance(last, bool) or not 0 < last < r.seq:
            return None
        f = parse_frontier(ev.extra, last)
    except (ValueError, TypeError):
        return None
    return None if f is None else (last, f)


def _newest_seal(log: Log, stream: str, at: int) -> MerkleFrontier | None:
    """The frontier of the seal with the highest ``last`` <= ``at`` among the seal rows at
    seqs up to ``at + 1`` (where a seal of the range ending at ``at`` is stored), searched
    backwards in growing windows."""
    window = _WINDOW
    while True:
        start = max(0, at - window)
        best: tuple[int, MerkleFrontier] | None = None
        after = start
        while True:
            page = log.read(stream, after, _SEAL_PAGE, kinds=[Kind.RECORD_SEALED])
            rows = [r for r in page if r.seq <= at + 1]
            for r in rows:
                got = _stored(r)
                if got is not None and got[0] <= at and (best is None or got[0] > best[0]):
                    best = got
            if len(rows) < len(page) or len(page) < _SEAL_PAGE:
                break
            after = page[-1].seq
        if best is not None or start == 0:
            return None if best is None else best[1]
        window *= 8


def frontier_at(log: Log, stream: str, at: int) -> MerkleFrontier:
    """The frontier of the leaves of seqs 1..``at`` of ``stream``: from its newest seal at
    or below ``at`` (`FRONTIER`) and the rows after that seal's range; every row from the
    first when no seal stores one."""
    if not isinstance(at, int) or isinstance(at, bool) or at < 0:
        raise InvalidArgumentError(f"a prefix ends at a seq of at least 0, got {at!r}")
    f = (_newest_seal(log, stream, at) if at else None) or MerkleFrontier()
    while f.size < at:
        page = log.read(stream, f.size, min(_PAGE, at - f.size))
        if not page or page[0].seq != f.size + 1 or page[-1].seq != f.size + len(page):
            raise InvalidArgumentError(
                f"stream {stream!r} has no contiguous rows 1..{at} (at seq {f.size + 1})"
            )
        f.extend(row_leaf_hashes([r.payload for r in page], [r.version for r in page]))
    return f


def prefix_root(log: Log, stream: str, at: int) -> bytes:
    """The Merkle root of seqs 1..``at`` of ``stream``, as a seal of them computes it."""
    return frontier_at(log, stream, at).root()


def frontier_findings(records: Sequence[Record], sealed: Sequence[Seal]) -> list[Finding]:
    """A finding for each authentic seal of ``records`` (the stream's rows in order) whose
    stored frontier is not that of seqs 1..its ``last``: the leaves a seal signed where one
    covers them (a modified row is that seal's finding, not this one), the stored rows'
    elsewhere. A seal whose prefix has a gap is left to the contiguity tier."""
    leaves = dict(zip((r.seq for r in records), stored_leaves(records), strict=True))
    for s in sealed:
        leaves.update(zip(range(s.first, s.last + 1), s.leaf_list(), strict=True))
    out: list[Finding] = []
    f = MerkleFrontier()
    for s in sorted((s for s in sealed if s.frontier), key=lambda s: s.last):
        want = [leaves.get(q) for q in range(f.size + 1, s.last + 1)]
        if any(h is None for h in want):
            break
        f.extend([h for h in want if h is not None])
        if f.peaks() != s.frontier:
            detail = f"the frontier stored with the seal is not that of seqs 1..{s.last}"
            out.append(Finding(kind=FindingKind.SEAL, seq=s.seq, seal_seq=s.seq, detail=detail))
    return out
