"""The verification report (`VerifyReport`: per seal its tiers, and what was found where),
and the ``record.verified`` event that records one."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

import attrs

from ._event import Event, Kind
from ._seal_record import Seal


class FindingKind(enum.StrEnum):
    """What a verification found wrong."""

    MODIFIED = "modified"
    MISSING = "missing"
    INSERTED = "inserted"
    REORDERED = "reordered"
    #: The seal itself is malformed, forged, edited or signed by an untrusted key.
    SEAL = "seal"


@attrs.frozen(kw_only=True)
class Finding:
    """One problem: its kind, the seq it is at, and which seal found it."""

    kind: FindingKind
    seq: int
    seal_seq: int
    detail: str

    def __str__(self) -> str:
        return f"{self.kind} at seq {self.seq}: {self.detail}"


@attrs.frozen(kw_only=True)
class Tier:
    """One tier of one seal's check; ``ok`` is None when the tier was not run."""

    name: str
    ok: bool | None
    detail: str = ""


@attrs.frozen(kw_only=True)
class SealCheck:
    """The check of one seal: its tiers in order and what it found."""

    seal_seq: int
    seal: Seal | None
    tiers: tuple[Tier, ...]
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return not self.findings


@attrs.frozen(kw_only=True)
class VerifyReport:
    """The outcome of verifying a stream (or a bundle of it).

    ``findings`` are ordered by seq (a seal problem first on a tie); ``problem`` is the
    first of them: the earliest tampered event or forged seal. ``verified_seq`` is the seq
    of the ``record.verified`` event the verification appended, passing or failing (0 when
    it appended none).
    """

    stream: str
    checks: tuple[SealCheck, ...]
    findings: tuple[Finding, ...]
    verified_seq: int = 0
    #: ``(stream, N)`` when seqs 1..N were imported from that stream (its seals name it;
    #: for a copy of a copy, the latest import).
    origin: tuple[str, int] | None = None

    @property
    def ok(self) -> bool:
        return bool(self.checks) and not self.findings

    @property
    def problem(self) -> Finding | None:
        return self.findings[0] if self.findings else None

    @property
    def ranges(self) -> list[tuple[int, int]]:
        """The seq ranges of the seals that passed."""
        return [(c.seal.first, c.seal.last) for c in self.checks if c.ok and c.seal is not None]

    def summary(self) -> str:
        if not self.checks:
            return f"stream {self.stream!r}: no seal found; nothing is verified"
        if self.ok:
            lo = min(a for a, _ in self.ranges)
            hi = max(b for _, b in self.ranges)
            n = len(self.checks)
            text = f"stream {self.stream!r}: verified seqs {lo}..{hi} under {n} seal(s)"
            if self.origin is not None:
                src, count = self.origin
                text += f"; seqs 1..{count} imported from stream {src!r}, sealed there"
            return text
        assert self.problem is not None
        return f"stream {self.stream!r}: FAILED: {self.problem}"

    def to_dict(self) -> dict[str, Any]:
        out = self._dict()
        if self.origin is not None:
            out["imported"] = {"stream": self.origin[0], "events": self.origin[1]}
        return out

    def _dict(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "ok": self.ok,
            "problem": None if self.problem is None else _finding_dict(self.problem),
            "findings": [_finding_dict(f) for f in self.findings],
            "seals": [
                {
                    "seq": c.seal_seq,
                    "first": None if c.seal is None else c.seal.first,
                    "last": None if c.seal is None else c.seal.last,
                    "keyId": None if c.seal is None else c.seal.key_id,
                    "tiers": [{"name": t.name, "ok": t.ok, "detail": t.detail} for t in c.tiers],
                }
                for c in self.checks
            ],
        }


def _finding_dict(f: Finding) -> dict[str, Any]:
    return {"kind": str(f.kind), "seq": f.seq, "sealSeq": f.seal_seq, "detail": f.detail}


def verified_event(report: VerifyReport, *, time: datetime | None = None) -> Event:
    """The ``record.verified`` event that records ``report``, whether it passed or failed.

    Pure (no log, no clock): a stream's writer computes `verify_records` and appends this
    itself; `verify_stream` does both. Verification is recorded whenever it runs, so a
    replay reproduces the record badge's transitions: a pass moves a sealed record to
    verified, a failure leaves it sealed and says why. ``time`` is the event's time (``None``
    lets the log stamp it).

    A pass records ``first``/``last`` (the seqs the seals cover), ``ok: true``, ``seals``
    (the seqs of the seal events) and ``keyIds``. A failure records ``ok: false``,
    ``outcome: "failed"``, ``problem`` (the first finding in words, or that no seal was
    found), ``seals`` (the seal events checked) and, when something was found, ``finding``
    (its kind), ``seq`` (the earliest tampered seq or forged seal) and ``sealSeq`` (the seal
    that found it).
    """
    record: dict[str, Any]
    if report.ok:
        good = [c.seal for c in report.checks if c.seal is not None]
        record = {
            "first": min(s.first for s in good),
            "last": max(s.last for s in good),
            "ok": True,
            "seals": [s.seq for s in good],
            "keyIds": sorted({s.key_id for s in good}),
        }
    else:
        problem = report.problem
        record = {
            "ok": False,
            "outcome": "failed",
            "problem": "no seal found; nothing is verified" if problem is None else str(problem),
            "seals": [c.seal_seq for c in report.checks],
        }
        if problem is not None:
            record["finding"] = str(problem.kind)
            record["seq"] = problem.seq
            record["sealSeq"] = problem.seal_seq
    return Event(kind=Kind.RECORD_VERIFIED, time=time, record=record)
