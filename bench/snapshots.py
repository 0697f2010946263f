"""Snapshot benchmark: a session's cold first load at any length, and what writing
snapshots costs the turn path. One run, ``multiprocTCPBase`` over loopback.

- cold first load: a stream of 10k, 100k and 1M events (plausible turns of five events)
  is written straight into the data directory's spine, with the snapshot the session's
  default policy (`actors.policy.SnapshotPolicy`) leaves behind at its worst: 999 events
  before the end, so the load folds 999 events after it. A Host that has never seen the
  session is then asked to send it a message: the time to its ack is the first load
  (a process, the snapshot, the tail, the commit). Baselines in the same run: a stream
  of one event (the floor: all of it but the fold) and a stream without a snapshot
  (what every first load cost without one, per event);
- the turn path: ack and turn p50/p99 of one session per Host, three Hosts at once with
  snapshots off, the default policy (1000 events or 4 MiB) and an aggressive one (every
  100 events), in alternating rounds; ratios against the Host with snapshots off; and,
  steadier on a loaded machine, a snapshot's write alone against a turn's append.

Run ``python bench/snapshots.py`` (``--quick``: 10k and 100k only, fewer turns).
"""

from __future__ import annotations

import argparse
import os
import pickle
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

from actors._runtime.system import loopback_only  # noqa: E402
from actors.policy import SnapshotPolicy  # noqa: E402
from actors.runner import spine_path  # noqa: E402
from actors.session.rules.state import SessionState, fold  # noqa: E402
from actors.session.shell.snapshots import SnapshotStore  # noqa: E402
from bench.actors import TURN_END, WAIT, host, ms, new_sid, pct  # noqa: E402
from spine import Event, Kind, Phase, SqliteLog, Usage  # noqa: E402

BATCH = 10_000


def _turns() -> Iterator[Event]:
    yield Event(kind=Kind.SESSION_STARTED)
    turn = 0
    while True:
        turn += 1
        yield Event(kind=Kind.USER_MESSAGE, text=f"question {turn} about the quarterly report")
        yield Event(kind=Kind.TURN_STARTED, turn=turn)
        yield Event(kind=Kind.ASSISTANT, turn=turn, text=f"[scripted] answer {turn} " * 4)
        yield Event(
            kind=Kind.TURN_COMPLETED,
            turn=turn,
            stop_reason="end_turn",
            usage=Usage(input_tokens=12, output_tokens=40),
        )
        yield Event(kind=Kind.LIFECYCLE, phase=Phase.DONE, turn=turn)


def fill(data: str, sid: str, n: int, snapshot_at: int) -> tuple[int, int]:
    """``n`` events into ``sid``'s stream; its state folded up to ``snapshot_at`` stored
    as its snapshot (0: none). Returns (last seq, snapshot bytes)."""
    log = SqliteLog(spine_path(data))
    store = SnapshotStore(data, spine_path(data))
    state = SessionState(session_id=sid)
    size = 0
    try:
        events, seq = _turns(), 0
        while seq < n:
            batch = [next(events) for _ in range(min(BATCH, n - seq))]
            if seq < snapshot_at:
                upto = min(len(batch), snapshot_at - seq)
                state = fold(state, batch[:upto], seq + 1)
            seq = log.append(sid, batch, expected_seq=seq).last_seq
        if snapshot_at:
            assert state.last_seq == snapshot_at and store.save(state)
            size = len(pickle.dumps(state))
        return seq, size
    finally:
        store.close()
        log.close()


def cold_loads(root: str, lengths: list[int], bare: int) -> None:
    data = os.path.join(root, "cold")
    os.makedirs(data)
    every = SnapshotPolicy().events
    streams: list[tuple[str, str, int, int]] = []  # label, session, length, snapshot bytes
    t0 = time.perf_counter()
    for n in lengths:
        sid = new_sid()
        _, size = fill(data, sid, n, n - (every - 1))
        streams.append((f"{n:,} events, snapshot {every - 1} before the end", sid, n, size))
    floor_sid = new_sid()
    fill(data, floor_sid, 1, 0)
    bare_sid = new_sid()
    fill(data, bare_sid, bare, 0)
    print(f"streams written straight into the spine in {time.perf_counter() - t0:.1f} s")
    with host(data) as h:
        got: dict[str, float] = {}
        for label, sid, _, _ in [
            ("floor: a 1-event stream", floor_sid, 1, 0),
            *streams,
            (f"{bare:,} events, no snapshot", bare_sid, bare, 0),
        ]:
            h.register(sid)
            time.sleep(0.5)  # a spare is started again after each use: never wait for one
            t = time.perf_counter()
            a = h.send(sid, "first load")
            got[label] = time.perf_counter() - t
            h.wait_turn(sid, a.seq, timeout=WAIT)
            resent = h._runtime.resent
    floor = got["floor: a 1-event stream"]
    print("cold first load (register, first send, its ack), one Host that never saw them")
    for label, took in got.items():
        print(f"  {label:45s} {ms(took)}  {took / floor:6.2f}x the floor")
    for _, _, n, size in streams:
        print(f"  snapshot of the {n:,}-event stream: {size:,} bytes")
    longest = got[streams[-1][0]]
    per_event = (got[f"{bare:,} events, no snapshot"] - floor) / bare
    print(
        f"  without a snapshot: {per_event * 1e6:.1f} us per event "
        f"({per_event * lengths[-1]:.1f} s at {lengths[-1]:,})"
    )
    print(
        f"  target: {lengths[-1]:,} events <= 100 ms: "
        f"{'met' if longest <= 0.1 else 'MISSED'} ({ms(longest)}); Host re-sends: {resent}"
    )


def focused(root: str, saves: int) -> None:
    """A snapshot's write alone (pickle and upsert of a state at its full size) against
    a turn's append (five events, one commit) on the same machine, alternating."""
    data = os.path.join(root, "focused")
    os.makedirs(data)
    sid = new_sid()
    fill(data, sid, 10_000, 10_000)
    store = SnapshotStore(data, spine_path(data))
    log = SqliteLog(spine_path(data))
    try:
        state = store.load(sid)
        assert state is not None
        events, seq = _turns(), log.last_seq(sid)
        next(events)
        save_t: list[float] = []
        turn_t: list[float] = []
        for _ in range(saves):
            batch = [next(events) for _ in range(5)]
            t0 = time.perf_counter()
            seq = log.append(sid, batch, expected_seq=seq).last_seq
            t1 = time.perf_counter()
            assert store.save(state)
            t2 = time.perf_counter()
            turn_t.append(t1 - t0)
            save_t.append(t2 - t1)
    finally:
        log.close()
        store.close()
    s50, s99, a50 = pct(save_t, 0.5), pct(save_t, 0.99), pct(turn_t, 0.5)
    per_turn = s50 / (SnapshotPolicy().events / 5)
    print(f"a snapshot's write alone (n={saves}, state of {len(pickle.dumps(state)):,} bytes)")
    print(f"  save p50 {ms(s50)}  p99 {ms(s99)}; a turn's append p50 {ms(a50)}")
    print(
        f"  {s50 / a50:.2f}x a turn's append, once per {SnapshotPolicy().events // 5} turns "
        f"by default: {per_turn * 1e6:.1f} us a turn ({per_turn / a50:.2%} of its append)"
    )


CONFIGS = {
    "off": SnapshotPolicy(events=0, size=0),
    "default (1000 events / 4 MiB)": SnapshotPolicy(),
    "every 100 events": SnapshotPolicy(events=100, size=0),
}


def turn_path(root: str, rounds: int, per_round: int) -> None:
    acks: dict[str, list[float]] = {name: [] for name in CONFIGS}
    turns: dict[str, list[float]] = {name: [] for name in CONFIGS}
    with ExitStack() as stack:
        runs = []
        for i, (name, policy) in enumerate(CONFIGS.items()):
            h = stack.enter_context(host(os.path.join(root, f"turns-{i}"), snapshots=policy))
            sid = h.create()
            sub = stack.enter_context(h.subscribe(sid, h.history(sid)[-1].seq, kinds=TURN_END))
            runs.append((name, h, sid, sub))
        for _, h, sid, sub in runs:  # warm up: 200 turns, a state near its full size
            for j in range(200):
                h.send(sid, f"warm {j}")
                assert sub.get(WAIT) is not None
        for r in range(rounds):
            order = runs if r % 2 == 0 else runs[::-1]
            for name, h, sid, sub in order:
                for j in range(per_round):
                    t0 = time.perf_counter()
                    h.send(sid, f"hello {r} {j}")
                    t1 = time.perf_counter()
                    assert sub.get(WAIT) is not None
                    acks[name].append(t1 - t0)
                    turns[name].append(time.perf_counter() - t0)
        seqs = {name: h.get(sid).last_seq for name, h, sid, _ in runs}
    base = "off"
    b = (pct(acks[base], 0.5), pct(acks[base], 0.99), pct(turns[base], 0.5))
    print(f"turn path, one session per Host, {rounds} alternating rounds of {per_round}")
    for name in CONFIGS:
        a50, a99, t50 = pct(acks[name], 0.5), pct(acks[name], 0.99), pct(turns[name], 0.5)
        t99 = pct(turns[name], 0.99)
        print(
            f"  {name:30s} ack p50 {ms(a50)} ({a50 / b[0]:4.2f}x) p99 {ms(a99)} "
            f"({a99 / b[1]:4.2f}x)  turn p50 {ms(t50)} ({t50 / b[2]:4.2f}x) p99 {ms(t99)}"
            f"  stream at {seqs[name]}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a fast smoke run")
    ap.add_argument("--only", choices=("cold", "turns"), help="run one part only")
    args = ap.parse_args()
    loopback_only()
    q = args.quick
    started = time.perf_counter()
    root = tempfile.mkdtemp(prefix="vertebra-bench-snapshots-")
    try:
        if args.only != "turns":
            lengths = [10_000, 100_000] if q else [10_000, 100_000, 1_000_000]
            cold_loads(root, lengths, bare=10_000 if q else 30_000)
        if args.only != "cold":
            focused(root, saves=200 if q else 1000)
            turn_path(root, rounds=2 if q else 4, per_round=50 if q else 200)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
