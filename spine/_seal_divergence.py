"""Naming what changed in a sealed range: the first divergence between the stored events
and the sealed leaves, classified as modified, missing, inserted or reordered."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ._log import Record
from ._merkle import row_leaf_hash, row_leaf_hashes
from ._seal_record import Seal
from ._seal_report import Finding, FindingKind


def stored_leaves(records: Sequence[Record]) -> list[bytes]:
    """The leaves of stored rows: payload and schema version (see `row_leaf_hash`)."""
    return row_leaf_hashes([r.payload for r in records], [r.version for r in records])


def _leaf(r: Record) -> bytes:
    return row_leaf_hash(r.payload, r.version)


@attrs.frozen
class _Range:
    """A sealed range as stored: where it starts among the stream's records."""

    seal: Seal
    records: Sequence[Record]
    j: int
    at: int

    def finding(self, kind: FindingKind, i: int, detail: str) -> Finding:
        return Finding(kind=kind, seq=self.seal.first + i, seal_seq=self.at, detail=detail)

    def later(self, i: int) -> list[bytes]:
        # Leaves of every stored record after position i of the range (failure path only).
        return stored_leaves(self.records[self.j + i + 1 :])


def locate(
    seal: Seal,
    records: Sequence[Record],
    j: int,
    observed: Sequence[Record],
    got: list[bytes],
    expected: list[bytes],
    at: int,
) -> Finding:
    """Classify the first divergence between the stored range and the sealed leaves."""
    first = seal.first
    rng = _Range(seal, records, j, at)
    n = min(len(got), len(expected))
    i = next((k for k in range(n) if got[k] != expected[k]), n)
    if i == n:
        return _one_side_ends(rng, observed, got, expected, n)
    pos = {h: k for k, h in enumerate(expected)}
    p = pos.get(got[i])
    if p is None:
        return _not_sealed_here(rng, expected, i)
    if p > i:
        return _sealed_later(rng, got, expected, i, p)
    return rng.finding(
        FindingKind.INSERTED,
        i,
        f"a copy of the event sealed at seq {first + p} was inserted at seq {first + i}",
    )


def _one_side_ends(
    rng: _Range, observed: Sequence[Record], got: list[bytes], expected: list[bytes], n: int
) -> Finding:
    """The leaves agree as far as both go: the stored range is short, or renumbered."""
    first = rng.seal.first
    i = n  # the first index past the shorter of the two
    if len(got) < len(expected):
        if expected[i] in rng.later(i - 1):
            return rng.finding(
                FindingKind.REORDERED,
                i,
                f"the event sealed at seq {first + i} was moved past the end of its range",
            )
        return rng.finding(FindingKind.MISSING, i, f"the event sealed at seq {first + i} is gone")
    k = next(k for k in range(n) if observed[k].seq != first + k)
    return rng.finding(
        FindingKind.MODIFIED,
        k,
        f"the sealed event at seq {first + k} is stored under seq {observed[k].seq}",
    )


def _not_sealed_here(rng: _Range, expected: list[bytes], i: int) -> Finding:
    """Seq ``first + i`` holds bytes that are no leaf of the seal."""
    first, records = rng.seal.first, rng.records
    nxt = rng.j + i + 1
    if nxt < len(records) and _leaf(records[nxt]) == expected[i]:
        return rng.finding(
            FindingKind.INSERTED,
            i,
            f"an event that is not in the seal was inserted before sealed seq {first + i}",
        )
    if expected[i] in rng.later(i):
        return rng.finding(
            FindingKind.REORDERED,
            i,
            f"seq {first + i} holds an event from outside the range; "
            "the sealed event was moved later",
        )
    return rng.finding(
        FindingKind.MODIFIED,
        i,
        f"the stored bytes of seq {first + i} differ from the sealed event",
    )


def _sealed_later(rng: _Range, got: list[bytes], expected: list[bytes], i: int, p: int) -> Finding:
    """Seq ``first + i`` holds the event sealed at the later seq ``first + p``."""
    first = rng.seal.first
    rest = rng.later(i)
    if got[i] in rest:
        return rng.finding(
            FindingKind.MODIFIED,
            i,
            f"the stored bytes of seq {first + i} were replaced by a copy of the event "
            f"sealed at seq {first + p}",
        )
    if expected[i] in rest:
        return rng.finding(
            FindingKind.REORDERED,
            i,
            f"seq {first + i} holds the event sealed at seq {first + p}; "
            "the events are out of order",
        )
    return rng.finding(
        FindingKind.MISSING,
        i,
        f"the event sealed at seq {first + i} is gone (seq {first + p} follows early)",
    )
