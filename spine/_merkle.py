"""RFC 6962 Merkle tree hashing: leaf and node hashes, the tree head, audit paths.

The tree is built bottom-up, carrying an unpaired rightmost node up a level unchanged;
that yields exactly RFC 6962's recursive split at the largest power of two below ``n``
(the tests check it against the recursive definition), without recursion and with one
list per level.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

HASH_SIZE = 32
_LEAF = b"\x00"
_NODE = b"\x01"
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
