"""Verification in tiers: the engine that checks every seal among a stream's records.

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

`verified_event` (in `spine._seal_report`, with the report) turns a report into the
``record.verified`` event that records it, pass or fail; `verify_stream` verifies a log's
stream and appends that event. Divergences are classified in `spine._seal_divergence`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import attrs
import orjson

from ._errors import StorageError
from ._event import Kind
from ._frontier import frontier_findings
from ._ids import validate_session_id
from ._keys import Keyring, KeysLike
from ._log import Log, Record
from ._merkle import merkle_root
from ._seal_divergence import locate, stored_leaves
from ._seal_errors import MalformedSealError
from ._seal_record import Seal
from ._seal_report import Finding, FindingKind, SealCheck, Tier, VerifyReport, verified_event
from ._sealing import Origins, origin_in, parse_seal_event

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
    origin = origin_in(records)
    checks = [
        _check_seal(stream, records, j, ring, columns, origin)
        for j, kind in enumerate([r.kind for r in records])
        if kind == sealed
    ]
    authentic = [c.seal for c in checks if c.seal is not None and c.tiers[2].ok]
    findings = sorted(
        (*(f for c in checks for f in c.findings), *frontier_findings(records, authentic)),
        key=lambda f: (f.seq, f.kind != FindingKind.SEAL),
    )
    return VerifyReport(
        stream=stream,
        checks=tuple(checks),
        findings=tuple(findings),
        origin=origin[-1] if origin else None,
    )


def _not_run(name: str) -> Tier:
    return Tier(name=name, ok=None, detail="not run: the seal is not authentic")


def _check_seal(
    stream: str,
    records: Sequence[Record],
    js: int,
    ring: Keyring,
    columns: bool = True,
    origin: Origins = (),
) -> SealCheck:
    at = records[js].seq
    seal: Seal | None = None
    expected: list[bytes] = []
    try:
        parsed = parse_seal_event(stream, records[js], origin)
    except MalformedSealError as exc:
        problem: str | None = exc.problem
    else:
        seal = parsed
        expected = parsed.leaf_list()
        problem = parsed.signature_problem(ring) or parsed.index_problem(expected)
    if problem is not None or seal is None:
        return _unauthentic(at, seal, problem)
    sig_tier = Tier(name="signature", ok=True, detail=f"signed by key {seal.key_id}")

    # The range starts at the first stored seq >= first; it cannot run into its own seal
    # event, which in an intact log comes after it.
    j = _start(records, seal.first)
    observed = records[j : min(j + seal.count, max(js, j))]
    got = stored_leaves(observed)
    bad_seq, cont = _contiguity(seal, observed)
    same = b"".join(got) == seal.leaves
    root = _root_tier(seal, got, same)
    tiers = (cont, root, sig_tier)
    if same and bad_seq is None:
        column = _column_problem(observed) if columns else None
        if column is None:
            proofs = Tier(name="proofs", ok=True, detail=f"{seal.count} events proven")
            return SealCheck(seal_seq=at, seal=seal, tiers=(*tiers, proofs), findings=())
        r, detail = column
        finding = Finding(kind=FindingKind.MODIFIED, seq=r.seq, seal_seq=at, detail=detail)
    else:
        finding = locate(seal, records, j, observed, got, expected, at)
    proofs = Tier(name="proofs", ok=False, detail=str(finding))
    return SealCheck(seal_seq=at, seal=seal, tiers=(*tiers, proofs), findings=(finding,))


def _unauthentic(at: int, seal: Seal | None, problem: str | None) -> SealCheck:
    """The check of a seal that is malformed, forged, edited or untrusted: nothing else runs."""
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


def _contiguity(seal: Seal, observed: Sequence[Record]) -> tuple[int | None, Tier]:
    """Where in the range the stored seqs stop running ``first..last`` (None: nowhere),
    and the contiguity tier."""
    bad_seq: int | None = None
    if [r.seq for r in observed] != list(range(seal.first, seal.last + 1)):
        bad_seq = next(
            (i for i, r in enumerate(observed) if r.seq != seal.first + i), len(observed)
        )
    if bad_seq is None:
        return None, Tier(name="contiguity", ok=True, detail=f"seqs {seal.first}..{seal.last}")
    found = observed[bad_seq].seq if bad_seq < len(observed) else None
    return bad_seq, Tier(
        name="contiguity",
        ok=False,
        detail=f"expected seq {seal.first + bad_seq}, found "
        + ("the end of the range" if found is None else f"seq {found}"),
    )


def _root_tier(seal: Seal, got: list[bytes], same: bool) -> Tier:
    # An authentic index already reproduces the root, so equal leaves need no second tree.
    root_ok = same or merkle_root(got) == seal.root
    return Tier(
        name="root",
        ok=root_ok,
        detail="recomputed root equals the signed root"
        if root_ok
        else "the root recomputed from the stored bytes differs from the signed root",
    )


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


# -- against a log -----------------------------------------------------------------------


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
