"""Conversation benchmark: the cost of a fork, and a steer's acknowledgement, one run.

- Fork: a stream of N events (default 100,000: user messages, turns, answers) is written
  straight to a spine, then forked at its end twice, in the same run: by copy (read the
  prefix, append a copy of it and its provenance: how forks were made before) and by
  reference (the Host's own steps: `fork_events`, then `Log.fork`). Reported per way: the
  time (a reference fork is repeated, median and max) and the new storage: the bytes of
  the rows it stored, and the database's growth (SQLite: the file after a checkpoint;
  PostgreSQL: the spine tables' size). Target: 10 ms and 1 KB at 100,000 events, on
  SQLite and PostgreSQL (``--postgres``: a throwaway server, or ``VERTEBRA_BENCH_PG``).
- Steer: on a multiprocess Host, a turn hangs (``!hang``); then steers and plain
  (enqueued) messages are sent alternately to it. Reported: the acknowledgement p50/p99
  of each; target: the steer's p99 no worse than the plain message's.

Run ``python bench/conversation.py`` (``--quick`` for a smoke run). Everything lives in a
temporary directory removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))
sys.path.insert(0, os.path.join(os.path.dirname(_HERE), "tests"))

from steer_storm import storm  # noqa: E402

from actors.host import Host  # noqa: E402
from actors.host.conversation import (  # noqa: E402
    _prefix,
    fork_events,
    fork_root,
    safe_point,
    safe_point_after,
)
from actors.session.rules.state import SessionState, fold  # noqa: E402
from actors.session.shell.snapshots import SnapshotStore  # noqa: E402
from spine import Event, Kind, Log, SqliteLog, subscribe  # noqa: E402
from spine.seal import SigningKey, seal_stream  # noqa: E402


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def _turns(n: int) -> list[Event]:
    out: list[Event] = []
    turn = 0
    while len(out) < n:
        turn += 1
        out += [
            Event(kind=Kind.USER_MESSAGE, text=f"question {turn}"),
            Event(kind=Kind.TURN_STARTED, turn=turn),
            Event(kind=Kind.ASSISTANT, turn=turn, text=f"answer {turn} " + "x" * 80),
            Event(kind=Kind.TURN_COMPLETED, turn=turn, stop_reason="end_turn"),
            Event(kind=Kind.LIFECYCLE, phase="done", turn=turn),
        ]
    return out[:n]


def _copy_fork(log: Log, parent: str, child: str, n: int) -> None:
    """A fork as they were made before forks by reference: the prefix copied."""
    records = _prefix(log, parent, n)
    prov = {"fork.parent": parent, "fork.seq": str(n), "fork.root": fork_root(records)}
    events = [r.event() for r in records]
    log.append(child, [*events, Event(kind=Kind.PROPERTIES, properties=prov)], expected_seq=0)


def _stored(log: Log, stream: str) -> int:
    """Bytes of the rows ``stream`` stores itself (a fork's prefix is not among them)."""
    link = log.fork_link(stream)
    first = link[1] if link else 0
    return sum(len(r.payload) + len(r.stream) + 24 for r in log.read(stream, first, None))


def _write_parent(log: Log, n: int) -> None:
    """The parent, sealed every 1000 events as the daemon's auto-seal does."""
    events = _turns(n)
    key = SigningKey.generate()
    first = 1
    for i in range(0, n, 1000):
        log.append("parent", events[i : i + 1000])
        first = seal_stream(log, "parent", key, first=first).last + 1


def _timed(fork: Callable[[int], object], times: int = 20) -> list[float]:
    out = []
    for i in range(times):
        t0 = time.perf_counter()
        fork(i)
        out.append(time.perf_counter() - t0)
    return out


def _ms(xs: list[float]) -> str:
    return f"median {pct(xs, 0.5) * 1e3:.2f} ms, max {max(xs) * 1e3:.2f} ms"


def fork_figures(log: Log, size: Callable[[], int], n: int, label: str) -> None:
    _write_parent(log, n)
    before = size()
    t0 = time.perf_counter()
    _copy_fork(log, "parent", "copy", n)
    took = time.perf_counter() - t0
    grown = size() - before
    print(
        f"{label} copy fork of {n} events: {took * 1e3:.1f} ms, rows "
        f"{_stored(log, 'copy') / 1024:.0f} KiB, database +{grown / 1024:.0f} KiB"
    )
    at = log.last_seq("parent")  # the parent's last event: its last seal's
    before = size()
    times = _timed(lambda i: log.fork(f"ref-{i}", "parent", at, fork_events(log, "parent", at, {})))
    grown = size() - before
    print(
        f"{label} reference fork of {at} events, root from the newest seal: {_ms(times)}; rows "
        f"{_stored(log, 'ref-0')} B each, database +{grown / 20 / 1024:.1f} KiB each (20 forks)"
    )
    mid = at - 500  # half a seal interval after the newest seal below it
    times = _timed(
        lambda i: log.fork(f"mid-{i}", "parent", mid, fork_events(log, "parent", mid, {}))
    )
    print(f"{label} reference fork at {mid}, root from the seal + 500 rows: {_ms(times)}")

    def no_root(i: int) -> None:
        log.fork(f"bare-{i}", "parent", at, fork_events(log, "parent", at, {}), root=False)

    print(f"{label} reference fork without a root: {_ms(_timed(no_root))}")

    def read_prefix(i: int) -> None:  # how root=True made it before: the prefix read whole
        fork_root(_prefix(log, "parent", at))
        no_root(20 + i)

    print(
        f"{label} reference fork, root from the whole prefix (before): {_ms(_timed(read_prefix))}"
    )
    safe_point_figures(log, at, label)


def safe_point_figures(log: Log, last: int, label: str) -> None:
    """A fork without a seq finds the parent's last safe point: from the parent's snapshot
    (a session snapshots every 1000 events by default; here one 500 events back) and the
    rows after it, against reading the whole stream (how it was found before)."""
    events = log.read_events("parent")
    snap = fold(SessionState(session_id="parent"), events[: last - 500])
    with tempfile.TemporaryDirectory() as d:
        store = SnapshotStore(d, os.path.join(d, "spine.db"))
        store.save(snap)
        store.close()

        def from_snapshot(i: int) -> int:
            s = SnapshotStore(d, os.path.join(d, "spine.db"))
            try:
                state = s.load("parent")
            finally:
                s.close()
            assert state is not None
            tail = [r.event() for r in log.read("parent", state.last_seq, None)]
            return safe_point_after(state, tail, "parent")

        whole = safe_point(log.read_events("parent"), "parent")
        assert from_snapshot(0) == whole
        fast = _ms(_timed(from_snapshot))
    slow = _ms(_timed(lambda i: safe_point(log.read_events("parent"), "parent"), times=5))
    print(f"{label} safe point of {last} events: from the snapshot {fast}; read whole {slow}")


def sqlite_forks(data: str, n: int) -> None:
    path = os.path.join(data, "fork.db")
    log = SqliteLog(path)

    def size() -> int:
        c = sqlite3.connect(path)
        try:
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            c.close()
        return os.path.getsize(path)

    try:
        fork_figures(log, size, n, "sqlite")
    finally:
        log.close()


def postgres_forks(n: int) -> None:
    from spine import open_log
    from spine.testing import fresh_schema, postgres_cluster

    url = os.environ.get("VERTEBRA_BENCH_PG")
    with contextlib.ExitStack() as stack:
        if not url:
            url = stack.enter_context(postgres_cluster(fsync=True))
        scoped = stack.enter_context(fresh_schema(url))
        log = open_log(scoped)
        stack.callback(log.close)
        import psycopg

        c = stack.enter_context(psycopg.connect(scoped, autocommit=True))

        def size() -> int:
            row = c.execute(
                "SELECT sum(pg_total_relation_size(oid)) FROM pg_class WHERE relname LIKE "
                "'spine_%' AND relkind = 'r' AND relnamespace = current_schema()::regnamespace"
            ).fetchone()
            return int(row[0] or 0) if row else 0

        fork_figures(log, size, n, "postgresql")


def steer_figures(data: str, count: int) -> None:
    with Host(os.path.join(data, "host"), base="multiprocTCPBase", timeout=30) as h:
        sid = h.create()
        with subscribe(h._log, sid, 0, (Kind.TURN_STARTED,)) as sub:
            h.send(sid, "!hang")
            if sub.get(30) is None:
                raise SystemExit("the turn did not start")
        steer: list[float] = []
        plain: list[float] = []
        for i in range(count):
            t0 = time.perf_counter()
            h.send(sid, f"steer {i}", mode="steer")
            steer.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            h.send(sid, f"plain {i}", mode="enqueue")
            plain.append(time.perf_counter() - t0)
        h.close_session(sid)
    for name, xs in (("steer", steer), ("plain", plain)):
        print(
            f"{name} ack over {count}: p50 {pct(xs, 0.5) * 1e3:.2f} ms, "
            f"p99 {pct(xs, 0.99) * 1e3:.2f} ms"
        )


def storm_figures(data: str, steers: int, kills: int) -> None:
    t0 = time.perf_counter()
    counts, steer, plain = storm(data, steers, kills)
    took = time.perf_counter() - t0
    print(f"steer storm ({steers} steers, {kills} SIGKILLs, {took:.1f} s):")
    for k, v in counts.items():
        print(f"  {k}: {v}")
    for name, xs in (("steer", steer), ("plain", plain)):
        print(
            f"  {name} ack over {len(xs)}: p50 {pct(xs, 0.5) * 1e3:.2f} ms, "
            f"p99 {pct(xs, 0.99) * 1e3:.2f} ms"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--steers", type=int, default=300)
    ap.add_argument("--postgres", action="store_true", help="fork on PostgreSQL too")
    ap.add_argument("--no-steer", action="store_true", help="the fork figures only")
    ap.add_argument(
        "--storm",
        action="store_true",
        help="only the steer storm: steers racing tool turns, the session SIGKILLed",
    )
    ap.add_argument("--kills", type=int, default=50)
    args = ap.parse_args()
    n = 10_000 if args.quick else args.events
    steers = 50 if args.quick else args.steers
    data = tempfile.mkdtemp(prefix="vertebra-conv-")
    try:
        if args.storm:
            storm_figures(data, 100 if args.quick else 1000, 5 if args.quick else args.kills)
            return
        sqlite_forks(data, n)
        if args.postgres:
            postgres_forks(n)
        if not args.no_steer:
            steer_figures(data, steers)
    finally:
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
