"""RFC 6962 Merkle tree hashing: leaf and node hashes, the tree head, audit paths.

The tree is built bottom-up, carrying an unpaired rightmost node up a level unchanged;
that yields exactly RFC 6962's recursive split at the largest power of two below ``n``
(the tests check it against the recursive definition), without recursion and with one
list per level.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

HASH_SIZE = 32
_LEAF = b"\x00"
_NODE = b"\x01"
#: Prefix of the leaf of a row stored under another schema version than 1 (see
#: `row_leaf_hash`); distinct from the leaf and node prefixes, so no hash can pass for one.
_VERSIONED_LEAF = b"\x02"
#: The schema version every row so far was written with: its leaf is the plain RFC 6962
#: leaf of the payload, so seals made before the version was covered still verify.
_PLAIN_VERSION = 1
_sha256 = hashlib.sha256


def leaf_hash(payload: bytes) -> bytes:
    """SHA-256(0x00 || payload): the hash of one stored event."""
    return _sha256(_LEAF + payload).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """SHA-256(0x01 || left || right): the hash of an interior node."""
    return _sha256(_NODE + left + right).digest()


# Copying a hash object already fed the prefix costs less than building ``prefix + data``
# for every call; these loops are the whole cost of sealing (see docs/performance.md).
_LEAF_CTX = _sha256(_LEAF)
_NODE_CTX = _sha256(_NODE)


def leaf_hashes(payloads: Sequence[bytes]) -> list[bytes]:
    """Leaf hashes of ``payloads`` in order."""
    new = _LEAF_CTX.copy
    out: list[bytes] = []
    append = out.append
    for p in payloads:
        h = new()
        h.update(p)
        append(h.digest())
    return out


def version_tag(version: object) -> bytes:
    """What a row's stored ``version`` adds to its leaf: nothing for version 1, else a
    fixed-width encoding (anything that is not an int, say a tampered text, gets its own)."""
    if type(version) is int:
        if version == _PLAIN_VERSION:
            return b""
        if -(2**63) <= version < 2**63:
            return _VERSIONED_LEAF + struct.pack(">q", version)
    return b"\x03" + repr(version).encode()


def row_leaf_hash(payload: bytes, version: object = _PLAIN_VERSION) -> bytes:
    """The leaf of a stored row: its payload and its schema version (the column readers
    upcast by). Version 1: `leaf_hash` of the payload; any other: SHA-256(0x02 || i64
    version || payload), so editing the column alone changes the leaf."""
    tag = version_tag(version)
    if not tag:
        return leaf_hash(payload)
    return _sha256(tag + payload).digest()


def row_leaf_hashes(payloads: Sequence[bytes], versions: Sequence[object] | None) -> list[bytes]:
    """Leaf hashes of rows (``versions`` None: every row at version 1)."""
    if versions is None or all(type(v) is int and v == _PLAIN_VERSION for v in versions):
        return leaf_hashes(payloads)
    return [row_leaf_hash(p, v) for p, v in zip(payloads, versions, strict=True)]


def _next_level(level: Sequence[bytes]) -> list[bytes]:
    new = _NODE_CTX.copy
    out: list[bytes] = []
    append = out.append
    it = iter(level)
    for a, b in zip(it, it):
        h = new()
        h.update(a + b)
        append(h.digest())
    if len(level) & 1:
        out.append(level[-1])
    return out


def merkle_root(leaves: Sequence[bytes]) -> bytes:
    """The RFC 6962 tree head over leaf hashes; the empty tree is SHA-256 of nothing."""
    if not leaves:
        return _sha256(b"").digest()
    level: Sequence[bytes] = leaves
    while len(level) > 1:
        level = _next_level(level)
    return level[0]


def audit_path(leaves: Sequence[bytes], index: int) -> list[bytes]:
    """RFC 6962 PATH(index, leaves): sibling hashes from the leaf up to the root."""
    if not 0 <= index < len(leaves):
        raise IndexError(f"leaf index {index} is outside a tree of {len(leaves)} leaves")
    path: list[bytes] = []
    level: Sequence[bytes] = leaves
    i = index
    while len(level) > 1:
        sibling = i ^ 1
        # The rightmost node of an odd level has no sibling: it moves up unchanged.
        if sibling < len(level):
            path.append(level[sibling])
        level = _next_level(level)
        i >>= 1
    return path


def root_from_path(leaf: bytes, index: int, size: int, path: Sequence[bytes]) -> bytes | None:
    """The root an audit path leads to (RFC 9162 2.1.3.2), or None if it cannot fit the tree."""
    if not 0 <= index < size:
        return None
    fn, sn = index, size - 1
    r = leaf
    for p in path:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return r if sn == 0 else None


class MerkleFrontier:
    """The RFC 6962 tree head of a sequence of leaves that only grows, kept as the roots
    of its perfect subtrees (at most one per bit of the count): adding leaves costs their
    own hashes, not the whole tree again. `root` equals `merkle_root` of every leaf added,
    since RFC 6962 splits at the largest power of two, which is the first such subtree."""

    __slots__ = ("_peaks", "size")

    def __init__(self) -> None:
        self.size = 0
        #: (leaves under it, its root), largest first; the sizes are distinct powers of two.
        self._peaks: list[tuple[int, bytes]] = []

    def copy(self) -> MerkleFrontier:
        other = MerkleFrontier()
        other.size, other._peaks = self.size, list(self._peaks)
        return other

    @classmethod
    def from_peaks(cls, size: int, roots: Sequence[bytes]) -> MerkleFrontier:
        """The frontier of ``size`` leaves from its peaks' roots, largest first (`peaks`);
        ValueError when their number is not the count of ``size``'s set bits."""
        sizes = [1 << b for b in range(size.bit_length() - 1, -1, -1) if size >> b & 1]
        if size < 0 or len(sizes) != len(roots) or any(len(r) != HASH_SIZE for r in roots):
            raise ValueError(f"{len(roots)} peaks are not the frontier of {size} leaves")
        out = cls()
        out.size, out._peaks = size, list(zip(sizes, roots, strict=True))
        return out

    def peaks(self) -> tuple[bytes, ...]:
        """The roots of the perfect subtrees, largest first: with `size`, the frontier."""
        return tuple(h for _, h in self._peaks)

    def extend(self, leaves: Sequence[bytes]) -> None:
        peaks = self._peaks
        for leaf in leaves:
            n, h = 1, leaf
            while peaks and peaks[-1][0] == n:
                m, left = peaks.pop()
                n, h = n + m, node_hash(left, h)
            peaks.append((n, h))
        self.size += len(leaves)

    def root(self) -> bytes:
        if not self._peaks:
            return _sha256(b"").digest()
        h = self._peaks[-1][1]
        for _, left in reversed(self._peaks[:-1]):
            h = node_hash(left, h)
        return h
