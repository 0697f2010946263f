"""A seal: the signed description of a seq range, its signed bytes, and its strict reading
from the ``record`` mapping of a ``record.sealed`` event (see docs/seal.md)."""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import attrs
import orjson

from ._errors import InvalidArgumentError
from ._keys import Keyring
from ._merkle import HASH_SIZE, merkle_root
from ._seal_errors import MalformedSealError

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
    ``frontier`` lets the root of any prefix be computed from the newest seal below it
    (`spine._frontier`).
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
    #: The RFC 6962 frontier of seqs 1..``last`` (`MerkleFrontier.peaks`), stored beside
    #: the seal in its event (``frontier``), not signed and not part of the seal's
    #: identity (a proof or an export carries the seal without it): empty when unknown.
    frontier: tuple[bytes, ...] = attrs.field(default=(), eq=False)

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
        if not isinstance(record, Mapping):
            raise _bad("the record is not an object", where)
        _check_fields(record, require_leaves, where)
        st = record["stream"]
        if not isinstance(st, str) or not st:
            raise _bad("'stream' must be a non-empty string", where)
        if stream is not None and st != stream:
            raise _bad(f"it seals stream {st!r} but is stored in stream {stream!r}", where)
        first, last, count = _seal_range(record, where)
        root, sig, key_id, t = _signed_values(record, where)
        return cls(
            stream=st,
            first=first,
            last=last,
            count=count,
            root=root,
            time=t,
            key_id=key_id,
            signature=sig,
            leaves=_leaf_index(record, count, where),
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


def _bad(problem: str, where: int | None) -> MalformedSealError:
    return MalformedSealError(problem, seq=where)


def _check_fields(record: Mapping[str, Any], require_leaves: bool, where: int | None) -> None:
    """The record holds exactly the seal's fields, and is of this seal version."""
    keys = set(record)
    missing = _REQUIRED - keys
    if require_leaves and "leaves" not in keys:
        missing = missing | {"leaves"}
    if missing:
        raise _bad(f"missing field(s) {sorted(missing)}", where)
    unknown = keys - set(_RECORD_KEYS)
    if unknown:
        raise _bad(f"unknown field(s) {sorted(unknown)}", where)
    if _int(record["v"]) != SEAL_VERSION:
        raise _bad(f"unsupported seal version {record['v']!r} (this reads {SEAL_VERSION})", where)


def _seal_range(record: Mapping[str, Any], where: int | None) -> tuple[int, int, int]:
    """``first``, ``last`` and ``count``: a non-empty range of seqs, counted right."""
    first, last, count = _int(record["first"]), _int(record["last"]), _int(record["count"])
    if first is None or last is None or count is None:
        raise _bad("'first', 'last' and 'count' must be integers", where)
    if first < 1 or last < first:
        raise _bad(f"range {first}..{last} is not a non-empty range of seqs", where)
    if count != last - first + 1:
        raise _bad(f"count {count} does not match range {first}..{last}", where)
    return first, last, count


def _signed_values(record: Mapping[str, Any], where: int | None) -> tuple[bytes, bytes, str, str]:
    """``root``, ``signature``, ``keyId`` and ``time``, each in its one accepted spelling."""
    root = _hex(record["root"], HASH_SIZE)
    if root is None:
        raise _bad("'root' must be 64 lowercase hex digits", where)
    sig = _hex(record["signature"], 64)
    if sig is None:
        raise _bad("'signature' must be 128 lowercase hex digits", where)
    key_id = record["keyId"]
    if not isinstance(key_id, str) or len(key_id) != 32 or not set(key_id) <= _HEX:
        raise _bad("'keyId' must be 32 lowercase hex digits", where)
    t = record["time"]
    if not isinstance(t, str) or not _is_time(t):
        raise _bad("'time' must be an RFC 3339 time with a zone", where)
    return root, sig, key_id, t


def _leaf_index(record: Mapping[str, Any], count: int, where: int | None) -> bytes:
    """The leaf index (empty when the record has none): canonical base64 of ``count``
    hashes."""
    if "leaves" not in record:
        return b""
    text = record["leaves"]
    if not isinstance(text, str):
        raise _bad("'leaves' must be base64 text", where)
    try:
        leaves = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise _bad("'leaves' is not valid base64", where) from None
    # Base64 has spare bits: only the canonical spelling is accepted.
    if base64.b64encode(leaves).decode() != text:
        raise _bad("'leaves' is not canonical base64", where)
    if len(leaves) != count * HASH_SIZE:
        raise _bad(f"'leaves' holds {len(leaves)} bytes, not {count} x {HASH_SIZE}", where)
    return leaves


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
