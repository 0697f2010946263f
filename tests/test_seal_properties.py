"""Property tests: every single tamper inside a sealed range is detected and located."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spine import Event, Kind, MemoryLog, Record
from spine.seal import (
    Bundle,
    FindingKind,
    SigningKey,
    build_bundle,
    seal_stream,
    verify_records,
)

STREAM = "prop-1"
KEY = SigningKey.generate()
OTHER = SigningKey.generate()
T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
SETTINGS = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass
class Sealed:
    log: MemoryLog
    records: list[Record]
    sealed_through: int  # the newest seal's last seq: everything up to it is covered

    def covered(self) -> int:
        """How many leading records are covered by some seal."""
        return self.sealed_through


@st.composite
def sealed_streams(draw: st.DrawFn) -> Sealed:
    log = MemoryLog()
    for n in draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)):
        texts = draw(st.lists(st.text(max_size=6), min_size=n, max_size=n))
        log.append(STREAM, [Event(kind=Kind.ASSISTANT, text=t) for t in texts])
        seal = seal_stream(log, STREAM, KEY, time=T0)
    tail = draw(st.integers(0, 2))
    if tail:
        log.append(STREAM, [Event(kind=Kind.USER_MESSAGE, text="after") for _ in range(tail)])
    return Sealed(log, log.read(STREAM, 0, None), seal.last)


def _rec(r: Record, *, seq: int | None = None, payload: bytes | None = None) -> Record:
    return Record(
        r.stream,
        r.seq if seq is None else seq,
        r.position,
        r.kind,
        r.payload if payload is None else payload,
    )


def _renumber(records: list[Record], start: int, delta: int) -> list[Record]:
    return records[:start] + [_rec(r, seq=r.seq + delta) for r in records[start:]]


def _check(records: list[Record], kinds: set[FindingKind], seq: int) -> None:
    report = verify_records(STREAM, records, KEY.public_key)
    assert not report.ok, "tampering went unnoticed"
    problem = report.problem
    assert problem is not None
    assert problem.seq == seq and problem.kind in kinds, (
        f"expected {sorted(kinds)} at seq {seq}, got {problem}"
    )


def test_an_untampered_sealed_stream_verifies() -> None:
    """Every generated stream verifies before it is tampered with."""

    @settings(max_examples=200, deadline=None)
    @given(sealed_streams())
    def run(s: Sealed) -> None:
        assert verify_records(STREAM, s.records, KEY.public_key).ok

    run()


@SETTINGS
@given(sealed_streams(), st.data())
def test_a_flipped_byte_is_found_at_its_seq(s: Sealed, data: st.DataObject) -> None:
    """XOR-ing any byte of any covered event is reported at that event's seq."""
    p = data.draw(st.integers(0, s.covered() - 1))
    r = s.records[p]
    b = data.draw(st.integers(0, len(r.payload) - 1))
    mask = data.draw(st.integers(1, 255))
    payload = bytearray(r.payload)
    payload[b] ^= mask
    records = list(s.records)
    records[p] = _rec(r, payload=bytes(payload))
    # A covered seal event is found either as a broken seal or by the seal covering it.
    kinds = {FindingKind.MODIFIED}
    if r.kind == Kind.RECORD_SEALED:
        kinds.add(FindingKind.SEAL)
    if bytes(payload) in {x.payload for x in s.records}:
        # The flip turned the event into an exact copy of another one (events stamped in
        # the same microsecond differ only in their seq digit): reporting that copy as
        # inserted at this seq is as right as reporting a modification there.
        kinds.add(FindingKind.INSERTED)
    _check(records, kinds, r.seq)


@SETTINGS
@given(sealed_streams(), st.data())
def test_a_deleted_event_is_found_missing_at_its_seq(s: Sealed, data: st.DataObject) -> None:
    """Removing any covered event, with or without renumbering the rest, reports it missing."""
    p = data.draw(st.integers(0, s.covered() - 1))
    records = s.records[:p] + s.records[p + 1 :]
    if data.draw(st.booleans(), label="renumber"):
        records = _renumber(records, p, -1)
    _check(records, {FindingKind.MISSING}, p + 1)


@SETTINGS
@given(sealed_streams(), st.data())
def test_an_inserted_event_is_found_at_its_seq(s: Sealed, data: st.DataObject) -> None:
    """An event slipped in before any covered event is reported as inserted there."""
    p = data.draw(st.integers(0, s.covered() - 1))
    forged_text = data.draw(st.text(max_size=8))
    payload = orjson.dumps({"seq": p + 1, "kind": "assistant.message", "text": "F" + forged_text})
    forged = Record(STREAM, p + 1, 0, Kind.ASSISTANT, payload)
    records = [*s.records[:p], forged, *s.records[p:]]
    if data.draw(st.booleans(), label="renumber"):
        records = _renumber(records, p + 1, +1)
    _check(records, {FindingKind.INSERTED}, p + 1)


@SETTINGS
@given(sealed_streams(), st.data())
def test_two_swapped_events_are_found_reordered(s: Sealed, data: st.DataObject) -> None:
    """Swapping two covered events (whole rows, or only their bytes) is reported reordered."""
    p = data.draw(st.integers(0, s.covered() - 2)) if s.covered() > 1 else None
    if p is None:
        return
    q = data.draw(st.integers(p + 1, s.covered() - 1))
    records = list(s.records)
    a, b = records[p], records[q]
    if data.draw(st.booleans(), label="rows"):
        records[p], records[q] = b, a
    else:
        records[p] = Record(a.stream, a.seq, a.position, b.kind, b.payload)
        records[q] = Record(b.stream, b.seq, b.position, a.kind, a.payload)
    _check(records, {FindingKind.REORDERED}, p + 1)


def _edits() -> st.SearchStrategy[tuple[str, object]]:
    return st.one_of(
        st.tuples(st.just("root"), st.binary(min_size=32, max_size=32).map(bytes.hex)),
        st.tuples(st.just("signature"), st.binary(min_size=64, max_size=64).map(bytes.hex)),
        st.tuples(st.just("first"), st.integers(-1, 1)),
        st.tuples(st.just("last"), st.integers(-1, 1)),
        st.tuples(st.just("count"), st.integers(-1, 1)),
        st.tuples(st.just("time"), st.just("2030-01-01T00:00:00Z")),
        st.tuples(st.just("keyId"), st.sampled_from([OTHER.key_id, "0" * 32])),
        st.tuples(st.just("stream"), st.just("other-stream")),
        st.tuples(st.just("leaves"), st.integers(0, 10_000)),
        st.tuples(st.just("v"), st.just(2)),
        st.tuples(st.just("extra"), st.just("x")),
        st.tuples(st.just("drop"), st.sampled_from(["root", "leaves", "keyId", "signature"])),
    )


@SETTINGS
@given(sealed_streams(), _edits(), st.data())
def test_an_edited_seal_is_reported_as_a_broken_seal(
    s: Sealed, edit: tuple[str, object], data: st.DataObject
) -> None:
    """Any edit to any seal's description, even the newest uncovered one, names that seal."""
    seal_at = [i for i, r in enumerate(s.records) if r.kind == Kind.RECORD_SEALED]
    i = data.draw(st.sampled_from(seal_at))
    r = s.records[i]
    d = orjson.loads(r.payload)
    rec = d["record"]
    field, value = edit
    if field in ("first", "last", "count"):
        assert isinstance(value, int)
        rec[field] += value or 1
    elif field == "leaves":
        raw = bytearray(base64.b64decode(rec["leaves"]))
        assert isinstance(value, int)
        raw[value % len(raw)] ^= 0x01
        rec["leaves"] = base64.b64encode(bytes(raw)).decode()
    elif field == "extra":
        rec["note"] = value
    elif field == "drop":
        assert isinstance(value, str)
        del rec[value]
    elif field == "time":
        rec["time"] = value
        d["time"] = value  # keep the event's time in step, as a careful forger would
    else:
        if rec.get(field) == value:
            return
        rec[field] = value
    records = list(s.records)
    records[i] = _rec(r, payload=orjson.dumps(d))
    _check(records, {FindingKind.SEAL}, r.seq)


@st.composite
def bundles(draw: st.DrawFn) -> tuple[Bundle, int]:
    s = draw(sealed_streams())
    bundle = build_bundle(s.log, STREAM, KEY.public_key)
    return bundle, s.sealed_through


def _check_bundle(bundle: Bundle, lines: list[bytes], kinds: set[FindingKind], seq: int) -> None:
    tampered = Bundle.from_bytes(
        Bundle(
            stream=bundle.stream,
            first=bundle.first,
            seals=bundle.seals,
            keys=bundle.keys,
            lines=tuple(lines),
        ).to_bytes()
    )
    report = tampered.verify(KEY.public_key)
    assert not report.ok, "tampering in the bundle went unnoticed"
    assert report.problem is not None
    assert report.problem.seq == seq and report.problem.kind in kinds, (
        f"expected {sorted(kinds)} at seq {seq}, got {report.problem}"
    )


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bundles(), st.sampled_from(["flip", "delete", "insert", "swap"]), st.data())
def test_any_single_tamper_of_a_bundle_line_is_located(
    b: tuple[Bundle, int], op: str, data: st.DataObject
) -> None:
    """Bundles verify offline with the same guarantee: one tampered line is found by seq."""
    bundle, through = b
    assert bundle.verify(KEY.public_key).ok
    lines = list(bundle.lines)
    p = data.draw(st.integers(0, through - 1))
    if op == "flip":
        raw = bytearray(lines[p])
        k = data.draw(st.integers(0, len(raw) - 1))
        raw[k] ^= data.draw(st.integers(1, 255))
        lines[p] = bytes(raw)
        is_seal = b'"kind":"record.sealed"' in bundle.lines[p]
        kinds = {FindingKind.MODIFIED, FindingKind.SEAL} if is_seal else {FindingKind.MODIFIED}
        if bytes(raw) in bundle.lines:
            # As for the log: the flip made the line an exact copy of another one (events
            # stamped in the same microsecond differ only in their seq digit), and
            # reporting that copy as inserted at this seq is as right as a modification.
            kinds.add(FindingKind.INSERTED)
        _check_bundle(bundle, lines, kinds, p + 1)
    elif op == "delete":
        del lines[p]
        _check_bundle(bundle, lines, {FindingKind.MISSING}, p + 1)
    elif op == "insert":
        lines.insert(p, orjson.dumps({"seq": p + 1, "kind": "assistant.message", "text": "F"}))
        _check_bundle(bundle, lines, {FindingKind.INSERTED}, p + 1)
    else:
        if through < 2:
            return
        p = min(p, through - 2)
        q = data.draw(st.integers(p + 1, through - 1))
        lines[p], lines[q] = lines[q], lines[p]
        _check_bundle(bundle, lines, {FindingKind.REORDERED}, p + 1)
