"""Seals: the signed description of a seq range, how it is made, stored, proven and checked.

A seal is stored in the ``record`` mapping of a ``record.sealed`` event on the very stream it
seals, so the log is the seal store: seals replicate, export and replay with the events, and
a later seal covers the earlier seal events (an edit to an old seal is then found twice: its
signature fails, and the later seal sees a modified event). See docs/seal.md.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import attrs
import orjson

from ._codec import format_time
from ._errors import InvalidArgumentError
from ._event import Event, Kind
from ._ids import validate_session_id
from ._keys import Keyring, KeysLike, SigningKey
from ._log import Log, Record
from ._merkle import (
    HASH_SIZE,
    audit_path,
    merkle_root,
    root_from_path,
    row_leaf_hash,
    row_leaf_hashes,
)
from ._seal_errors import InclusionError, MalformedSealError, NothingToSealError, SealError

#: Version of the seal description and of its signed encoding.
SEAL_VERSION = 1
#: Domain separation for the signed bytes: a signature over a seal can never be replayed as
#: a signature over anything else this key signs.
SIGNING_DOMAIN = b"vertebra-seal-v1\x00"

_RECORD_KEYS = (
    "v",
    "stream",
    "first",
    "last",
    "count",
    "root",
    "time",
    "keyId",
    "signature",
    "leaves",
)
_REQUIRED = frozenset(_RECORD_KEYS) - {"leaves"}
_HEX = frozenset("0123456789abcdef")
_PAGE = 5000


def signed_bytes(
    stream: str, first: int, last: int, count: int, root: bytes, time: str, key_id: str
) -> bytes:
    """The exact bytes a seal's Ed25519 signature covers.

    ``SIGNING_DOMAIN || u32 len || stream || u64 first || u64 last || u64 count || root(32)
    || u32 len || time || u32 len || key id``; integers big-endian, strings UTF-8. Length
    prefixes make the encoding unambiguous without any JSON canonicalization.
    """
    s = stream.encode()
    t = time.encode()
    k = key_id.encode()
    return b"".join(
        (
            SIGNING_DOMAIN,
            struct.pack(">I", len(s)),
            s,
            struct.pack(">QQQ", first, last, count),
            root,
            struct.pack(">I", len(t)),
            t,
            struct.pack(">I", len(k)),
            k,
        )
    )


@attrs.frozen(kw_only=True)
class Seal:
    """A signed Merkle tree head over the stored bytes of seqs ``first..last`` of a stream.

    ``leaves`` is the leaf index: the ``count`` leaf hashes, 32 bytes each, in seq order.
    It is not signed itself; it is authentic exactly when it reproduces the signed ``root``,
    and it is what lets a verifier name the event that changed and build any event's audit
    path without the other events. ``seq`` is where the seal is stored (the seq of its
    ``record.sealed`` event), 0 for a seal not (yet) stored; it is not signed.
    """

    stream: str
    first: int
    last: int
    count: int
    root: bytes
    time: str
    key_id: str
    signature: bytes
    leaves: bytes = b""
    seq: int = 0

    def signed_bytes(self) -> bytes:
        return signed_bytes(
            self.stream, self.first, self.last, self.count, self.root, self.time, self.key_id
        )

    def leaf(self, seq: int) -> bytes:
        """The sealed leaf hash of ``seq`` (from the leaf index)."""
        if not self.first <= seq <= self.last:
            raise InvalidArgumentError(f"seq {seq} is outside the seal's {self.first}..{self.last}")
        i = (seq - self.first) * HASH_SIZE
        return self.leaves[i : i + HASH_SIZE]

    def leaf_list(self) -> list[bytes]:
        b = self.leaves
        return [b[i : i + HASH_SIZE] for i in range(0, len(b), HASH_SIZE)]

    def covers(self, seq: int) -> bool:
        return self.first <= seq <= self.last

    def signature_problem(self, keys: Keyring) -> str | None:
        """Why the signature does not hold, or None when it does."""
        key = keys.get(self.key_id)
        if key is None:
            return f"it is signed by key {self.key_id}, which is not among the trusted keys"
        if not key.verify(self.signature, self.signed_bytes()):
            return f"its signature does not verify with key {self.key_id}"
        return None

    def index_problem(self, leaf_list: Sequence[bytes] | None = None) -> str | None:
        """Why the leaf index is not authentic, or None when it reproduces the root.

        ``leaf_list`` may pass `leaf_list()` when the caller already has it.
        """
        if len(self.leaves) != self.count * HASH_SIZE:
            return f"its leaf index holds {len(self.leaves) // HASH_SIZE} leaves, not {self.count}"
        if merkle_root(self.leaf_list() if leaf_list is None else leaf_list) != self.root:
            return "its leaf index does not reproduce the signed root (the index was edited)"
        return None

    def to_record(self, *, with_leaves: bool = True) -> dict[str, Any]:
        """The ``record`` mapping of a ``record.sealed`` event (see docs/seal.md)."""
        out: dict[str, Any] = {
            "v": SEAL_VERSION,
            "stream": self.stream,
            "first": self.first,
            "last": self.last,
            "count": self.count,
            "root": self.root.hex(),
            "time": self.time,
            "keyId": self.key_id,
            "signature": self.signature.hex(),
        }
        if with_leaves:
            out["leaves"] = base64.b64encode(self.leaves).decode()
        return out

    @classmethod
    def from_record(
        cls,
        record: Mapping[str, Any],
        *,
        stream: str | None = None,
        seq: int = 0,
        require_leaves: bool = True,
    ) -> Seal:
        """Read a seal description strictly; any deviation raises `MalformedSealError`.

        Strictness matters: every accepted spelling of a value must be the one that was
        signed, or an edit to the last (uncovered) seal event could go unnoticed.
        """
        where = seq or None

        def bad(problem: str) -> MalformedSealError:
            return MalformedSealError(problem, seq=where)

        if not isinstance(record, Mapping):
            raise bad("the record is not an object")
        keys = set(record)
        missing = _REQUIRED - keys
        if require_leaves and "leaves" not in keys:
            missing = missing | {"leaves"}
        if missing:
            raise bad(f"missing field(s) {sorted(missing)}")
        unknown = keys - set(_RECORD_KEYS)
        if unknown:
            raise bad(f"unknown field(s) {sorted(unknown)}")
        if _int(record["v"]) != SEAL_VERSION:
            raise bad(f"unsupported seal version {record['v']!r} (this reads {SEAL_VERSION})")
        st = record["stream"]
        if not isinstance(st, str) or not st:
            raise bad("'stream' must be a non-empty string")
        if stream is not None and st != stream:
            raise bad(f"it seals stream {st!r} but is stored in stream {stream!r}")
        first, last, count = _int(record["first"]), _int(record["last"]), _int(record["count"])
        if first is None or last is None or count is None:
            raise bad("'first', 'last' and 'count' must be integers")
        if first < 1 or last < first:
            raise bad(f"range {first}..{last} is not a non-empty range of seqs")
        if count != last - first + 1:
            raise bad(f"count {count} does not match range {first}..{last}")
        root = _hex(record["root"], HASH_SIZE)
        if root is None:
            raise bad("'root' must be 64 lowercase hex digits")
        sig = _hex(record["signature"], 64)
        if sig is None:
            raise bad("'signature' must be 128 lowercase hex digits")
        key_id = record["keyId"]
        if not isinstance(key_id, str) or len(key_id) != 32 or not set(key_id) <= _HEX:
            raise bad("'keyId' must be 32 lowercase hex digits")
        t = record["time"]
        if not isinstance(t, str) or not _is_time(t):
            raise bad("'time' must be an RFC 3339 time with a zone")
        leaves = b""
        if "leaves" in record:
            text = record["leaves"]
            if not isinstance(text, str):
                raise bad("'leaves' must be base64 text")
            try:
                leaves = base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError):
                raise bad("'leaves' is not valid base64") from None
            # Base64 has spare bits: only the canonical spelling is accepted.
            if base64.b64encode(leaves).decode() != text:
                raise bad("'leaves' is not canonical base64")
            if len(leaves) != count * HASH_SIZE:
                raise bad(f"'leaves' holds {len(leaves)} bytes, not {count} x {HASH_SIZE}")
        return cls(
            stream=st,
            first=first,
            last=last,
            count=count,
            root=root,
            time=t,
            key_id=key_id,
            signature=sig,
            leaves=leaves,
            seq=seq,
        )

    def to_json(self) -> bytes:
        """The seal alone as JSON (with its storage seq), e.g. to anchor it elsewhere."""
        d = self.to_record()
        d["seq"] = self.seq
        return orjson.dumps(d)

    @classmethod
    def from_json(cls, data: bytes | str) -> Seal:
        try:
            d = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise MalformedSealError(f"not JSON ({exc})") from None
        if not isinstance(d, dict):
            raise MalformedSealError("not a JSON object")
        seq = _int(d.pop("seq", 0))
        if seq is None or seq < 0:
            raise MalformedSealError("'seq' must be a non-negative integer")
        return cls.from_record(d, seq=seq, require_leaves=False)


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _hex(v: object, size: int) -> bytes | None:
    if not isinstance(v, str) or len(v) != 2 * size or not set(v) <= _HEX:
        return None
    return bytes.fromhex(v)


def _is_time(t: str) -> bool:
    try:
        return datetime.fromisoformat(t).tzinfo is not None
    except ValueError:
        return False


# -- making seals ------------------------------------------------------------------------


def compute_seal(
    stream: str,
    first: int,
    payloads: Sequence[bytes],
    key: SigningKey,
    *,
    time: datetime,
    versions: Sequence[int] | None = None,
) -> Seal:
    """Seal ``payloads`` as seqs ``first..first+len-1`` of ``stream`` (pure: reads no log).

    ``versions`` are the rows' stored schema versions (None: all 1); each leaf covers its
    row's version too (see `row_leaf_hash`)."""
    validate_session_id(stream)
    if not isinstance(key, SigningKey):
        raise InvalidArgumentError(f"sealing needs a SigningKey, not {type(key).__name__}")
    if not isinstance(first, int) or isinstance(first, bool) or first < 1:
        raise InvalidArgumentError(f"first must be a seq of at least 1, got {first!r}")
    if not payloads:
        raise NothingToSealError(stream, first, first - 1)
    leaves = row_leaf_hashes(payloads, versions)
    root = merkle_root(leaves)
    t = format_time(time)
    count = len(leaves)
    last = first + count - 1
    sig = key.sign(signed_bytes(stream, first, last, count, root, t, key.key_id))
    return Seal(
        stream=stream,
        first=first,
        last=last,
        count=count,
        root=root,
        time=t,
        key_id=key.key_id,
        signature=sig,
        leaves=b"".join(leaves),
    )


def read_range(log: Log, stream: str, first: int, last: int) -> list[Record]:
    """Records ``first..last`` of ``stream``, read in pages."""
    out: list[Record] = []
    after = first - 1
    while after < last:
        page = log.read(stream, after, min(_PAGE, last - after))
        if not page:
            break
        out.extend(page)
        after = page[-1].seq
    return out


def seals(log: Log, stream: str) -> list[Seal]:
    """Every seal stored on ``stream``, oldest first; a malformed one raises."""
    out = []
    for r in _read_kind(log, stream, Kind.RECORD_SEALED):
        out.append(parse_seal_event(stream, r))
    return out


def _read_kind(log: Log, stream: str, kind: str) -> list[Record]:
    out: list[Record] = []
    after = 0
    while True:
        page = log.read(stream, after, _PAGE, kinds=[kind])
        if not page:
            return out
        out.extend(page)
        after = page[-1].seq


def parse_seal_event(stream: str, r: Record) -> Seal:
    """The seal stored in record ``r``, checked strictly (`MalformedSealError` if not).

    Besides the seal itself the event may hold nothing but its seq, time (equal to the
    seal's) and kind, so that no byte of even the newest, uncovered seal event can change
    unnoticed.
    """
    try:
        d = orjson.loads(r.payload)
    except orjson.JSONDecodeError as exc:
        raise MalformedSealError(f"the event is not JSON ({exc})", seq=r.seq) from None
    if not isinstance(d, dict):
        raise MalformedSealError("the event is not a JSON object", seq=r.seq)
    extra = set(d) - {"seq", "time", "kind", "record"}
    if extra:
        raise MalformedSealError(f"the event has unexpected field(s) {sorted(extra)}", seq=r.seq)
    if d.get("kind") != Kind.RECORD_SEALED:
        raise MalformedSealError(f"the event's kind is {d.get('kind')!r}", seq=r.seq)
    if _int(d.get("seq")) is None:
        raise MalformedSealError("the event has no integer seq", seq=r.seq)
    record = d.get("record")
    if not isinstance(record, dict):
        raise MalformedSealError("the event has no record object", seq=r.seq)
    seal = Seal.from_record(record, stream=stream, seq=r.seq)
    if d.get("time") != seal.time:
        raise MalformedSealError("the event's time differs from the seal's time", seq=r.seq)
    return seal


def next_unsealed(log: Log, stream: str) -> int:
    """The first seq after the newest seal's range (1 when nothing is sealed)."""
    records = _read_kind(log, stream, Kind.RECORD_SEALED)
    if not records:
        return 1
    return parse_seal_event(stream, records[-1]).last + 1


def prepare_seal(
    log: Log,
    stream: str,
    key: SigningKey,
    *,
    first: int | None = None,
    last: int | None = None,
    time: datetime | None = None,
) -> Seal:
    """The seal of seqs ``first..last`` of ``stream``, computed and signed but not stored.

    ``first`` defaults to the seq after the newest seal's range (so successive seals cover
    what is new, including the previous seal event), ``last`` to the stream's last seq,
    ``time`` to now. The stream's writer appends ``Event(kind=record.sealed, time=time,
    record=seal.to_record())`` itself; `seal_stream` does both for a caller that owns the
    stream. `NothingToSealError` when the range is empty.
    """
    validate_session_id(stream)
    end = log.last_seq(stream)
    lo = next_unsealed(log, stream) if first is None else first
    hi = end if last is None else last
    for name, v in (("first", first), ("last", last)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise InvalidArgumentError(f"{name} must be a seq of at least 1, got {v!r}")
    if hi < lo:
        raise NothingToSealError(stream, lo, hi)
    if hi > end:
        raise InvalidArgumentError(
            f"cannot seal up to seq {hi}: stream {stream!r} ends at seq {end}"
        )
    records = read_range(log, stream, lo, hi)
    if [r.seq for r in records] != list(range(lo, hi + 1)):
        bad = next((lo + i for i, r in enumerate(records) if r.seq != lo + i), lo + len(records))
        raise SealError(
            f"stream {stream!r} is not contiguous at seq {bad}; refusing to seal a damaged range"
        )
    when = datetime.now(UTC) if time is None else time
    return compute_seal(
        stream,
        lo,
        [r.payload for r in records],
        key,
        time=when,
        versions=[r.version for r in records],
    )


def seal_event(seal: Seal) -> Event:
    """The ``record.sealed`` event that stores ``seal`` (its time is the seal's own)."""
    return Event(
        kind=Kind.RECORD_SEALED, time=datetime.fromisoformat(seal.time), record=seal.to_record()
    )


def seal_stream(
    log: Log,
    stream: str,
    key: SigningKey,
    *,
    first: int | None = None,
    last: int | None = None,
    time: datetime | None = None,
    expected_seq: int | None = None,
) -> Seal:
    """Seal seqs ``first..last`` of ``stream`` (see `prepare_seal`) and append the
    ``record.sealed`` event. ``expected_seq`` is passed to the append (the seal event
    then lands only if nothing else was appended meanwhile). Returns the stored seal.
    """
    s = prepare_seal(log, stream, key, first=first, last=last, time=time)
    res = log.append(stream, [seal_event(s)], expected_seq=expected_seq)
    return attrs.evolve(s, seq=res.first_seq)


# -- inclusion proofs --------------------------------------------------------------------


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
