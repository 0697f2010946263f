"""Gateway benchmark: SSE delivery latency and POST /messages throughput, one run.

The daemon runs as a user starts it (``vertebra serve --http``, its own process, the
gateway on loopback). Figures, each against a baseline measured in the same run:

- SSE delivery latency, from an append to the spine to the client's receipt of the event,
  with 1 client on one stream, 100 clients on one stream, and 100 clients spread over 50
  streams. The benchmark appends straight to the daemon's SQLite spine (a stream with no
  session actor: the gateway tails any stream) with the send time in the event, and reads
  every SSE response on one asyncio loop. Baseline: the spine's own subscriber, in this
  process on a connection of its own, receiving the same appends. Target: p99 at most 5 ms
  over the baseline with 100 clients.
- ``POST /v1/sessions/{id}/messages`` requests per second (8 concurrent clients, one
  session each, scripted turns) against ``Host.send`` called directly from 8 threads on the
  same daemon (an attached Host). Target: at least 0.5x.

Run ``python bench/gateway.py`` (``--quick`` for a smoke run). The data directory is
temporary and removed at the end; the daemon is stopped and the run checks that none of
its processes outlive it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import httpx  # noqa: E402
import orjson  # noqa: E402

from actors._runtime.system import free_port, processes_in_session  # noqa: E402
from actors.host import Host  # noqa: E402
from actors.runner import spine_path  # noqa: E402
from spine import Event, Kind, SqliteLog, subscribe  # noqa: E402


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def ms(x: float) -> str:
    return f"{x * 1e3:7.2f} ms"


class Daemon:
    """``vertebra serve --http`` in its own process."""

    def __init__(self, root: str) -> None:
        self.data = os.path.join(root, "data")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "actors.cli",
                "--data",
                self.data,
                "serve",
                "--quiet",
                "--http",
                f"127.0.0.1:{self.port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{self.url}/openapi.json").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit("the daemon did not start")
            time.sleep(0.05)
        with open(os.path.join(self.data, "gateway-token")) as f:
            self.token = f.read().strip()
        with open(os.path.join(self.data, "daemon.json")) as f:
            info = json.load(f)
        self.admin_port = int(info["admin_port"])
        self.system_session = int(info["system_session"])

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        deadline = time.monotonic() + 15
        while processes_in_session(self.system_session):
            if time.monotonic() > deadline:
                raise SystemExit("daemon processes outlived the run")
            time.sleep(0.05)


# -- SSE latency -----------------------------------------------------------------------


async def _sse_client(
    port: int, token: str, stream: str, got: Callable[[float], None], ready: asyncio.Event
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"GET /v1/sessions/{stream}/events?after=1 HTTP/1.1\r\nHost: bench\r\n"
        f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    await writer.drain()
    # Whole chunks, split here: per-line reads would make this reader, not the gateway,
    # the slowest part on a machine whose cores it shares with the daemon.
    buf = b""
    try:
        while True:
            chunk = await reader.read(1 << 16)
            if not chunk:
                return
            now = time.time()
            *lines, buf = (buf + chunk).split(b"\n")
            for line in lines:
                if line.startswith(b"data: "):
                    got(now - float(orjson.loads(line[6:])["text"]))
                elif line.startswith(b"retry:"):
                    ready.set()
    finally:
        writer.close()


def sse_latency(
    d: Daemon, clients: int, streams: int, appends: int, pace: float, tag: str
) -> tuple[list[float], list[float]]:
    """Per-receipt latencies of SSE clients and of one spine subscriber per stream."""
    names = [f"bench-{tag}-{i}" for i in range(streams)]
    log = SqliteLog(spine_path(d.data))
    for name in names:
        log.append(name, [Event(kind=Kind.USER_MESSAGE, text="0")])
    sse: list[float] = []
    base: list[float] = []
    # Each append reaches only its own stream's clients.
    expected = appends * clients // streams
    # The baseline: the spine's own subscriber on a log object of its own.
    sub_log = SqliteLog(spine_path(d.data))
    subs = [subscribe(sub_log, name, 1) for name in names]
    stop = threading.Event()

    def follow(sub: Any) -> None:
        while not stop.is_set():
            ev = sub.get(0.2)
            if ev is not None:
                base.append(time.time() - float(ev.text))

    threads = [threading.Thread(target=follow, args=(s,), daemon=True) for s in subs]
    for t in threads:
        t.start()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        done = asyncio.Event()

        def got(latency: float) -> None:
            sse.append(latency)
            if len(sse) >= expected:
                done.set()

        readies = [asyncio.Event() for _ in range(clients)]
        tasks = [
            asyncio.create_task(_sse_client(d.port, d.token, names[i % streams], got, readies[i]))
            for i in range(clients)
        ]
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 30)
        await asyncio.sleep(0.2)
        for i in range(appends):
            name = names[i % streams]
            await loop.run_in_executor(
                None, log.append, name, [Event(kind=Kind.USER_MESSAGE, text=repr(time.time()))]
            )
            await asyncio.sleep(pace)
        await asyncio.wait_for(done.wait(), 60)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    try:
        asyncio.run(main())
    finally:
        stop.set()
        for t in threads:
            t.join(2)
        for s in subs:
            s.close()
        sub_log.close()
        log.close()
    return sse, base


#: The target for 100 clients: p99 at most this much over the spine subscriber's p99.
TARGET_OVER = 0.005


def report_latency(name: str, sse: list[float], base: list[float], clients: int) -> None:
    p50, p99, b50, b99 = pct(sse, 0.5), pct(sse, 0.99), pct(base, 0.5), pct(base, 0.99)
    print(f"SSE latency, {name} (n={len(sse)}, baseline n={len(base)})")
    print(f"  SSE        p50 {ms(p50)}  p99 {ms(p99)}")
    print(f"  spine sub  p50 {ms(b50)}  p99 {ms(b99)}")
    print(f"  over base  p50 {ms(p50 - b50)}  p99 {ms(p99 - b99)}   ratio p99 {p99 / b99:5.2f}x")
    if clients >= 100:
        verdict = "met" if p99 - b99 <= TARGET_OVER else "MISSED"
        print(f"  target p99 <= base + {TARGET_OVER * 1e3:g} ms: {verdict}")


# -- POST throughput ---------------------------------------------------------------------


def _run_threads(n: int, fn: Callable[[int], None], seconds: float) -> int:
    count = [0] * n
    stop = time.monotonic() + seconds

    def worker(i: int) -> None:
        while time.monotonic() < stop:
            fn(i)
            count[i] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(count)


def throughput(d: Daemon, workers: int, seconds: float, rounds: int) -> None:
    host = Host(d.data, attach=True, admin_port=d.admin_port)
    clients = [
        httpx.Client(base_url=d.url, headers={"Authorization": f"Bearer {d.token}"})
        for _ in range(workers)
    ]
    try:
        for i in range(workers):
            host.create(f"direct-{i}")
            clients[0].post("/v1/sessions", json={"id": f"http-{i}"})

        def direct(i: int) -> None:
            host.send(f"direct-{i}", "hi")

        def http(i: int) -> None:
            r = clients[i].post(f"/v1/sessions/http-{i}/messages", json={"text": "hi"})
            r.raise_for_status()

        direct_rates, http_rates = [], []
        for _ in range(rounds):
            direct_rates.append(_run_threads(workers, direct, seconds) / seconds)
            http_rates.append(_run_threads(workers, http, seconds) / seconds)
        dr, hr = sorted(direct_rates)[rounds // 2], sorted(http_rates)[rounds // 2]
        verdict = "met" if hr >= 0.5 * dr else "MISSED"
        print(f"POST /messages, {workers} concurrent clients ({rounds} rounds of {seconds:g}s)")
        print(f"  Host.send  median {dr:7.0f} msg/s")
        print(f"  HTTP POST  median {hr:7.0f} req/s")
        print(f"  ratio      {hr / dr:5.2f}x   target >= 0.5x: {verdict}")
    finally:
        for c in clients:
            c.close()
        host.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    appends = 50 if args.quick else 300
    root = tempfile.mkdtemp(prefix="vertebra-bench-gw-")
    d = Daemon(root)
    try:
        # Paced appends, so that each figure is a delivery latency: 20/s, and 100/s (with
        # 100 clients, 10,000 deliveries a second, near what one core pushes through).
        for i, (clients, streams, pace) in enumerate(
            ((1, 1, 0.05), (100, 1, 0.05), (100, 1, 0.01), (100, 50, 0.05))
        ):
            name = f"{clients} client(s) over {streams} stream(s), {1 / pace:.0f} appends/s"
            sse, base = sse_latency(d, clients, streams, appends, pace, str(i))
            report_latency(name, sse, base, clients)
        throughput(d, 8, 1.0 if args.quick else 3.0, 1 if args.quick else 3)
    finally:
        d.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
