"""Inclusion proofs: one sealed event proven under its seal's signed root, standalone."""

from __future__ import annotations

import base64
import binascii

import attrs
import orjson

from ._errors import InvalidArgumentError
from ._keys import Keyring, KeysLike
from ._log import Log
from ._merkle import HASH_SIZE, audit_path, root_from_path, row_leaf_hash
from ._seal_errors import InclusionError, MalformedSealError
from ._seal_record import SEAL_VERSION, Seal, _hex, _int
from ._sealing import seals


@attrs.frozen(kw_only=True)
class InclusionProof:
    """Proof that ``payload`` is the event at ``seq`` under a seal's signed root.

    Standalone: with a trusted public key, `verify_inclusion` needs nothing else. ``seal``
    carries no leaf index (only the signed fields, its signature and its storage seq).
    """

    seal: Seal
    seq: int
    payload: bytes
    path: tuple[bytes, ...]
    #: The row's stored schema version, which its leaf covers (written only when not 1).
    version: int = 1

    @property
    def leaf_index(self) -> int:
        return self.seq - self.seal.first

    def to_json(self) -> bytes:
        extra = {} if self.version == 1 else {"version": self.version}
        return orjson.dumps(
            {
                **extra,
                "proof": "vertebra-seal-inclusion",
                "v": SEAL_VERSION,
                "seal": self.seal.to_record(with_leaves=False),
                "sealSeq": self.seal.seq,
                "seq": self.seq,
                "leafIndex": self.leaf_index,
                "treeSize": self.seal.count,
                "path": [p.hex() for p in self.path],
                "payload": base64.b64encode(self.payload).decode(),
            }
        )

    @classmethod
    def from_json(cls, data: bytes | str) -> InclusionProof:
        try:
            d = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise InclusionError(f"the proof is not JSON ({exc})") from None
        if not isinstance(d, dict) or d.get("proof") != "vertebra-seal-inclusion":
            raise InclusionError("not an inclusion proof (no 'proof': 'vertebra-seal-inclusion')")
        if d.get("v") != SEAL_VERSION:
            raise InclusionError(f"unsupported proof version {d.get('v')!r}")
        try:
            seal_seq = _int(d.get("sealSeq"))
            seal = Seal.from_record(d["seal"], seq=seal_seq or 0, require_leaves=False)
            seq = _int(d.get("seq"))
            if seq is None:
                raise InclusionError("the proof's 'seq' must be an integer")
            if d.get("leafIndex") != seq - seal.first or d.get("treeSize") != seal.count:
                raise InclusionError("the proof's leafIndex/treeSize disagree with its seal")
            path = []
            for p in d["path"]:
                h = _hex(p, HASH_SIZE)
                if h is None:
                    raise InclusionError("each path entry must be 64 lowercase hex digits")
                path.append(h)
            payload = base64.b64decode(d["payload"], validate=True)
            version = _int(d.get("version", 1))
            if version is None:
                raise InclusionError("the proof's 'version' must be an integer")
        except (KeyError, TypeError, binascii.Error) as exc:
            raise InclusionError(f"the proof is incomplete or malformed ({exc})") from None
        except MalformedSealError as exc:
            raise InclusionError(f"the proof's seal is malformed: {exc.problem}") from None
        return cls(seal=seal, seq=seq, payload=payload, path=tuple(path), version=version)


def prove(log: Log, stream: str, seq: int, *, seal: Seal | None = None) -> InclusionProof:
    """The inclusion proof of event ``seq`` under ``seal`` (default: the newest covering it).

    The audit path is built from the seal's authenticated leaf index, so proving one event
    reads only that event and the seal. Raises `InclusionError` if the stored event is not
    the one that was sealed.
    """
    if seal is None:
        covering = [s for s in seals(log, stream) if s.covers(seq)]
        if not covering:
            raise InclusionError(f"no seal of stream {stream!r} covers seq {seq}")
        seal = covering[-1]
    if not seal.covers(seq):
        raise InvalidArgumentError(f"seq {seq} is outside the seal's {seal.first}..{seal.last}")
    if not seal.leaves:
        raise InvalidArgumentError("proving needs a seal with its leaf index")
    problem = seal.index_problem()
    if problem is not None:
        raise InclusionError(f"the seal at seq {seal.seq} is not authentic: {problem}")
    recs = log.read(stream, seq - 1, 1)
    if not recs or recs[0].seq != seq:
        raise InclusionError(f"stream {stream!r} has no event at seq {seq}")
    payload, version = recs[0].payload, recs[0].version
    if row_leaf_hash(payload, version) != seal.leaf(seq):
        raise InclusionError(
            f"the event at seq {seq} differs from the sealed event (modified since sealing)"
        )
    path = audit_path(seal.leaf_list(), seq - seal.first)
    return InclusionProof(
        seal=attrs.evolve(seal, leaves=b""),
        seq=seq,
        payload=payload,
        path=tuple(path),
        version=version,
    )


def verify_inclusion(proof: InclusionProof, keys: KeysLike) -> None:
    """Check a proof against trusted keys; raise `InclusionError` naming what fails."""
    ring = Keyring.of(keys)
    seal = proof.seal
    problem = seal.signature_problem(ring)
    if problem is not None:
        raise InclusionError(f"the proof's seal is not authentic: {problem}")
    if not seal.covers(proof.seq):
        raise InclusionError(f"seq {proof.seq} is outside the seal's {seal.first}..{seal.last}")
    try:
        d = orjson.loads(proof.payload)
    except orjson.JSONDecodeError:
        d = None
    if not isinstance(d, dict) or d.get("seq") != proof.seq:
        raise InclusionError(f"the proven payload is not the event at seq {proof.seq}")
    leaf = row_leaf_hash(proof.payload, proof.version)
    root = root_from_path(leaf, proof.leaf_index, seal.count, proof.path)
    if root != seal.root:
        raise InclusionError(f"the audit path of seq {proof.seq} does not lead to the signed root")
