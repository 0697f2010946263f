"""OpenTelemetry export benchmarks: what the live span exporter costs.

Run ``python bench/otel.py`` (``--turns``/``--rounds`` to scale). Two figures, each with its
ratio to a baseline measured in the same run:

- per event: what `TraceExporter` does with each stored event a sink delivers (decode the
  payload, `SpanFolder.feed`, encode finished spans as an OTLP/JSON request, the default,
  or as SDK spans in an OTLP protobuf request), against folding without export (decode
  and feed only) and against decoding alone, on a recorded log of governed tool-calling
  turns;
- turn rate: turns per second through a real daemon (``multiprocTCPBase``, scripted model
  with a tool call per turn) with the live exporter sending to an OTLP/HTTP collector
  stand-in on loopback, against the same daemon with an exporter that folds and sends
  nothing and without one; the three alternate within each round, in an order that flips
  every round, and the cost is the median of the rounds' own ratios.

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

import orjson
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from actors._runtime.system import processes_in_session
from actors.agents import ModelFactory, builtin_tools
from actors.host import Host
from actors.otel import (
    export_stats,
    otlp_json,
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


def _cpu(pids: set[int]) -> dict[int, float]:
    """CPU seconds (user + system) each of ``pids`` has used so far."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = (int(rest[11]) + int(rest[12])) / tick
    return out


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

    def fold_export(encode: Any) -> Any:
        def run() -> None:
            folders: dict[str, SpanFolder] = {}
            batch: list[Any] = []
            for sid, p in payloads:
                f = folders.get(sid) or folders.setdefault(sid, SpanFolder(sid))
                batch.extend(f.feed(decode_event(p)))
                if len(batch) >= 512:
                    encode(batch)
                    batch = []
            if batch:
                encode(batch)

        return run

    def protobuf(batch: list[Any]) -> None:
        encode_spans(readable_spans(batch)).SerializeToString()

    def json_body(batch: list[Any]) -> None:
        orjson.dumps(otlp_json(batch))

    def timed(fn: Any) -> float:
        runs = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            runs.append((time.perf_counter() - t0) / len(payloads))
        return statistics.median(runs)

    d, f = timed(decode_only), timed(fold)
    j, x = timed(fold_export(json_body)), timed(fold_export(protobuf))
    print(f"per event, {len(payloads)} events of governed tool turns (median of {repeat})")
    print(f"  decode only                   {d * 1e6:6.2f} us")
    print(f"  decode + span fold            {f * 1e6:6.2f} us  ({f / d:4.2f}x decode)")
    print(f"  fold + OTLP/JSON (default)    {j * 1e6:6.2f} us  ({j / f:4.2f}x fold without export)")
    print(f"  fold + SDK spans + protobuf   {x * 1e6:6.2f} us  ({x / f:4.2f}x fold without export)")
    print(f"  export share of an event: JSON {(j - f) / j:5.1%}, protobuf {(x - f) / x:5.1%}")


def turn_rate(data: str, turns: int, rounds: int) -> list[tuple[str, bytes]]:
    """Turns per second without a sink, with a fold-only exporter and with a full one.

    Each round runs the three back to back, in an order that alternates (ABC, CBA, ...)
    so a machine getting busier or quieter during the run does not favour one of them;
    the exporter's cost is the median over rounds of each round's own ratio of the export
    rate to the fold-only rate, so a round slowed as a whole by other load does not count
    against either."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05})
    t.start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/v1/traces"
    h = Host(data, base="multiprocTCPBase", timeout=30, factory=ModelFactory(tools=builtin_tools()))
    payloads: list[tuple[str, bytes]] = []
    try:
        sid = h.create()
        _turns(h, sid, 20)  # warm the processes up
        rates: dict[str, list[float]] = {"none": [], "fold": [], "export": []}
        # CPU seconds a turn of the daemon's processes and this one (the Host) used, and
        # of the exporter's process alone: far steadier than rates on a shared machine.
        cpu: dict[str, list[float]] = {"none": [], "fold": [], "export": []}
        own_cpu: dict[str, list[float]] = {"fold": [], "export": []}
        stats: dict[str, int] = {}

        def everyone() -> set[int]:
            return {*processes_in_session(h.system_session), os.getpid()}

        def run(kind: str) -> None:
            nonlocal stats
            addr = None
            before_pids = everyone()
            if kind != "none":
                addr = start_trace_export(h, url if kind == "export" else "")
            mine = everyone() - before_pids
            before = _cpu(everyone())
            rates[kind].append(_turns(h, sid, turns))
            after = _cpu(everyone())
            used = sum(after[p] - before.get(p, 0.0) for p in after)
            cpu[kind].append(used / turns)
            if addr is not None:
                own_cpu[kind].append(sum(after[p] - before.get(p, 0.0) for p in mine) / turns)
                if kind == "export":
                    stats = export_stats(h, addr)
                stop_trace_export(h, addr)

        order = ["none", "fold", "export"]
        for i in range(rounds):
            print(f"  round {i + 1}/{rounds}", file=sys.stderr, flush=True)
            for kind in order if i % 2 == 0 else order[::-1]:
                run(kind)
        none, fold, export = rates["none"], rates["fold"], rates["export"]
        n, f, x = (statistics.median(v) for v in (none, fold, export))

        def row(name: str, med: float, runs: list[float]) -> None:
            print(f"  {name:<26}{med:7.1f} turns/s  ({', '.join(f'{r:.0f}' for r in runs)})")

        print(
            f"turn rate, one session, {turns} tool-calling turns a round, {rounds} rounds "
            "in alternating order"
        )
        row("no sink", n, none)
        row("sink, span fold only", f, fold)
        row("sink, fold + OTLP export", x, export)
        paired = [b / a for a, b in zip(fold, export, strict=True)]
        ratio = statistics.median(paired)
        cost = 1 - ratio
        verdict = "met" if cost < 0.10 else "MISSED"
        print(
            f"  export vs fold without export, median of per-round ratios: {ratio:5.3f}x "
            f"cost {cost:5.1%}  target < 10%: {verdict}"
        )
        print(f"    per round: {', '.join(f'{r:.3f}' for r in paired)}")
        if len(paired) >= 4:
            q1, _, q3 = statistics.quantiles(paired, n=4)
            print(f"    middle half of the rounds: {q1:5.3f}x to {q3:5.3f}x")
        print(f"    ratio of medians: {x / f:5.3f}x")
        sink = statistics.median(a / b for a, b in zip(fold, none, strict=True))
        print(f"  a sink at all (fold only vs none), median of per-round ratios: {sink:5.3f}x")
        print("  CPU a turn (median over rounds), the daemon's processes and the Host's:")
        for kind, label in (("none", "no sink"), ("fold", "fold only"), ("export", "export")):
            print(f"    {label:<12}{statistics.median(cpu[kind]) * 1e3:7.2f} ms")
        print(
            "    the exporter's process alone: fold only "
            f"{statistics.median(own_cpu['fold']) * 1e3:.2f} ms, "
            f"export {statistics.median(own_cpu['export']) * 1e3:.2f} ms"
        )
        cpu_ratio = statistics.median(
            b / a for a, b in zip(cpu["fold"], cpu["export"], strict=True)
        )
        print(
            f"  CPU a turn, export vs fold without export, median of per-round ratios: "
            f"{cpu_ratio:5.3f}x ({cpu_ratio - 1:+.1%})"
        )
        print(f"  last export round's exporter counters: {stats}")
        payloads = [(sid, encode_event(e)) for e in h.history(sid)]
    finally:
        h.close()
        srv.shutdown()
        srv.server_close()
        t.join(5)
    return payloads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=20, help="turns per configuration a round")
    ap.add_argument("--rounds", type=int, default=15)
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
