"""Several hosts benchmark: turns/s with sessions on 1, 2 and 3 member hosts.

A convention leader (a `Host` with ``convention_bind``, in this process) and N member
hosts (``vertebra serve --join``, each its own process tree) on loopback share one
PostgreSQL spine. S sessions, each driven by its own thread (send a message, wait for its
turn, again), run for a fixed time; the figure is completed turns per second. The
baseline in the same run is one ordinary host (sessions on the leader's own system) on
the same server, and every figure is printed with its ratio to it.

The last figure is failover: with 3 members under the same load, one member's process
tree is SIGKILLed and the time until each of its sessions acknowledges a message again is
measured (median and max).

Run it with ``python bench/cluster.py`` (``--quick`` for a smoke run). It starts a
throwaway PostgreSQL cluster (fsync off: the log's durability is measured in
bench/postgres.py) unless ``VERTEBRA_BENCH_PG`` names a database it may fill.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

from actors._runtime.system import free_port  # noqa: E402
from actors._runtime.transport_auth import share_secret  # noqa: E402
from actors.host import Host  # noqa: E402
from spine.testing import fresh_schema, postgres_cluster  # noqa: E402


@contextlib.contextmanager
def server() -> Iterator[str]:
    url = os.environ.get("VERTEBRA_BENCH_PG")
    if url:
        yield url
        return
    with postgres_cluster(fsync=False) as started:
        yield started


@contextlib.contextmanager
def cluster(url: str, members: int, root: str) -> Iterator[tuple[Host, list[Any]]]:
    """A leader and ``members`` member hosts (0: one ordinary host)."""
    port = free_port()
    data = tempfile.mkdtemp(dir=root)
    if members == 0:
        h = Host(os.path.join(data, "single"), spine=url, timeout=60)
    else:
        h = Host(
            os.path.join(data, "leader"),
            spine=url,
            convention_bind="127.0.0.1",
            admin_port=port,
            timeout=60,
        )
    procs: list[Any] = []
    try:
        for i in range(members):
            # A member proves itself with the leader's secret.
            share_secret(os.path.join(data, "leader"), os.path.join(data, f"m{i}"))
            procs.append(
                subprocess.Popen(
                    [
                        *[sys.executable, "-m", "actors.cli", "serve"],
                        *["--data", os.path.join(data, f"m{i}"), "--spine", url],
                        *["--join", f"127.0.0.1:{port}", "--host-name", f"m{i}"],
                        *["--capacity", "100", "--bind", "127.0.0.1"],
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        deadline = time.monotonic() + 60
        while members and sum(r["alive"] for r in h.hosts()) < members:
            if time.monotonic() > deadline:
                raise TimeoutError("members did not join")
            time.sleep(0.1)
        yield h, procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        h.close()


class Driver:
    """One thread per session: send, wait for the turn, again; acks timed."""

    def __init__(self, h: Host, sids: list[str]) -> None:
        self.h = h
        self.stop = threading.Event()
        self.turns = 0
        self.lock = threading.Lock()
        self.acks: dict[str, list[float]] = {s: [] for s in sids}
        self.threads = [threading.Thread(target=self.run, args=(s,)) for s in sids]

    def run(self, sid: str) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            try:
                ack = self.h.send(sid, f"hello {n}", key=f"{sid}:{n}")
                with self.lock:
                    self.acks[sid].append(time.monotonic())
                self.h.wait_turn(sid, ack.seq, timeout=60)
            except Exception:
                n -= 1  # the same key again: stored once
                continue
            with self.lock:
                self.turns += 1

    def __enter__(self) -> Driver:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(90)


def turn_rate(h: Host, sessions: int, seconds: float) -> float:
    sids = [h.create() for _ in range(sessions)]
    with Driver(h, sids) as d:
        time.sleep(1.0)  # warm-up: every session has run a turn
        with d.lock:
            start, t0 = d.turns, time.monotonic()
        time.sleep(seconds)
        with d.lock:
            done, t1 = d.turns, time.monotonic()
    return (done - start) / (t1 - t0)


def member_tree(name: str) -> list[int]:
    """Every live process of member ``name``: its command and the actor processes its
    actor system forked (they keep the command line they were forked with)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        with contextlib.suppress(OSError):
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if b"--join" in argv and name.encode() in argv:
                out.append(int(pid))
    return out


def failover(h: Host, sessions: int) -> tuple[float, float, int]:
    """SIGKILL every process of member m0 under load: median and max seconds until each
    of its sessions acknowledges a message sent after the kill (or redelivered by it)."""
    sids = [h.create() for _ in range(sessions)]
    with Driver(h, sids) as d:
        time.sleep(2.0)
        pids = member_tree("m0")
        on_m0 = [s for s in sids if h.session_pid(s) in set(pids)]
        with d.lock:
            sent_before = {s: len(d.acks[s]) for s in on_m0}
        t0 = time.monotonic()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = t0 + 60
        waits: list[float | None] = []
        while time.monotonic() < deadline:
            with d.lock:
                # Acks counted from the kill on, skipping one the old incarnation may
                # have had in flight when it died.
                waits = [
                    next((t for t in d.acks[s][sent_before[s] :] if t > t0 + 0.05), None)
                    for s in on_m0
                ]
            if all(w is not None for w in waits):
                break
            time.sleep(0.02)
    got = [w - t0 for w in waits if w is not None]
    if len(got) < len(on_m0) or not got:
        return float("nan"), float("nan"), len(on_m0)
    return statistics.median(got), max(got), len(on_m0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--failover-only", action="store_true")
    args = ap.parse_args()
    sessions = 6 if args.quick else 12
    seconds = 3.0 if args.quick else 8.0
    rounds = 1 if args.quick else 3
    root = tempfile.mkdtemp(prefix="vertebra-bench-cluster-")
    print(f"cluster bench: {sessions} sessions, {seconds:g}s per figure, {rounds} rounds")
    print(f"machine: {os.cpu_count()} cores")
    rates: dict[int, list[float]] = {0: [], 1: [], 2: [], 3: []}
    with server() as base:
        for _ in range(0 if args.failover_only else rounds):
            for members in (0, 1, 2, 3):
                with fresh_schema(base) as url, cluster(url, members, root) as (h, _):
                    rates[members].append(turn_rate(h, sessions, seconds))
        single = statistics.median(rates[0] or [float("nan")])
        print(f"  one ordinary host (baseline)   {single:8.1f} turns/s")
        for members in () if args.failover_only else (1, 2, 3):
            r = statistics.median(rates[members])
            print(
                f"  sessions on {members} member host(s)   {r:8.1f} turns/s  "
                f"x{r / single:.2f} of one host, x{r / statistics.median(rates[1]):.2f} of 1 member"
            )
        with fresh_schema(base) as url, cluster(url, 3, root) as (h, _):
            med, worst, moved = failover(h, sessions)
        print(
            f"  failover: every process of a member with {moved} sessions SIGKILLed; "
            f"they resumed after median {med:.2f}s, max {worst:.2f}s"
        )


if __name__ == "__main__":
    main()
