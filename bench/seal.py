"""Seal benchmarks: seal and verify 100,000 events against hashing the same bytes alone.

Run ``python bench/seal.py`` (``--events`` to scale, ``--repeat`` for best-of). Every figure
is events per second with its ratio to the baseline measured in the same run: one
``hashlib.sha256(payload).digest()`` per stored payload, nothing else. Rows:

- seal (compute): leaf hashes, the RFC 6962 tree, the leaf index and the Ed25519
  signature over payloads already in memory (`compute_seal`): the sealing work itself;
- seal (MemoryLog): `seal_stream` end to end: read the range, compute, append the seal;
- seal (SqliteLog): the same on a SQLite file, so it includes reading the rows;
- verify (records): `verify_records` on records in memory: seal parsing, signature,
  leaf index, leaves, root;
- verify (MemoryLog / SqliteLog): `verify_stream` end to end (without appending).

Events are a realistic mix (assistant text, tool calls and results, turn ends with usage);
the mean payload size is printed, since the ratio depends on it: a smaller payload makes
the per-hash call overhead, which the tree doubles, weigh more. Files live in a temporary
directory that is removed at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import pathlib
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from spine import Event, Kind, MemoryLog, SqliteLog, Usage
from spine.seal import SigningKey, compute_seal, seal_stream, verify_records
from spine.seal import verify_stream as verify_log

STREAM = "bench-seal"
T = datetime(2025, 1, 1, tzinfo=UTC)


def _events(n: int) -> list[Event]:
    out = []
    for i in range(n):
        turn = i // 4 + 1
        m = i % 4
        if m == 0:
            out.append(
                Event(
                    kind=Kind.ASSISTANT,
                    turn=turn,
                    text=f"Step {i}: reading the configuration and checking each entry " * 3,
                )
            )
        elif m == 1:
            out.append(
                Event(
                    kind=Kind.TOOL_CALL,
                    turn=turn,
                    tool="read_file",
                    tool_use_id=f"toolu_{i:08d}",
                    input=f'{{"path": "src/module_{i % 97}.py", "limit": 200}}',
                )
            )
        elif m == 2:
            out.append(
                Event(
                    kind=Kind.TOOL_RESULT,
                    turn=turn,
                    tool="read_file",
                    tool_use_id=f"toolu_{i - 1:08d}",
                    result=f"def handler_{i}(request):\n    return respond(request)\n" * 3,
                )
            )
        else:
            out.append(
                Event(
                    kind=Kind.TURN_COMPLETED,
                    turn=turn,
                    stop_reason="tool_use",
                    usage=Usage(input_tokens=1200 + i % 500, output_tokens=80 + i % 40),
                )
            )
    return out


def _best(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    n, rep = args.events, args.repeat
    key = SigningKey.generate()

    events = _events(n)
    mem = MemoryLog()
    for i in range(0, n, 5000):
        mem.append(STREAM, events[i : i + 5000])
    records = mem.read(STREAM, 0, None)
    payloads = [r.payload for r in records]
    mean = sum(map(len, payloads)) / n

    with tempfile.TemporaryDirectory() as tmp:
        sql = SqliteLog(pathlib.Path(tmp) / "seal.db")
        try:
            for i in range(0, n, 5000):
                sql.append(STREAM, events[i : i + 5000])

            sha = hashlib.sha256

            def baseline() -> None:
                for p in payloads:
                    sha(p).digest()

            rows: list[tuple[str, float]] = []
            base = _best(baseline, rep)
            pub = key.public_key

            def run(name: str, fn: Callable[[], object]) -> None:
                rows.append((name, _best(fn, rep)))

            # Explicit ranges: each run seals the same n events (appending one seal each).
            run("seal (compute)", lambda: compute_seal(STREAM, 1, payloads, key, time=T))
            run("seal (MemoryLog)", lambda: seal_stream(mem, STREAM, key, first=1, last=n, time=T))
            run("seal (SqliteLog)", lambda: seal_stream(sql, STREAM, key, first=1, last=n, time=T))
            # Verify a stream holding one seal over all n events.
            vmem = MemoryLog()
            for i in range(0, n, 5000):
                vmem.append(STREAM, events[i : i + 5000])
            seal_stream(vmem, STREAM, key, time=T)
            vrecords = vmem.read(STREAM, 0, None)
            assert verify_records(STREAM, vrecords, pub).ok
            run("verify (records)", lambda: verify_records(STREAM, vrecords, pub))
            run("verify (MemoryLog)", lambda: verify_log(vmem, STREAM, pub, append=False))
            vsql = SqliteLog(pathlib.Path(tmp) / "verify.db")
            try:
                for i in range(0, n, 5000):
                    vsql.append(STREAM, events[i : i + 5000])
                seal_stream(vsql, STREAM, key, time=T)
                run("verify (SqliteLog)", lambda: verify_log(vsql, STREAM, pub, append=False))
            finally:
                vsql.close()
        finally:
            sql.close()

    print(f"seal benchmark: {n} events, mean payload {mean:.0f} bytes, best of {rep}")
    print(f"{'baseline: hashlib.sha256 per payload':<40} {n / base:>12,.0f} events/s   1.00x")
    for name, secs in rows:
        print(f"{name:<40} {n / secs:>12,.0f} events/s   {base / secs:.2f}x")


if __name__ == "__main__":
    main()
