"""Sealing, proving and verifying streams of a real SQLite spine, and bundles offline."""

from __future__ import annotations

import base64
import pathlib
import sqlite3
import struct
import subprocess
import sys
from datetime import UTC, datetime

import attrs
import orjson
import pytest

from spine import Event, Kind, MemoryLog, SqliteLog
from spine.seal import (
    SIGNING_DOMAIN,
    FindingKind,
    InclusionError,
    InclusionProof,
    KeyStore,
    MalformedSealError,
    NothingToSealError,
    Seal,
    SigningKey,
    export_bundle,
    leaf_hash,
    merkle_root,
    prove,
    read_bundle,
    seal_stream,
    seals,
    verified_event,
    verify_bundle,
    verify_inclusion,
    verify_records,
    verify_stream,
)

ROOT = pathlib.Path(__file__).resolve().parent.parent
S = "sealed-1"
T = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def key() -> SigningKey:
    return SigningKey.generate()


def _fill(log: SqliteLog | MemoryLog, n: int, start: int = 0) -> None:
    log.append(S, [Event(kind=Kind.ASSISTANT, text=f"message {start + i}") for i in range(n)])


def _tamper(db: pathlib.Path, *statements: tuple[str, tuple[object, ...]]) -> None:
    # What an attacker with file access does: the append-only triggers are in the way.
    c = sqlite3.connect(db, isolation_level=None)
    try:
        c.execute("DROP TRIGGER IF EXISTS events_append_only_update")
        c.execute("DROP TRIGGER IF EXISTS events_append_only_delete")
        for sql, args in statements:
            c.execute(sql, args)
    finally:
        c.close()


def _payload(db: pathlib.Path, seq: int) -> bytes:
    c = sqlite3.connect(db)
    try:
        row = c.execute("SELECT payload FROM events WHERE stream=? AND seq=?", (S, seq)).fetchone()
        return bytes(row[0])
    finally:
        c.close()


def test_a_seal_is_appended_as_a_record_sealed_event_with_the_documented_keys(
    db_path: pathlib.Path, key: SigningKey
) -> None:
    """The record mapping holds v, stream, first, last, count, root, time, keyId, signature,
    leaves; the root is the RFC 6962 head of the stored bytes."""
    with SqliteLog(db_path) as log:
        _fill(log, 5)
        seal = seal_stream(log, S, key, time=T)
        assert (seal.first, seal.last, seal.count, seal.seq) == (1, 5, 5, 6)
        ev = log.read(S, 5, 1)[0].event()
        assert ev.kind == Kind.RECORD_SEALED
        assert list(ev.record) == [
            "v", "stream", "first", "last", "count", "root", "time", "keyId", "signature",
            "leaves",
        ]  # fmt: skip
        assert ev.record["root"] == seal.root.hex()
        assert ev.record["time"] == "2025-06-01T12:00:00Z"
        payloads = [r.payload for r in log.read(S, 0, 5)]
        assert seal.root == merkle_root([leaf_hash(p) for p in payloads])
        assert seals(log, S) == [seal]


def test_the_signature_covers_the_documented_length_prefixed_bytes(key: SigningKey) -> None:
    """Anyone can rebuild the signed bytes from the spec in docs/seal.md and check them."""
    seal = Seal.from_record(
        {**_one_seal(key).to_record()},
        stream=S,
    )
    s, t, k = S.encode(), seal.time.encode(), seal.key_id.encode()
    expected = (
        SIGNING_DOMAIN
        + struct.pack(">I", len(s))
        + s
        + struct.pack(">QQQ", seal.first, seal.last, seal.count)
        + seal.root
        + struct.pack(">I", len(t))
        + t
        + struct.pack(">I", len(k))
        + k
    )
    assert seal.signed_bytes() == expected
    assert key.public_key.verify(seal.signature, expected)


def _one_seal(key: SigningKey) -> Seal:
    log = MemoryLog()
    _fill(log, 3)
    return seal_stream(log, S, key, time=T)


def test_successive_seals_cover_what_is_new_including_the_previous_seal(
    db_path: pathlib.Path, key: SigningKey
) -> None:
    """Each seal starts after the previous one's range, so every seal event is sealed later."""
    with SqliteLog(db_path) as log:
        _fill(log, 3)
        a = seal_stream(log, S, key)
        _fill(log, 2, 3)
        b = seal_stream(log, S, key)
        assert (a.first, a.last, a.seq) == (1, 3, 4)
        assert (b.first, b.last, b.seq) == (4, 6, 7)
        c = seal_stream(log, S, key, first=2, last=3)
        assert (c.first, c.last) == (2, 3)


def test_sealing_nothing_or_past_the_end_is_a_clear_error(
    db_path: pathlib.Path, key: SigningKey
) -> None:
    """Empty streams, empty ranges and ranges past the last seq are refused by name."""
    with SqliteLog(db_path) as log:
        with pytest.raises(NothingToSealError, match=r"range 1\.\.0 is empty"):
            seal_stream(log, S, key)
        _fill(log, 2)
        with pytest.raises(ValueError, match="ends at seq 2"):
            seal_stream(log, S, key, last=9)
        with pytest.raises(ValueError, match="first must be a seq of at least 1"):
            seal_stream(log, S, key, first=0)


def test_verifying_an_intact_stream_appends_record_verified(
    db_path: pathlib.Path, key: SigningKey
) -> None:
    """All tiers pass and the record.verified event names the range and outcome."""
    with SqliteLog(db_path) as log:
        _fill(log, 4)
        seal = seal_stream(log, S, key)
        report = verify_stream(log, S, key.public_key, time=T)
        assert report.ok and report.problem is None
        assert [t.name for t in report.checks[0].tiers] == [
            "contiguity",
            "root",
            "signature",
            "proofs",
        ]
        assert all(t.ok for t in report.checks[0].tiers)
        ev = log.read(S, report.verified_seq - 1, 1)[0].event()
        assert ev.kind == Kind.RECORD_VERIFIED
        assert dict(ev.record) == {
            "first": 1,
            "last": 4,
            "ok": True,
            "seals": [seal.seq],
            "keyIds": [key.key_id],
        }


def test_a_row_rewritten_as_text_is_still_read_as_bytes_and_located(
    db_path: pathlib.Path, key: SigningKey
) -> None:
    """SQLite's string functions turn a payload into TEXT; the log still hands out bytes,
    so verification names the row instead of failing on a type."""
    with SqliteLog(db_path) as log:
        _fill(log, 6)
        seal_stream(log, S, key)
    _tamper(
        db_path,
        (
            "UPDATE events SET payload=replace(payload, 'message 2', 'message X') "
            "WHERE stream=? AND seq=3",
            (S,),
        ),
    )
    with SqliteLog(db_path) as log:
        assert all(isinstance(r.payload, bytes) for r in log.read(S, 0, None))
        report = verify_stream(log, S, key.public_key)
        assert report.problem is not None
        assert (report.problem.kind, report.problem.seq) == (FindingKind.MODIFIED, 3)


def test_a_modified_stored_event_is_named_by_seq(db_path: pathlib.Path, key: SigningKey) -> None:
    """Editing one row's bytes behind the log's back is found at that seq, and the failed
    verification is recorded as a record.verified event naming it."""
    with SqliteLog(db_path) as log:
        _fill(log, 6)
        seal = seal_stream(log, S, key)
    forged = _payload(db_path, 3).replace(b"message 2", b"message X")
    _tamper(db_path, ("UPDATE events SET payload=? WHERE stream=? AND seq=3", (forged, S)))
    with SqliteLog(db_path) as log:
        before = log.last_seq(S)
        report = verify_stream(log, S, key.public_key, time=T)
        assert not report.ok
        assert report.problem is not None
        assert (report.problem.kind, report.problem.seq) == (FindingKind.MODIFIED, 3)
        tiers = {t.name: t.ok for t in report.checks[0].tiers}
        assert tiers == {"contiguity": True, "root": False, "signature": True, "proofs": False}
        assert report.verified_seq == before + 1 == log.last_seq(S)
        ev = log.read(S, before, 1)[0].event()
        assert ev.kind == Kind.RECORD_VERIFIED and ev.time == T and not ev.error
        assert dict(ev.record) == {
            "ok": False,
            "outcome": "failed",
            "problem": str(report.problem),
            "seals": [seal.seq],
            "finding": "modified",
            "seq": 3,
            "sealSeq": seal.seq,
        }
        assert ev == attrs.evolve(verified_event(report, time=T), seq=ev.seq)


def test_a_deleted_row_is_named_missing(db_path: pathlib.Path, key: SigningKey) -> None:
    """A deleted row fails contiguity and is reported as the missing seq."""
    with SqliteLog(db_path) as log:
        _fill(log, 6)
        seal_stream(log, S, key)
    _tamper(db_path, ("DELETE FROM events WHERE stream=? AND seq=4", (S,)))
    with SqliteLog(db_path) as log:
        report = verify_stream(log, S, key.public_key)
    assert report.problem is not None
    assert (report.problem.kind, report.problem.seq) == (FindingKind.MISSING, 4)
    assert report.checks[0].tiers[0].ok is False


def test_an_inserted_row_with_renumbered_seqs_is_named_inserted(
    db_path: pathlib.Path, key: SigningKey
) -> None:
    """Shifting later seqs up to slip a row in is reported at the seq it took."""
    with SqliteLog(db_path) as log:
        _fill(log, 5)
        seal_stream(log, S, key)
    forged = orjson.dumps({"seq": 3, "kind": "assistant.message", "text": "forged"})
    _tamper(
        db_path,
        ("UPDATE events SET seq = -seq WHERE stream=? AND seq >= 3", (S,)),
        ("UPDATE events SET seq = 1 - seq WHERE stream=? AND seq < 0", (S,)),
        (
            "INSERT INTO events (position, stream, seq, kind, version, payload) "
            "VALUES ((SELECT MAX(position) + 1 FROM events), ?, 3, 'assistant.message', 1, ?)",
            (S, forged),
        ),
    )
    with SqliteLog(db_path) as log:
        report = verify_stream(log, S, key.public_key)
    assert report.problem is not None
    assert (report.problem.kind, report.problem.seq) == (FindingKind.INSERTED, 3)
    # The renumbered rows took the seq the record.verified event would have had: the
    # storage refuses it, and the report still comes back.
    assert report.verified_seq == 0


def test_two_swapped_rows_are_named_reordered(db_path: pathlib.Path, key: SigningKey) -> None:
    """Exchanging two rows' bytes is reported at the first of them."""
    with SqliteLog(db_path) as log:
        _fill(log, 5)
        seal_stream(log, S, key)
    a, b = _payload(db_path, 2), _payload(db_path, 4)
    _tamper(
        db_path,
        ("UPDATE events SET payload=? WHERE stream=? AND seq=2", (b, S)),
        ("UPDATE events SET payload=? WHERE stream=? AND seq=4", (a, S)),
    )
    with SqliteLog(db_path) as log:
        report = verify_stream(log, S, key.public_key)
    assert report.problem is not None
    assert (report.problem.kind, report.problem.seq) == (FindingKind.REORDERED, 2)


def test_a_forged_seal_is_named_and_an_untrusted_key_is_refused(
    db_path: pathlib.Path, key: SigningKey
) -> None:
    """A re-signed seal or one checked against the wrong key fails the signature tier."""
    with SqliteLog(db_path) as log:
        _fill(log, 3)
        seal = seal_stream(log, S, key)
        report = verify_stream(log, S, SigningKey.generate().public_key, append=False)
    assert report.problem is not None
    assert (report.problem.kind, report.problem.seq) == (FindingKind.SEAL, seal.seq)
    assert "not among the trusted keys" in report.problem.detail
    d = orjson.loads(_payload(db_path, seal.seq))
    d["record"]["root"] = "00" * 32
    _tamper(db_path, ("UPDATE events SET payload=? WHERE seq=?", (orjson.dumps(d), seal.seq)))
    with SqliteLog(db_path) as log:
        report = verify_stream(log, S, key.public_key)
    assert report.problem is not None
    assert report.problem.kind == FindingKind.SEAL
    assert "signature does not verify" in report.problem.detail


def test_an_unsealed_stream_does_not_verify(key: SigningKey) -> None:
    """No seal means nothing is verified: the report says so, and so does the failed
    record.verified event the verification appends."""
    log = MemoryLog()
    _fill(log, 2)
    report = verify_stream(log, S, key.public_key)
    assert not report.ok and report.checks == ()
    assert "no seal found" in report.summary()
    assert report.verified_seq == 3 == log.last_seq(S)
    record = log.read(S, 2, 1)[0].event().record
    assert record == {
        "ok": False,
        "outcome": "failed",
        "problem": "no seal found; nothing is verified",
        "seals": [],
    }


def test_every_verification_is_recorded_unless_told_not_to(key: SigningKey) -> None:
    """A pass and a failure each append record.verified and name its seq; append=False
    checks without writing, whatever the outcome."""
    log = MemoryLog()
    _fill(log, 3)
    seal_stream(log, S, key)
    other = SigningKey.generate().public_key
    assert verify_stream(log, S, other, append=False).verified_seq == 0
    assert verify_stream(log, S, key.public_key, append=False).verified_seq == 0
    assert log.last_seq(S) == 4
    failed = verify_stream(log, S, other)
    assert not failed.ok and failed.verified_seq == 5
    passed = verify_stream(log, S, key.public_key)
    assert passed.ok and passed.verified_seq == 6
    kinds_and_ok = [(e.kind, e.record["ok"]) for e in (r.event() for r in log.read(S, 4))]
    assert kinds_and_ok == [(Kind.RECORD_VERIFIED, False), (Kind.RECORD_VERIFIED, True)]
    problem = log.read(S, 4, 1)[0].event().record
    assert problem["finding"] == "seal" and problem["seq"] == problem["sealSeq"] == 4


def test_the_verified_event_is_computed_purely_from_the_report(key: SigningKey) -> None:
    """verify_records + verified_event (no log write, no clock) give exactly the event
    verify_stream appends, passing or failing, so a stream's writer can append it itself."""
    log = MemoryLog()
    _fill(log, 3)
    seal_stream(log, S, key)
    for keys in (key.public_key, SigningKey.generate().public_key):
        records = log.read(S, 0, None)
        report = verify_records(S, records, keys)
        ev = verified_event(report, time=T)
        assert ev == verified_event(report, time=T) and log.read(S, 0, None) == records
        assert ev.kind == Kind.RECORD_VERIFIED and ev.seq == 0 and ev.record["ok"] is report.ok
        assert verified_event(report).time is None
        done = verify_stream(log, S, keys, time=T)
        assert attrs.evolve(done, verified_seq=0) == report
        assert log.read(S, done.verified_seq - 1, 1)[0].event() == attrs.evolve(
            ev, seq=done.verified_seq
        )


def test_an_inclusion_proof_verifies_standalone_and_fails_for_other_bytes(
    db_path: pathlib.Path, key: SigningKey
) -> None:
    """A proof survives a JSON round trip, checks with only the public key, and rejects
    a changed payload, a changed path and an unknown key."""
    with SqliteLog(db_path) as log:
        _fill(log, 7)
        seal_stream(log, S, key)
        proofs = [prove(log, S, seq) for seq in range(1, 8)]
    for p in proofs:
        back = InclusionProof.from_json(p.to_json())
        assert back == p
        verify_inclusion(back, key.public_key)
    p = proofs[4]
    bad_payload = InclusionProof(
        seal=p.seal, seq=p.seq, payload=p.payload.replace(b"4", b"5"), path=p.path
    )
    with pytest.raises(InclusionError, match="does not lead to the signed root"):
        verify_inclusion(bad_payload, key.public_key)
    bad_path = InclusionProof(seal=p.seal, seq=p.seq, payload=p.payload, path=p.path[::-1])
    with pytest.raises(InclusionError):
        verify_inclusion(bad_path, key.public_key)
    with pytest.raises(InclusionError, match="not among the trusted keys"):
        verify_inclusion(p, SigningKey.generate().public_key)


def test_proving_a_modified_event_is_refused(db_path: pathlib.Path, key: SigningKey) -> None:
    """No proof is issued for stored bytes that differ from the sealed ones."""
    with SqliteLog(db_path) as log:
        _fill(log, 3)
        seal_stream(log, S, key)
    forged = _payload(db_path, 2).replace(b"message", b"massage")
    _tamper(db_path, ("UPDATE events SET payload=? WHERE stream=? AND seq=2", (forged, S)))
    with SqliteLog(db_path) as log, pytest.raises(InclusionError, match="modified since sealing"):
        prove(log, S, 2)


def test_a_malformed_seal_description_is_refused_with_its_problem(key: SigningKey) -> None:
    """Strict parsing names the field: non-canonical hex, a bad count, unknown fields."""
    rec = _one_seal(key).to_record()
    with pytest.raises(MalformedSealError, match="lowercase hex"):
        Seal.from_record({**rec, "root": rec["root"].upper()})
    with pytest.raises(MalformedSealError, match="count 9 does not match"):
        Seal.from_record({**rec, "count": 9})
    with pytest.raises(MalformedSealError, match="unknown field"):
        Seal.from_record({**rec, "note": 1})
    with pytest.raises(MalformedSealError, match="another-stream"):
        Seal.from_record(rec, stream="another-stream")


def test_an_exported_bundle_verifies_offline_and_locates_tampering(
    db_path: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """A bundle file verifies with the package alone; one edited line is named by seq."""
    store = KeyStore(tmp_path / "keys")
    with SqliteLog(db_path) as log:
        _fill(log, 4)
        seal_stream(log, S, store.signing_key())
        _fill(log, 3, 4)
        seal_stream(log, S, store.signing_key())
        out = tmp_path / "stream.bundle"
        bundle = export_bundle(log, S, out, store)
    assert (bundle.first, bundle.last, bundle.seals) == (1, 9, (5, 9))
    assert read_bundle(out) == bundle
    assert verify_bundle(out, store.keyring()).ok
    lines = out.read_bytes().split(b"\n")
    lines[3] = lines[3].replace(b"message 2", b"message 9")  # line 1 is the header
    out.write_bytes(b"\n".join(lines))
    report = verify_bundle(out, store.keyring())
    assert report.problem is not None
    assert (report.problem.kind, report.problem.seq) == (FindingKind.MODIFIED, 3)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spine.seal", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def test_the_command_line_seals_exports_and_verifies_a_bundle(
    db_path: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """python -m spine.seal: seal and export exit 0, verify exits 0 intact and 1 tampered."""
    with SqliteLog(db_path) as log:
        _fill(log, 3)
    keys = str(tmp_path / "keys")
    out = str(tmp_path / "b.jsonl")
    assert _cli("seal", str(db_path), S, "--keys", keys).returncode == 0
    assert _cli("export", str(db_path), S, out, "--keys", keys).returncode == 0
    pub = KeyStore(keys).signing_key().public_key.hex()
    ok = _cli("verify", out, "--key", pub)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "verified seqs 1..3" in ok.stdout
    data = pathlib.Path(out).read_bytes().replace(b"message 1", b"message 7")
    pathlib.Path(out).write_bytes(data)
    bad = _cli("verify", out, "--key", pub, "--json")
    assert bad.returncode == 1
    problem = orjson.loads(bad.stdout)["problem"]
    assert (problem["kind"], problem["seq"]) == ("modified", 2)
    missing = _cli("verify", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "cannot read bundle" in missing.stderr


def test_leaves_are_base64_of_the_leaf_hashes_in_seq_order(key: SigningKey) -> None:
    """The leaf index a verifier uses to locate tampering is exactly the sealed leaves."""
    log = MemoryLog()
    _fill(log, 3)
    seal = seal_stream(log, S, key)
    raw = base64.b64decode(seal.to_record()["leaves"])
    assert raw == b"".join(leaf_hash(r.payload) for r in log.read(S, 0, 3))


def test_an_edited_kind_column_of_a_sealed_row_is_named_by_seq(
    db_path: pathlib.Path, key: SigningKey
) -> None:
    """Readers dispatch on the kind column: changing it under intact sealed bytes is found
    and named at that seq."""
    with SqliteLog(db_path) as log:
        _fill(log, 6)
        seal_stream(log, S, key)
    _tamper(db_path, ("UPDATE events SET kind='turn.completed' WHERE stream=? AND seq=4", (S,)))
    with SqliteLog(db_path) as log:
        report = verify_stream(log, S, key.public_key, append=False)
        assert report.problem is not None
        assert (report.problem.kind, report.problem.seq) == (FindingKind.MODIFIED, 4)
        assert "kind column" in report.problem.detail


def test_a_row_of_another_schema_version_is_sealed_with_its_version_and_proven_offline(
    key: SigningKey, tmp_path: pathlib.Path
) -> None:
    """A row stored under schema version 2 seals with its version in the leaf: the stream,
    its bundle and its inclusion proof verify, and the same bytes read as version 1 do not."""
    db = tmp_path / "spine.db"
    with SqliteLog(db) as log:
        _fill(log, 3)
    _tamper(db, ("UPDATE events SET version = 2 WHERE stream = ? AND seq = 2", (S,)))
    with SqliteLog(db) as log:
        seal = seal_stream(log, S, key, time=T)
        assert verify_stream(log, S, key, append=False).ok
        proof = prove(log, S, 2)
        assert proof.version == 2
        verify_inclusion(InclusionProof.from_json(proof.to_json()), key)
        with pytest.raises(InclusionError):
            verify_inclusion(attrs.evolve(proof, version=1), key)
        export_bundle(log, S, tmp_path / "b.bundle", key)
    assert read_bundle(tmp_path / "b.bundle").versions == ((2, 2),)
    assert verify_bundle(tmp_path / "b.bundle", key).ok
    assert seal.leaf(2) != leaf_hash(b"")  # the index holds the versioned leaf
    _tamper(db, ("UPDATE events SET version = 1 WHERE stream = ? AND seq = 2", (S,)))
    with SqliteLog(db) as log:
        report = verify_stream(log, S, key, append=False)
    assert report.problem is not None and report.problem.seq == 2, report.summary()


@pytest.mark.parametrize(
    ("marker_at", "passes"),
    [("right after", True), ("later", False), ("none", False)],
)
def test_a_copy_under_another_id_verifies_only_with_its_import_provenance(
    marker_at: str, passes: bool
) -> None:
    """Seals stored in a copy name the stream they were made in: they verify in the copy
    when the provenance event sits right after the copied events (where nothing written
    later can be) and names that stream; a provenance written later proves nothing. The
    report says what was imported, and sealing goes on after the copy."""
    from spine.seal import IMPORT_EVENTS, IMPORT_STREAM, Keyring, SigningKey, seal_stream

    key = SigningKey.generate()
    log = MemoryLog()
    log.append("orig", [Event(kind=Kind.USER_MESSAGE, text=t) for t in ("a", "b")])
    seal_stream(log, "orig", key)
    copied = [r.event() for r in log.read("orig", 0, None)]
    marker = Event(
        kind=Kind.PROPERTIES,
        properties={IMPORT_STREAM: "orig", IMPORT_EVENTS: str(len(copied))},
    )
    tail = [Event(kind=Kind.USER_MESSAGE, text="c")]
    if marker_at == "right after":
        tail = [marker, *tail]
    elif marker_at == "later":
        tail = [*tail, marker]
    log.append("copy", [*copied, *tail], expected_seq=0)
    report = verify_stream(log, "copy", Keyring([key.public_key]), append=False)
    assert report.ok is passes
    if passes:
        assert "seqs 1..3 imported from stream 'orig'" in report.summary()
        seal_stream(log, "copy", key)
        again = verify_stream(log, "copy", Keyring([key.public_key]), append=False)
        assert again.ok and len(again.checks) == 2
    else:
        assert "seals stream 'orig'" in report.summary()


def test_a_copy_of_a_copy_verifies_each_imported_prefix_as_its_own_stream() -> None:
    """Imported twice (orig -> copy -> copy2, each sealing after its import): seals in
    each prefix name the stream they were made in, and all of them verify in copy2."""
    from spine.seal import IMPORT_EVENTS, IMPORT_STREAM, Keyring, SigningKey, seal_stream

    key = SigningKey.generate()
    ring = Keyring([key.public_key])
    log = MemoryLog()
    log.append("orig", [Event(kind=Kind.USER_MESSAGE, text="a")])
    seal_stream(log, "orig", key)
    src = "orig"
    for name in ("copy", "copy2"):
        copied = [r.event() for r in log.read(src, 0, None)]
        marker = Event(
            kind=Kind.PROPERTIES,
            properties={IMPORT_STREAM: src, IMPORT_EVENTS: str(len(copied))},
        )
        more = Event(kind=Kind.USER_MESSAGE, text=name)
        log.append(name, [*copied, marker, more], expected_seq=0)
        seal_stream(log, name, key)
        src = name
    report = verify_stream(log, "copy2", ring, append=False)
    assert report.ok and len(report.checks) == 3, report.summary()
    assert "imported from stream 'copy'" in report.summary()
