"""Provider benchmark: the stream accumulator and first-token latency, one run.

- accumulator cost per chunk: SSE framing, ``orjson.loads`` and the chat accumulator over
  a realistic stream (text deltas, a tool call in pieces, a usage chunk), against a bare
  ``orjson.loads`` of the same chunk payloads (ratio = bare time / our time; target at
  least 0.5);
- first-token latency: from the fake server writing the first chunk to the assistant text
  reaching a conduit's sink on the Host (the worker thread, the session's decision, the
  Runner's sink router and the Host, across processes on ``multiprocTCPBase``), against
  reading the same stream with the bare HTTP client in this process, in alternating
  rounds (target: under 2 ms added at the median);
- interrupt latency against a server that sends nothing: from ``Host.interrupt`` to the
  ``turn.cancelled`` event being read back from the log (target: under 50 ms).

Run ``python bench/providers.py`` (``--quick`` for a smoke run). Every actor system is
shut down at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))
sys.path.insert(0, os.path.join(os.path.dirname(_HERE), "tests"))

import httpx2  # noqa: E402
import orjson  # noqa: E402
from fake_models import FakeModelServer, chunk, tool_delta, usage_chunk  # noqa: E402

from actors.agents import ModelFactory  # noqa: E402
from actors.agents.accumulate import ChatAccumulator, SseDecoder  # noqa: E402
from actors.host import Host  # noqa: E402
from spine import Kind  # noqa: E402


def _stream_chunks(n_text: int) -> list[dict[str, Any]]:
    out = [chunk(content=f"word{i} ") for i in range(n_text)]
    out.append(chunk(tool_calls=[tool_delta(0, "call_1", "calculator", "")]))
    out.extend(
        chunk(tool_calls=[tool_delta(0, None, None, p)]) for p in ('{"expr', 'ession":', ' "1+2"}')
    )
    out.append(chunk(finish="tool_calls"))
    out.append(usage_chunk(100, n_text))
    return out


def bench_accumulator(rounds: int) -> None:
    chunks = _stream_chunks(200)
    payloads = [orjson.dumps(c) for c in chunks]
    wire = b"".join(b"data: " + p + b"\n\n" for p in payloads) + b"data: [DONE]\n\n"
    # Reads the size a socket hands over.
    reads = [wire[i : i + 1024] for i in range(0, len(wire), 1024)]

    def bare() -> None:
        for p in payloads:
            orjson.loads(p)

    def ours() -> None:
        dec = SseDecoder()
        acc = ChatAccumulator()
        for r in reads:
            for _ev, data in dec.feed(r):
                if data != "[DONE]":
                    acc.feed(orjson.loads(data))
        acc.finish()

    parsed = [orjson.loads(p) for p in payloads]

    def feed_only() -> None:
        acc = ChatAccumulator()
        for c in parsed:
            acc.feed(c)
        acc.finish()

    bare_t: list[float] = []
    feed_t: list[float] = []
    ours_t: list[float] = []
    for _ in range(rounds):
        t = time.perf_counter()
        bare()
        bare_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        feed_only()
        feed_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        ours()
        ours_t.append(time.perf_counter() - t)
    n = len(payloads)
    b = statistics.median(bare_t) / n * 1e6
    f = statistics.median(feed_t) / n * 1e6
    o = statistics.median(ours_t) / n * 1e6
    print(f"bare orjson.loads:       {b:.2f} us/chunk")
    print(
        f"accumulator alone:       {f:.2f} us/chunk  ratio bare/ours {b / f:.2f}x (target >= 0.5x)"
    )
    print(f"framing+parse+accumulate {o:.2f} us/chunk  ratio bare/ours {b / o:.2f}x")


def _first_token_bare(server: FakeModelServer) -> float:
    server.queue(
        [
            ("sse", [chunk(content="hello")]),
            ("pause", 0.02),
            ("sse", [chunk(finish="stop")]),
            ("done",),
        ]
    )

    n_before = len(server.first_byte)

    async def run() -> float:
        async with (
            httpx2.AsyncClient(trust_env=False) as client,
            client.stream("POST", server.url + "/chat/completions", content=b"{}") as resp,
        ):
            dec = SseDecoder()
            async for raw in resp.aiter_raw():
                for _ev, data in dec.feed(raw):
                    if data != "[DONE]" and orjson.loads(data)["choices"][0]["delta"].get(
                        "content"
                    ):
                        return time.perf_counter()
        raise AssertionError("no text")

    got = asyncio.run(run())
    return got - server.first_byte[n_before]


def bench_first_token(rounds: int) -> None:
    server = FakeModelServer()
    tmp = tempfile.mkdtemp(prefix="vbench-")
    host = Host(
        os.path.join(tmp, "data"),
        base="multiprocTCPBase",
        factory=ModelFactory(),
        model_servers=[server.url],
    )
    try:
        sid = host.create(
            metadata={
                "ore.model.provider": "openai",
                "ore.model.base_url": server.url,
                "ore.model.name": "fake",
            }
        )
        arrived: list[float] = []
        got = threading.Event()

        def sink(session: str, event: Any, live: Any) -> None:
            if session == sid and live is not None and live[0] == "assistant.delta":
                arrived.append(time.perf_counter())
                got.set()

        host.add_sink(sink)
        ours: list[float] = []
        bare: list[float] = []
        for i in range(rounds + 3):
            # The rest of the answer comes later, as it does from a model that streams.
            server.queue(
                [
                    ("sse", [chunk(content="hello")]),
                    ("pause", 0.02),
                    ("sse", [chunk(finish="stop")]),
                    ("done",),
                ]
            )
            got.clear()
            n_before = len(server.first_byte)
            ack = host.send(sid, f"q{i}")
            if not got.wait(20):
                raise AssertionError("no text reached the sink")
            ours_i = arrived[-1] - server.first_byte[n_before]
            host.wait_turn(sid, ack.seq)
            bare_i = _first_token_bare(server)
            if i >= 3:  # the first rounds warm connections and code paths
                ours.append(ours_i)
                bare.append(bare_i)
        o = statistics.median(ours) * 1e3
        b = statistics.median(bare) * 1e3
        o99 = sorted(ours)[int(len(ours) * 0.99) - 1] * 1e3
        print(f"first token, server byte -> Host sink: p50 {o:.2f} ms, p99 {o99:.2f} ms")
        print(f"first token, bare client in one process: p50 {b:.2f} ms")
        print(f"  added p50: {o - b:.2f} ms (target < 2 ms)")

        # Interrupt against a server that sends nothing at all.
        lat: list[float] = []
        for _ in range(max(3, rounds // 4)):
            server.queue([("stall",)])
            n = len(server.requests)
            ack = host.send(sid, "think hard")
            server.wait_requests(n + 1)
            t = time.perf_counter()
            host.interrupt(sid)
            ended = host.wait_turn(sid, ack.seq)
            lat.append(time.perf_counter() - t)
            assert ended.kind == Kind.TURN_CANCELLED
        print(
            f"interrupt -> turn.cancelled read back, silent server: p50 "
            f"{statistics.median(lat) * 1e3:.1f} ms, max {max(lat) * 1e3:.1f} ms "
            "(target < 50 ms)"
        )
    finally:
        host.close()
        server.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="a fast smoke run")
    args = ap.parse_args()
    bench_accumulator(20 if args.quick else 200)
    bench_first_token(10 if args.quick else 100)


if __name__ == "__main__":
    main()
