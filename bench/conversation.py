"""Conversation benchmark: the cost of a fork, and a steer's acknowledgement, one run.

- Fork: a stream of N events (default 100,000: user messages, turns, answers) is written
  straight to a SQLite spine, then forked at its end with the Host's own steps (read the
  prefix, build the copy and its provenance, one append). Reported: the time and the new
  storage (the file's growth). A fork copies (docs/protocol.md says why), so both grow
  with N; the issue's target (10 ms, 1 KB at 100,000 events) needs a fork by reference.
- Steer: on a multiprocess Host, a turn hangs (``!hang``); then steers and plain
  (enqueued) messages are sent alternately to it. Reported: the acknowledgement p50/p99
  of each; target: the steer's p99 no worse than the plain message's.

Run ``python bench/conversation.py`` (``--quick`` for a smoke run). Everything lives in a
temporary directory removed at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

from actors.host import Host  # noqa: E402
from actors.host.conversation import _prefix, fork_events  # noqa: E402
from spine import Event, Kind, SqliteLog, subscribe  # noqa: E402


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


def fork_figures(data: str, n: int) -> None:
    path = os.path.join(data, "fork.db")
    log = SqliteLog(path)
    try:
        events = _turns(n)
        for i in range(0, n, 5000):
            log.append("parent", events[i : i + 5000])
        before = os.path.getsize(path)
        t0 = time.perf_counter()
        records = _prefix(log, "parent", n)
        log.append("child", fork_events(records, "parent", n, {}), expected_seq=0)
        took = time.perf_counter() - t0
    finally:
        log.close()
    wal = path + "-wal"
    grown = os.path.getsize(path) + (os.path.getsize(wal) if os.path.exists(wal) else 0) - before
    print(f"fork of {n} events: {took * 1e3:.1f} ms, new storage about {grown / 1024:.0f} KiB")


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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--steers", type=int, default=300)
    args = ap.parse_args()
    n = 10_000 if args.quick else args.events
    steers = 50 if args.quick else args.steers
    data = tempfile.mkdtemp(prefix="vertebra-conv-")
    try:
        fork_figures(data, n)
        steer_figures(data, steers)
    finally:
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
