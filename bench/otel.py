"""OpenTelemetry export benchmarks: what the live span exporter costs.

Run ``python bench/otel.py`` (``--turns``/``--rounds`` to scale). Two figures, each with its
ratio to a baseline measured in the same run:

- per event: what `TraceExporter` does with each stored event a sink delivers (decode the
  payload, `SpanFolder.feed`, turn finished spans into SDK spans and encode them as an
  OTLP protobuf request), against folding without export (decode and feed only) and
  against decoding alone, on a recorded log of governed tool-calling turns;
- turn rate: turns per second through a real daemon (``multiprocTCPBase``, scripted model
  with a tool call per turn) with the live exporter sending to an OTLP/HTTP collector
  stand-in on loopback, against the same daemon without an exporter, rounds interleaved.

Target: the exporter costs under 10% of the turn rate. Files live in a temporary
directory removed at the end.
"""

from __future__ import annotations

import argparse
import http.server
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from actors.agents import ModelFactory, builtin_tools
from actors.host import Host
from actors.otel import (
    export_stats,
    readable_spans,
    start_trace_export,
    stop_trace_export,
)
from projections import SpanFolder
from spine import Kind, decode_event, encode_event

TOOL_TURN = '!tool calculator {"expression": "6*7"}'


class _Sink(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()


def _turns(h: Host, sid: str, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        ack = h.send(sid, TOOL_TURN)
        done = h.wait_turn(sid, ack.seq, timeout=30)
        assert done.kind == Kind.TURN_COMPLETED, done
    return n / (time.perf_counter() - t0)


def per_event(payloads: list[tuple[str, bytes]], repeat: int) -> None:
    def decode_only() -> None:
        for _sid, p in payloads:
            decode_event(p)

    def fold() -> None:
        folders: dict[str, SpanFolder] = {}
        for sid, p in payloads:
            f = folders.get(sid) or folders.setdefault(sid, SpanFolder(sid))
            f.feed(decode_event(p))

    def fold_export() -> None:
        folders: dict[str, SpanFolder] = {}
        batch: list[Any] = []
        for sid, p in payloads:
            f = folders.get(sid) or folders.setdefault(sid, SpanFolder(sid))
            batch.extend(f.feed(decode_event(p)))
            if len(batch) >= 512:
                encode_spans(readable_spans(batch)).SerializeToString()
                batch = []
        if batch:
            encode_spans(readable_spans(batch)).SerializeToString()

    def timed(fn: Any) -> float:
        runs = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            runs.append((time.perf_counter() - t0) / len(payloads))
        return statistics.median(runs)

    d, f, x = timed(decode_only), timed(fold), timed(fold_export)
    print(f"per event, {len(payloads)} events of governed tool turns (median of {repeat})")
    print(f"  decode only              {d * 1e6:6.2f} us")
    print(f"  decode + span fold       {f * 1e6:6.2f} us  ({f / d:4.2f}x decode)")
    print(f"  fold + SDK spans + OTLP  {x * 1e6:6.2f} us  ({x / f:4.2f}x fold without export)")
    print(f"  export share of a fold+export event: {(x - f) / x:5.1%}")


def turn_rate(data: str, turns: int, rounds: int) -> list[tuple[str, bytes]]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05})
    t.start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/v1/traces"
    h = Host(data, base="multiprocTCPBase", timeout=30, factory=ModelFactory(tools=builtin_tools()))
    payloads: list[tuple[str, bytes]] = []
    try:
        sid = h.create()
        _turns(h, sid, 20)  # warm the processes up
        none: list[float] = []
        fold: list[float] = []
        export: list[float] = []
        stats: dict[str, int] = {}
        for i in range(rounds):
            print(f"  round {i + 1}/{rounds}", file=sys.stderr, flush=True)
            none.append(_turns(h, sid, turns))
            addr = start_trace_export(h, "")
            fold.append(_turns(h, sid, turns))
            stop_trace_export(h, addr)
            addr = start_trace_export(h, url)
            export.append(_turns(h, sid, turns))
            stats = export_stats(h, addr)
            stop_trace_export(h, addr)
        n, f, x = (statistics.median(v) for v in (none, fold, export))

        def row(name: str, med: float, runs: list[float]) -> None:
            print(f"  {name:<26}{med:7.1f} turns/s  ({', '.join(f'{r:.0f}' for r in runs)})")

        print(f"turn rate, one session, {turns} tool-calling turns a round, {rounds} rounds")
        row("no sink", n, none)
        row("sink, span fold only", f, fold)
        row("sink, fold + OTLP export", x, export)
        cost = 1 - x / f
        verdict = "met" if cost < 0.10 else "MISSED"
        print(f"  export vs fold without export: {x / f:5.3f}x  cost {cost:5.1%}", end="")
        print(f"  target < 10%: {verdict}")
        print(f"  a sink at all (fold only vs none): {f / n:5.3f}x")
        print(f"  last round's exporter counters: {stats}")
        payloads = [(sid, encode_event(e)) for e in h.history(sid)]
    finally:
        h.close()
        srv.shutdown()
        srv.server_close()
        t.join(5)
    return payloads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=100, help="turns per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=7, help="repeats of the per-event timing")
    args = ap.parse_args()
    print(f"{os.cpu_count()} CPUs, loopback collector stand-in")
    tmp = tempfile.mkdtemp(prefix="vertebra-bench-otel-")
    try:
        payloads = turn_rate(os.path.join(tmp, "data"), args.turns, args.rounds)
        per_event(payloads, args.repeat)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
