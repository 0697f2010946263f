"""Verification in tiers, and the report that names what failed and where.

The engine (`verify_records`) is pure: it takes a stream's records as storage returned them
(from a log or from a bundle) and trusted keys. For each seal found among them it runs:

- signature: the seal is well formed, signed by a trusted key, and its leaf index
  reproduces the signed root; a seal failing this is forged or edited, and its range is
  not checked further (nothing it says can be trusted);
- contiguity: the stored seqs of its range are exactly ``first..last``;
- root: the Merkle root recomputed from the stored bytes equals the signed root;
- proofs: every stored event is the sealed leaf at its position, which is the same as its
  RFC 6962 audit path (taken from the authenticated index) verifying against the root.

When a range fails, the first divergence between the stored events and the sealed leaves
is classified as modified, missing, inserted or reordered and reported by seq.

`verified_event` turns a report into the ``record.verified`` event that records it, pass or
fail (also pure); `verify_stream` verifies a log's stream and appends that event.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import attrs
import orjson

from ._errors import StorageError
from ._event import Event, Kind
from ._ids import validate_session_id
from ._keys import Keyring, KeysLike
from ._log import Log, Record
from ._merkle import merkle_root, row_leaf_hash, row_leaf_hashes
from ._seal_errors import MalformedSealError
from ._sealing import Seal, parse_seal_event


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
            return f"stream {self.stream!r}: verified seqs {lo}..{hi} under {n} seal(s)"
        assert self.problem is not None
        return f"stream {self.stream!r}: FAILED: {self.problem}"

    def to_dict(self) -> dict[str, Any]:
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


# -- the engine --------------------------------------------------------------------------


def verify_records(
    stream: str,
    records: Sequence[Record],
    keys: KeysLike,
    *,
    columns: bool = True,
) -> VerifyReport:
    """Verify every seal among ``records`` (one stream, in storage order); ``columns``:
    check the stored ``kind`` column of sealed rows against their payloads too."""
    ring = Keyring.of(keys)
    sealed = str(Kind.RECORD_SEALED)
    checks = [
        _check_seal(stream, records, j, ring, columns)
        for j, kind in enumerate([r.kind for r in records])
        if kind == sealed
    ]
    findings = sorted(
        (f for c in checks for f in c.findings),
        key=lambda f: (f.seq, f.kind != FindingKind.SEAL),
    )
    return VerifyReport(stream=stream, checks=tuple(checks), findings=tuple(findings))


def _not_run(name: str) -> Tier:
    return Tier(name=name, ok=None, detail="not run: the seal is not authentic")


def _check_seal(
    stream: str, records: Sequence[Record], js: int, ring: Keyring, columns: bool = True
) -> SealCheck:
    at = records[js].seq
    seal: Seal | None = None
    expected: list[bytes] = []
    try:
        parsed = parse_seal_event(stream, records[js])
    except MalformedSealError as exc:
        problem: str | None = exc.problem
    else:
        seal = parsed
        expected = parsed.leaf_list()
        problem = parsed.signature_problem(ring) or parsed.index_problem(expected)
    if problem is not None or seal is None:
        detail = f"the seal stored at seq {at} is forged, edited or untrusted: {problem}"
        return SealCheck(
            seal_seq=at,
            seal=seal,
            tiers=(
                _not_run("contiguity"),
                _not_run("root"),
                Tier(name="signature", ok=False, detail=str(problem)),
                _not_run("proofs"),
            ),
            findings=(Finding(kind=FindingKind.SEAL, seq=at, seal_seq=at, detail=detail),),
        )
    sig_tier = Tier(name="signature", ok=True, detail=f"signed by key {seal.key_id}")

    # The range starts at the first stored seq >= first; it cannot run into its own seal
    # event, which in an intact log comes after it.
    j = _start(records, seal.first)
    observed = records[j : min(j + seal.count, max(js, j))]
    got = _leaves(observed)

    bad_seq: int | None = None
    if [r.seq for r in observed] != list(range(seal.first, seal.last + 1)):
        bad_seq = next(
            (i for i, r in enumerate(observed) if r.seq != seal.first + i), len(observed)
        )
    if bad_seq is None:
        cont = Tier(name="contiguity", ok=True, detail=f"seqs {seal.first}..{seal.last}")
    else:
        found = observed[bad_seq].seq if bad_seq < len(observed) else None
        cont = Tier(
            name="contiguity",
            ok=False,
            detail=f"expected seq {seal.first + bad_seq}, found "
            + ("the end of the range" if found is None else f"seq {found}"),
        )

    same = b"".join(got) == seal.leaves
    # An authentic index already reproduces the root, so equal leaves need no second tree.
    root_ok = same or merkle_root(got) == seal.root
    root = Tier(
        name="root",
        ok=root_ok,
        detail="recomputed root equals the signed root"
        if root_ok
        else "the root recomputed from the stored bytes differs from the signed root",
    )
    if same and bad_seq is None:
        column = _column_problem(observed) if columns else None
        if column is not None:
            r, detail = column
            finding = Finding(kind=FindingKind.MODIFIED, seq=r.seq, seal_seq=at, detail=detail)
            proofs = Tier(name="proofs", ok=False, detail=str(finding))
            return SealCheck(
                seal_seq=at, seal=seal, tiers=(cont, root, sig_tier, proofs), findings=(finding,)
            )
        proofs = Tier(name="proofs", ok=True, detail=f"{seal.count} events proven")
        return SealCheck(seal_seq=at, seal=seal, tiers=(cont, root, sig_tier, proofs), findings=())

    finding = _locate(seal, records, j, observed, got, expected, at)
    proofs = Tier(name="proofs", ok=False, detail=str(finding))
    return SealCheck(
        seal_seq=at, seal=seal, tiers=(cont, root, sig_tier, proofs), findings=(finding,)
    )


def _leaves(records: Sequence[Record]) -> list[bytes]:
    """The leaves of stored rows: payload and schema version (see `row_leaf_hash`)."""
    return row_leaf_hashes([r.payload for r in records], [r.version for r in records])


def _leaf(r: Record) -> bytes:
    return row_leaf_hash(r.payload, r.version)


def _column_problem(observed: Sequence[Record]) -> tuple[Record, str] | None:
    """The first sealed row whose ``kind`` or ``position`` column disagrees with what was
    sealed.

    Seals hash the payload bytes and the schema version, but readers also use the row's
    ``kind`` column (projections dispatch on it) and its global ``position`` (a
    projection folds a stream in position order), so an edited column would change
    derived state under an intact seal. The kind must equal the payload's own ``kind``
    member; positions must rise with seqs. Only the ``kind`` member of the payload is
    read, nothing is decoded into an event, so a payload that does not decode is still
    checked. (``stream`` and ``seq`` are covered by contiguity and the leaves.)
    """
    for k in range(1, len(observed)):
        a, b = observed[k - 1], observed[k]
        if a.position < b.position:
            continue
        # Name the row that is out of place: the one without which its neighbours are in
        # order (the earlier one when either would do, as at the ends of the range).
        pp = observed[k - 2] if k >= 2 else None
        nx = observed[k + 1] if k + 1 < len(observed) else None
        without_a = pp is None or pp.position < b.position
        without_b = nx is None or a.position < nx.position
        r = b if without_b and not without_a else a
        return r, (
            f"the position column of seq {r.seq} ({r.position}) puts it out of seq order "
            f"(seq {a.seq} at {a.position}, seq {b.seq} at {b.position}): the order in "
            "which the stream is read by position was changed"
        )
    for r in observed:
        try:
            stored = orjson.loads(r.payload).get("kind")
        except (orjson.JSONDecodeError, AttributeError):
            stored = None
        if stored != r.kind:
            return r, (
                f"the kind column of seq {r.seq} says {r.kind!r}, its sealed payload {stored!r}"
            )
    return None


def _start(records: Sequence[Record], first: int) -> int:
    """Index of the first record with seq >= ``first``: direct in an intact log, else a scan."""
    if records:
        guess = first - records[0].seq
        if (
            0 <= guess < len(records)
            and records[guess].seq == first
            and (guess == 0 or records[guess - 1].seq < first)
        ):
            return guess
    return next((i for i, r in enumerate(records) if r.seq >= first), len(records))


def _locate(
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

    def finding(kind: FindingKind, i: int, detail: str) -> Finding:
        return Finding(kind=kind, seq=first + i, seal_seq=at, detail=detail)

    def later(i: int) -> list[bytes]:
        # Leaves of every stored record after position i of the range (failure path only).
        return _leaves(records[j + i + 1 :])

    n = min(len(got), len(expected))
    i = next((k for k in range(n) if got[k] != expected[k]), n)
    if i == n:
        if len(got) < len(expected):
            if expected[i] in later(i - 1):
                return finding(
                    FindingKind.REORDERED,
                    i,
                    f"the event sealed at seq {first + i} was moved past the end of its range",
                )
            return finding(FindingKind.MISSING, i, f"the event sealed at seq {first + i} is gone")
        k = next(k for k in range(n) if observed[k].seq != first + k)
        return finding(
            FindingKind.MODIFIED,
            k,
            f"the sealed event at seq {first + k} is stored under seq {observed[k].seq}",
        )
    pos = {h: k for k, h in enumerate(expected)}
    p = pos.get(got[i])
    if p is None:
        nxt = j + i + 1
        if nxt < len(records) and _leaf(records[nxt]) == expected[i]:
            return finding(
                FindingKind.INSERTED,
                i,
                f"an event that is not in the seal was inserted before sealed seq {first + i}",
            )
        if expected[i] in later(i):
            return finding(
                FindingKind.REORDERED,
                i,
                f"seq {first + i} holds an event from outside the range; "
                "the sealed event was moved later",
            )
        return finding(
            FindingKind.MODIFIED,
            i,
            f"the stored bytes of seq {first + i} differ from the sealed event",
        )
    if p > i:
        rest = later(i)
        if got[i] in rest:
            return finding(
                FindingKind.MODIFIED,
                i,
                f"the stored bytes of seq {first + i} were replaced by a copy of the event "
                f"sealed at seq {first + p}",
            )
        if expected[i] in rest:
            return finding(
                FindingKind.REORDERED,
                i,
                f"seq {first + i} holds the event sealed at seq {first + p}; "
                "the events are out of order",
            )
        return finding(
            FindingKind.MISSING,
            i,
            f"the event sealed at seq {first + i} is gone (seq {first + p} follows early)",
        )
    return finding(
        FindingKind.INSERTED,
        i,
        f"a copy of the event sealed at seq {first + p} was inserted at seq {first + i}",
    )


# -- against a log -----------------------------------------------------------------------


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


def verify_stream(
    log: Log,
    stream: str,
    keys: KeysLike,
    *,
    append: bool = True,
    time: datetime | None = None,
) -> VerifyReport:
    """Verify every seal of ``stream`` and append its ``record.verified`` event.

    The event is appended whether verification passes or fails (see `verified_event`), and
    the report's ``verified_seq`` names it. The stream is read whole in one read, in
    storage order, without trusting the log's own idea of its last seq. ``append=False``
    checks without writing. ``time`` defaults to now.

    A log tampered with so that it cannot take the event (rows renumbered over the seq the
    append would use) still gets its report: a failed verification whose append the
    storage refuses comes back with ``verified_seq`` 0 instead of raising.
    """
    validate_session_id(stream)
    records = log.read(stream, 0, None)
    report = verify_records(stream, records, keys)
    if not append:
        return report
    when = datetime.now(UTC) if time is None else time
    try:
        res = log.append(stream, [verified_event(report, time=when)])
    except StorageError:
        if report.ok:
            raise
        return report
    return attrs.evolve(report, verified_seq=res.first_seq)
