"""``python -m spine.seal``: seal, export, verify and prove from the command line.

Exit status: 0 verified, 1 verification failed (tampering found), 2 bad usage or input.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import orjson

from ._errors import SpineError
from ._keys import Keyring, KeyStore, PublicKey
from ._seal_report import VerifyReport
from ._sqlite import SqliteLog


def _keys(args: argparse.Namespace) -> Keyring | None:
    ring = Keyring()
    for text in args.key or ():
        ring.add(PublicKey.from_hex(text))
    if args.keyring:
        for k in KeyStore(args.keyring).keyring():
            ring.add(k)
    return ring if len(ring) else None


def _print_report(report: VerifyReport, as_json: bool) -> int:
    if as_json:
        print(orjson.dumps(report.to_dict(), option=orjson.OPT_INDENT_2).decode())
    else:
        print(report.summary())
        for check in report.checks:
            print(f"  seal at seq {check.seal_seq}:")
            for t in check.tiers:
                mark = {True: "ok", False: "FAILED", None: "skipped"}[t.ok]
                print(f"    {t.name:<10} {mark:<7} {t.detail}")
        for f in report.findings[1:]:
            print(f"  also: {f}")
    return 0 if report.ok else 1


def _verify(args: argparse.Namespace) -> int:
    from ._bundle import read_bundle

    bundle = read_bundle(args.bundle)
    ring = _keys(args)
    if ring is None:
        ids = ", ".join(k.key_id for k in bundle.keys) or "none"
        print(
            f"warning: no trusted key given; trusting the bundle's own key(s): {ids}",
            file=sys.stderr,
        )
    return _print_report(bundle.verify(ring), args.json)


def _open(path: str, *, read_only: bool = False) -> SqliteLog:
    """The spine at ``path``; ``read_only`` for a command that appends nothing, so a
    read-only copy (or mount) of a spine can be verified, exported and proven from."""
    if not os.path.exists(path):
        raise SpineError(f"no spine database at {path!r}")
    return SqliteLog(path, read_only=read_only)


def _verify_log(args: argparse.Namespace) -> int:
    from ._seal_verify import verify_stream

    ring = _keys(args)
    if ring is None:
        raise SystemExit("verify-log needs --key or --keyring")
    with _open(args.db, read_only=args.no_record) as log:
        report = verify_stream(log, args.stream, ring, append=not args.no_record)
    return _print_report(report, args.json)


def _seal(args: argparse.Namespace) -> int:
    from ._sealing import seal_stream

    key = KeyStore(args.keys).signing_key()
    with _open(args.db) as log:
        s = seal_stream(log, args.stream, key)
    print(
        f"sealed {args.stream!r} seqs {s.first}..{s.last} (root {s.root.hex()}, key {s.key_id}) "
        f"as seq {s.seq}"
    )
    return 0


def _export(args: argparse.Namespace) -> int:
    from ._bundle import export_bundle

    with _open(args.db, read_only=True) as log:
        b = export_bundle(log, args.stream, args.out, KeyStore(args.keys))
    print(f"wrote {args.out}: seqs {b.first}..{b.last}, {len(b.seals)} seal(s)")
    return 0


def _prove(args: argparse.Namespace) -> int:
    from ._seal_proof import prove

    with _open(args.db, read_only=True) as log:
        proof = prove(log, args.stream, args.seq)
    data = proof.to_json()
    if args.out:
        with open(args.out, "wb") as f:
            f.write(data + b"\n")
    else:
        print(data.decode())
    return 0


def _check_proof(args: argparse.Namespace) -> int:
    from ._seal_proof import InclusionProof, verify_inclusion

    ring = _keys(args)
    if ring is None:
        raise SystemExit("check-proof needs --key or --keyring")
    with open(args.proof, "rb") as f:
        proof = InclusionProof.from_json(f.read())
    verify_inclusion(proof, ring)
    print(f"seq {proof.seq} of {proof.seal.stream!r} is included under the seal at seq "
          f"{proof.seal.seq} (key {proof.seal.key_id})")  # fmt: skip
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m spine.seal", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    def trust(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--key", action="append", help="a trusted public key (hex); repeatable")
        sp.add_argument("--keyring", help="a key directory whose public keys are trusted")
        sp.add_argument("--json", action="store_true", help="print the report as JSON")

    v = sub.add_parser("verify", help="verify an exported bundle offline")
    v.add_argument("bundle")
    trust(v)
    v.set_defaults(fn=_verify)

    vl = sub.add_parser("verify-log", help="verify a stream of a SQLite spine")
    vl.add_argument("db")
    vl.add_argument("stream")
    vl.add_argument("--no-record", action="store_true", help="do not append record.verified")
    trust(vl)
    vl.set_defaults(fn=_verify_log)

    s = sub.add_parser("seal", help="seal what is new in a stream of a SQLite spine")
    s.add_argument("db")
    s.add_argument("stream")
    s.add_argument("--keys", required=True, help="the key directory (created on first use)")
    s.set_defaults(fn=_seal)

    e = sub.add_parser("export", help="export a sealed stream as a bundle")
    e.add_argument("db")
    e.add_argument("stream")
    e.add_argument("out")
    e.add_argument("--keys", required=True, help="the key directory holding the public keys")
    e.set_defaults(fn=_export)

    pr = sub.add_parser("prove", help="print the inclusion proof of one event")
    pr.add_argument("db")
    pr.add_argument("stream")
    pr.add_argument("seq", type=int)
    pr.add_argument("--out", help="write the proof to this file")
    pr.set_defaults(fn=_prove)

    cp = sub.add_parser("check-proof", help="check an inclusion proof offline")
    cp.add_argument("proof")
    cp.add_argument("--key", action="append", help="a trusted public key (hex); repeatable")
    cp.add_argument("--keyring", help="a key directory whose public keys are trusted")
    cp.set_defaults(fn=_check_proof)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        rc: int = args.fn(args)
    except (SpineError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return rc
