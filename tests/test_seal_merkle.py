"""RFC 6962 Merkle hashing: the tree head, audit paths and their verification."""

from __future__ import annotations

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from spine.seal import (
    MerkleFrontier,
    audit_path,
    leaf_hash,
    merkle_root,
    node_hash,
    root_from_path,
)


def _mth(leaves: list[bytes]) -> bytes:
    # RFC 6962 section 2.1, literally: split at the largest power of two below n.
    n = len(leaves)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return leaves[0]
    k = 1
    while k * 2 < n:
        k *= 2
    return node_hash(_mth(leaves[:k]), _mth(leaves[k:]))


def _path(m: int, leaves: list[bytes]) -> list[bytes]:
    # RFC 6962 section 2.1.1 PATH(m, D[n]).
    n = len(leaves)
    if n == 1:
        return []
    k = 1
    while k * 2 < n:
        k *= 2
    if m < k:
        return [*_path(m, leaves[:k]), _mth(leaves[k:])]
    return [*_path(m - k, leaves[k:]), _mth(leaves[:k])]


# The certificate-transparency reference inputs and tree heads for sizes 1..8.
CT_INPUTS = [
    "",
    "00",
    "10",
    "2021",
    "3031",
    "40414243",
    "5051525354555657",
    "606162636465666768696a6b6c6d6e6f",
]
CT_ROOTS = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]


def test_tree_heads_match_the_certificate_transparency_reference_vectors() -> None:
    """Leaf and node prefixes and the split rule agree with the published CT test vectors."""
    leaves = [leaf_hash(bytes.fromhex(x)) for x in CT_INPUTS]
    for n in range(1, 9):
        assert merkle_root(leaves[:n]).hex() == CT_ROOTS[n - 1], f"size {n}"


def test_the_empty_tree_head_is_the_hash_of_nothing() -> None:
    """MTH({}) = SHA-256() as RFC 6962 defines it."""
    assert merkle_root([]) == hashlib.sha256(b"").digest()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=16), min_size=1, max_size=70))
def test_the_bottom_up_tree_equals_the_recursive_definition(payloads: list[bytes]) -> None:
    """Carrying the odd node up gives RFC 6962's largest-power-of-two split for every size."""
    leaves = [leaf_hash(p) for p in payloads]
    assert merkle_root(leaves) == _mth(leaves)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 70), st.data())
def test_every_audit_path_is_rfc_6962_path_and_verifies(n: int, data: st.DataObject) -> None:
    """PATH(m) matches the RFC and leads back to the root only for the right leaf and index."""
    leaves = [leaf_hash(i.to_bytes(4, "big")) for i in range(n)]
    root = merkle_root(leaves)
    m = data.draw(st.integers(0, n - 1))
    path = audit_path(leaves, m)
    assert path == _path(m, leaves)
    assert root_from_path(leaves[m], m, n, path) == root
    other = leaf_hash(b"not a leaf")
    assert root_from_path(other, m, n, path) != root
    if n > 1:
        wrong = (m + 1) % n
        assert root_from_path(leaves[m], wrong, n, path) != root


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 40), max_size=8))
def test_a_frontier_extended_in_any_steps_gives_the_tree_head_of_all_its_leaves(
    steps: list[int],
) -> None:
    """Grown a few leaves at a time (none, one, many), a frontier's root is always the
    RFC 6962 head of every leaf so far."""
    f, leaves = MerkleFrontier(), []
    assert f.root() == merkle_root([])
    for k in steps:
        more = [leaf_hash(len(leaves).to_bytes(4, "big") + bytes([i])) for i in range(k)]
        f.extend(more)
        leaves.extend(more)
        assert f.size == len(leaves) and f.root() == _mth(leaves)


def test_an_audit_path_refuses_an_index_outside_the_tree() -> None:
    """Out-of-range indexes are a clear error when proving and a failure when checking."""
    leaves = [leaf_hash(b"a"), leaf_hash(b"b")]
    try:
        audit_path(leaves, 2)
    except IndexError as exc:
        assert "outside a tree of 2 leaves" in str(exc)
    else:
        raise AssertionError("expected IndexError")
    assert root_from_path(leaves[0], 5, 2, []) is None
