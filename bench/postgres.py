"""PostgreSQL spine benchmark: `PostgresLog` against raw psycopg running the same statements.

Every figure runs its baseline in this same process, on the same server, in alternating
rounds, and is printed with its ratio to that baseline. The raw baseline makes the spine's
own append calls (the last-seq read and the server-side append function, imported from the
implementation, so they cannot drift), and encodes each event as a plain dict with orjson;
the ratio is therefore the spine's own cost: validation, the Event codec, records and
results.

- append: 1 and 100 events per commit (appends/s, events/s);
- replay: decoding a whole stream into events (`read_events`) against fetching the same
  rows and parsing them with orjson;
- wake: a writer in another process appends, a subscriber here is woken by LISTEN/NOTIFY
  (poll floor off); p50/p99 from the writer's commit call to delivery.

Run it with ``python bench/postgres.py`` (``--quick`` for a smoke run). It starts a
throwaway cluster (fsync on) in a temporary directory when the server binaries are
installed, or uses ``VERTEBRA_BENCH_PG`` (a URL of a database it may fill).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import orjson  # noqa: E402
import psycopg  # noqa: E402

from spine import Event, Kind, open_log, subscribe  # noqa: E402
from spine._postgres import APPEND, LAST_SEQ, PostgresLog  # noqa: E402
from spine.testing import fresh_schema, postgres_cluster  # noqa: E402

WAIT = 10.0


def conversation(n: int) -> list[Event]:
    text = "The durable, ordered log of every session keeps each event exactly once. " * 2
    kinds = [Kind.USER_MESSAGE, Kind.TURN_STARTED, Kind.ASSISTANT, Kind.TURN_COMPLETED]
    return [Event(kind=kinds[i % 4], actor="agent", turn=i // 4 + 1, text=text) for i in range(n)]


def _raw_dict(ev: Event, seq: int) -> bytes:
    d: dict[str, Any] = {"seq": seq, "time": "2030-01-01T00:00:00.000000Z", "kind": ev.kind}
    if ev.actor:
        d["actor"] = ev.actor
    if ev.turn:
        d["turn"] = ev.turn
    if ev.text:
        d["text"] = ev.text
    return orjson.dumps(d)


class RawAppender:
    """The spine's append statements through bare psycopg: the baseline."""

    def __init__(self, url: str) -> None:
        self.c = psycopg.connect(url, autocommit=True)
        self.channel = "spine_raw"

    def append(self, stream: str, events: list[Event]) -> None:
        # The spine's own shape: the last seq read first (no expected seq is given), then
        # the whole transaction as one call of the server-side function.
        c = self.c
        row = c.execute(LAST_SEQ, (stream,)).fetchone()
        last = row[0] if row else 0
        kinds = {str(ev.kind): last + i + 1 for i, ev in enumerate(events)}
        out = c.execute(
            APPEND,
            (
                stream,
                last,
                None,
                None,
                [str(ev.kind) for ev in events],
                [_raw_dict(ev, last + i + 1) for i, ev in enumerate(events)],
                1,
                self.channel,
                orjson.dumps([stream, kinds]).decode(),
            ),
        ).fetchone()
        assert out is not None and out[0] == "ok", out

    def close(self) -> None:
        self.c.close()


def _median_rate(samples: list[float], per: int) -> float:
    return per / statistics.median(samples)


def bench_append(url: str, batch: int, commits: int, rounds: int) -> tuple[float, float]:
    """Median events/s of the spine and of the baseline, alternating rounds."""
    evs = conversation(batch)
    log = PostgresLog(url)
    raw = RawAppender(url)
    spine_t: list[float] = []
    raw_t: list[float] = []
    try:
        for r in range(rounds):
            for name, fn, out in (
                ("spine", lambda s: log.append(s, evs), spine_t),
                ("raw", lambda s: raw.append(s, evs), raw_t),
            ):
                stream = f"{name}-{batch}-{r}-{uuid.uuid4().hex[:6]}"
                t0 = time.perf_counter()
                for _ in range(commits):
                    fn(stream)
                out.append((time.perf_counter() - t0) / (commits * batch))
    finally:
        log.close()
        raw.close()
    return 1 / statistics.median(spine_t), 1 / statistics.median(raw_t)


def bench_replay(url: str, n: int, rounds: int) -> tuple[float, float]:
    log = PostgresLog(url)
    stream = "replay-" + uuid.uuid4().hex[:8]
    evs = conversation(n)
    for i in range(0, n, 1000):
        log.append(stream, evs[i : i + 1000])
    raw = psycopg.connect(url, autocommit=True)
    spine_t: list[float] = []
    raw_t: list[float] = []
    try:
        for _ in range(rounds):
            t0 = time.perf_counter()
            got = log.read_events(stream)
            spine_t.append(time.perf_counter() - t0)
            assert len(got) == n
            t0 = time.perf_counter()
            rows = raw.execute(
                "SELECT seq, version, payload FROM spine_events WHERE stream = %s AND seq > 0 "
                "ORDER BY seq",
                (stream,),
                binary=True,
            ).fetchall()
            dicts = [orjson.loads(p) for _, _, p in rows]
            raw_t.append(time.perf_counter() - t0)
            assert len(dicts) == n
    finally:
        log.close()
        raw.close()
    return n / statistics.median(spine_t), n / statistics.median(raw_t)


def _mono_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def _wake_writer(url: str, stream: str, n: int, go: Any, done: Any) -> None:
    log = PostgresLog(url)
    try:
        go.wait(WAIT)
        for _ in range(n):
            log.append(stream, [Event(kind=Kind.ASSISTANT, text=str(_mono_ns()))])
            # Spaced so each wake is measured alone, not queued behind the previous one.
            done.wait(0.004)
    finally:
        log.close()


def bench_wake(url: str, n: int) -> tuple[float, float]:
    """NOTIFY wake latency (ms) from the writer's append call to delivery here."""
    stream = "wake-" + uuid.uuid4().hex[:8]
    log = open_log(url)
    ctx = mp.get_context("spawn")
    go, done = ctx.Event(), ctx.Event()
    lat: list[float] = []
    with subscribe(log, stream, poll_floor=0) as sub:
        p = ctx.Process(target=_wake_writer, args=(url, stream, n, go, done))
        p.start()
        try:
            go.set()
            for _ in range(n):
                ev = sub.get(WAIT)
                if ev is None:
                    raise RuntimeError("a wake never arrived")
                lat.append((_mono_ns() - int(ev.text)) / 1e6)
        finally:
            p.join(WAIT)
            if p.is_alive():
                p.kill()
    log.close()
    lat.sort()
    return lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))]


@contextlib.contextmanager
def server() -> Iterator[str]:
    url = os.environ.get("VERTEBRA_BENCH_PG")
    if url:
        yield url
        return
    with postgres_cluster(fsync=True) as started:
        yield started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    rounds = 3 if args.quick else 7
    scale = 10 if args.quick else 1
    with server() as base, fresh_schema(base) as url:
        PostgresLog(url).close()  # create the schema
        print(f"PostgreSQL spine benchmark ({rounds} alternating rounds, medians)")
        rows: list[tuple[str, float, float, str]] = []
        for batch, commits in ((1, 1000 // scale), (100, 100 // scale)):
            s, r = bench_append(url, batch, commits, rounds)
            rows.append((f"append, {batch} event(s)/commit", s, r, "events/s"))
        s, r = bench_replay(url, 20_000 // scale, rounds)
        rows.append(("replay (read_events)", s, r, "events/s"))
        for name, s, r, unit in rows:
            print(f"  {name:<32} spine {s:>10,.0f} {unit}   raw {r:>10,.0f}   ratio {s / r:.2f}x")
        p50, p99 = bench_wake(url, 100 if args.quick else 500)
        print(f"  NOTIFY wake, other process       p50 {p50:.2f} ms   p99 {p99:.2f} ms")


if __name__ == "__main__":
    main()
