"""`actors._runtime.forking.on_fresh_chunk`: calls that straddle a frame-stack chunk boundary map
and unmap a chunk each time; under the padded frame there is no boundary for ~200 frames."""

from __future__ import annotations

import resource

import pytest

from actors._runtime.forking import _PAD_SLOTS, _padded_call, on_fresh_chunk

CALLS = 200


def _leaf() -> None:
    return None


def _faults_of_leaf_calls(depth: int) -> float:
    """Page faults per call of a leaf function called ``depth`` frames below here."""
    if depth:
        return _faults_of_leaf_calls(depth - 1)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(CALLS):
        _leaf()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / CALLS


def _churning_depths(depths: range) -> list[int]:
    """Depths where every call faults: the leaf's frame opens a new chunk, mapped on the
    call and unmapped on the return."""
    return [d for d in depths if _faults_of_leaf_calls(d) >= 1]


def test_under_the_padded_frame_no_call_within_200_frames_maps_a_chunk() -> None:
    # About 136 bytes per frame here: 200 frames span more than one 16 KiB chunk, so
    # called plainly some depth in them straddles a boundary.
    depths = range(0, 200)
    plain = _churning_depths(depths)
    if not plain:
        pytest.skip("this interpreter does not map frame-stack chunks per call")
    assert on_fresh_chunk(_churning_depths, depths) == []


def test_on_fresh_chunk_passes_arguments_results_and_errors_through() -> None:
    assert on_fresh_chunk(lambda a, b=0: a + b, 2, b=3) == 5
    assert _padded_call.__code__.co_stacksize == _PAD_SLOTS
    with pytest.raises(KeyError):
        on_fresh_chunk({}.__getitem__, "missing")
