"""When sessions write their snapshots (`SnapshotPolicy`): by events or by bytes as
they grow, at once after a load that folded a long way, never when turned off; and how
an operator sets it (real session processes, real spine and snapshot files)."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from actors import SnapshotPolicy
from actors.cli._commands import COMMANDS
from actors.cli._daemon import CliError
from actors.cli._parser import build_parser
from actors.host import Host
from actors.session.rules.state import SessionState
from actors.session.shell.snapshots import SnapshotStore
from spine import Event, Kind, SqliteLog


@pytest.mark.parametrize(
    ("policy", "events", "size", "due"),
    [
        (SnapshotPolicy(), 999, 0, False),
        (SnapshotPolicy(), 1000, 0, True),
        (SnapshotPolicy(), 3, 4 * 1024 * 1024, True),
        (SnapshotPolicy(events=0), 10**9, 10, False),
        (SnapshotPolicy(events=0, size=100), 1, 100, True),
        (SnapshotPolicy(events=5, size=0), 5, 0, True),
        (SnapshotPolicy(events=0, size=0), 10**9, 10**12, False),
    ],
)
def test_a_snapshot_is_due_by_events_or_by_bytes_whichever_comes_first(
    policy: SnapshotPolicy, events: int, size: int, due: bool
) -> None:
    assert policy.due(events, size) is due


def test_a_negative_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="events"):
        SnapshotPolicy(events=-1)


def test_serve_defaults_to_the_policy_and_refuses_a_negative_bound() -> None:
    parser = build_parser(COMMANDS)
    args = parser.parse_args(["serve"])
    default = SnapshotPolicy()
    assert (args.snapshot_every, args.snapshot_bytes) == (default.events, default.size)
    args = parser.parse_args(["serve", "--snapshot-every", "0", "--snapshot-bytes", "65536"])
    assert (args.snapshot_every, args.snapshot_bytes) == (0, 65536)
    with pytest.raises(CliError, match="--snapshot-every: must be 0 or more"):
        parser.parse_args(["serve", "--snapshot-every", "-5"])


def _host(data: pathlib.Path, policy: SnapshotPolicy) -> Iterator[Host]:
    h = Host(data, base="multiprocTCPBase", timeout=30, snapshots=policy)
    try:
        yield h
    finally:
        h.close()


def _fill(h: Host, sid: str, n: int) -> int:
    """``n`` events written straight into the spine (an import, a fork's copy)."""
    log = SqliteLog(os.path.join(h.data_dir, "spine.db"))
    try:
        events = [Event(kind=Kind.SESSION_STARTED)]
        events += [Event(kind=Kind.PROPERTIES, properties={"n": str(i)}) for i in range(n - 1)]
        return log.append(sid, events, expected_seq=0).last_seq
    finally:
        log.close()


def _snapshot(h: Host, sid: str) -> SessionState | None:
    store = SnapshotStore(h.data_dir, os.path.join(h.data_dir, "spine.db"))
    try:
        return store.load(sid)
    finally:
        store.close()


@pytest.fixture
def default_host(tmp_path: pathlib.Path, no_leftover_processes: Any) -> Iterator[Host]:
    yield from _host(tmp_path / "data", SnapshotPolicy())


def test_a_long_stream_written_by_others_is_snapshotted_at_its_first_load(
    default_host: Host,
) -> None:
    """Its first load folds it all; it leaves a snapshot of what it loaded, before the
    message it was loaded for, so the next load folds only what follows."""
    h = default_host
    filled = _fill(h, "imported", 1500)
    h.register("imported")
    ack = h.send("imported", "hello")
    h.wait_turn("imported", ack.seq)
    snap = _snapshot(h, "imported")
    assert snap is not None and snap.last_seq == filled
    assert snap.metadata == {"n": "1498"}


@pytest.fixture
def by_size(tmp_path: pathlib.Path, no_leftover_processes: Any) -> Iterator[Host]:
    yield from _host(tmp_path / "data", SnapshotPolicy(events=0, size=4000))


def test_a_session_of_large_events_is_snapshotted_by_their_bytes(by_size: Host) -> None:
    """Counting events alone, these few large ones would never make one due."""
    h = by_size
    sid = h.create()
    for i in range(4):
        h.wait_turn(sid, h.send(sid, f"{i} " + "x" * 1500).seq)
    snap = _snapshot(h, sid)
    assert snap is not None and 0 < snap.last_seq <= h.get(sid).last_seq
    assert any(text.startswith("1 ") for _, text, _ in snap.history)


@pytest.fixture
def never(tmp_path: pathlib.Path, no_leftover_processes: Any) -> Iterator[Host]:
    yield from _host(tmp_path / "data", SnapshotPolicy(events=0, size=0))


def test_snapshots_turned_off_are_never_written(never: Host) -> None:
    h = never
    _fill(h, "imported", 1500)
    h.register("imported")
    for i in range(3):
        h.wait_turn("imported", h.send("imported", f"{i} " + "x" * 1500).seq)
    assert _snapshot(h, "imported") is None
