"""Sealed records: Merkle roots, Ed25519 signatures, inclusion proofs, tiered verification.

Seal what a stream holds, prove any sealed event, verify and name any tampering::

    from spine import SqliteLog
    from spine.seal import KeyStore, seal_stream, verify_stream, prove, verify_inclusion

    log = SqliteLog("spine.db")
    store = KeyStore("vertebra-data/keys")  # created 0700 on first use
    seal = seal_stream(log, "chat-1", store.signing_key())
    report = verify_stream(log, "chat-1", store.keyring())  # appends record.verified
    assert report.ok, report.summary()
    # The pure halves, for a writer that appends itself: verify_records, verified_event.
    verify_inclusion(prove(log, "chat-1", 3), store.keyring())

``python -m spine.seal verify BUNDLE`` checks an exported bundle offline. The format, the
signed bytes, the tiers and the threat model are in docs/seal.md.
"""

from __future__ import annotations

from ._bundle import (
    BUNDLE_FORMAT,
    BUNDLE_VERSION,
    Bundle,
    build_bundle,
    export_bundle,
    read_bundle,
    verify_bundle,
)
from ._frontier import FRONTIER, frontier_at, prefix_root
from ._keys import Keyring, KeysLike, KeyStore, PublicKey, SigningKey, key_id_of
from ._merkle import (
    MerkleFrontier,
    audit_path,
    leaf_hash,
    merkle_root,
    node_hash,
    root_from_path,
    row_leaf_hash,
)
from ._seal_errors import (
    BundleError,
    InclusionError,
    KeyStoreError,
    MalformedSealError,
    NothingToSealError,
    SealError,
    UnknownKeyError,
)
from ._seal_proof import InclusionProof, prove, verify_inclusion
from ._seal_record import SEAL_VERSION, SIGNING_DOMAIN, Seal, signed_bytes
from ._seal_report import Finding, FindingKind, SealCheck, Tier, VerifyReport, verified_event
from ._seal_verify import verify_records, verify_stream
from ._sealing import (
    IMPORT_EVENTS,
    IMPORT_STREAM,
    compute_seal,
    import_origin,
    prepare_seal,
    seal_event,
    seal_stream,
    seals,
)

__all__ = [
    "BUNDLE_FORMAT",
    "BUNDLE_VERSION",
    "FRONTIER",
    "IMPORT_EVENTS",
    "IMPORT_STREAM",
    "SEAL_VERSION",
    "SIGNING_DOMAIN",
    "Bundle",
    "BundleError",
    "Finding",
    "FindingKind",
    "InclusionError",
    "InclusionProof",
    "KeyStore",
    "KeyStoreError",
    "Keyring",
    "KeysLike",
    "MalformedSealError",
    "MerkleFrontier",
    "NothingToSealError",
    "PublicKey",
    "Seal",
    "SealCheck",
    "SealError",
    "SigningKey",
    "Tier",
    "UnknownKeyError",
    "VerifyReport",
    "audit_path",
    "build_bundle",
    "compute_seal",
    "export_bundle",
    "frontier_at",
    "import_origin",
    "key_id_of",
    "leaf_hash",
    "merkle_root",
    "node_hash",
    "prefix_root",
    "prepare_seal",
    "prove",
    "read_bundle",
    "root_from_path",
    "row_leaf_hash",
    "seal_event",
    "seal_stream",
    "seals",
    "signed_bytes",
    "verified_event",
    "verify_bundle",
    "verify_inclusion",
    "verify_records",
    "verify_stream",
]

if __name__ == "__main__":
    import sys

    from ._seal_cli import main

    sys.exit(main())
