"""Context benchmark, live: a real session (its own actor process, a SQLite spine) against
a chat-completions server on loopback that refuses, with llama.cpp's error shape, any
request over its window (8k tokens, counted its own way), driven turn after turn with a
200 KB tool result every tenth turn, and restarted half-way (a new Host folds the stored
stream).

Reports: requests the server refused (target 0), the largest request as a share of the
window (target under 1), the compactions stored, whether every turn's first request is
byte for byte the one its log gives (``replayed``, on both sides of the restart), and the
wall time of a turn (message sent to turn stored) early and late, p50 and p99, with and
without the turns that compacted, to show the cost per turn does not grow with length;
and that the whole stream, every event of it, seals and verifies at the end.

Run ``python bench/context_live.py`` (``--turns N`` for a shorter run; 10,000 takes
minutes).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))
sys.path.insert(0, os.path.join(os.path.dirname(_HERE), "tests"))

from context_server import TOOLS, WindowServer, replayed  # noqa: E402

from actors.agents import ModelFactory  # noqa: E402
from actors.host import Host  # noqa: E402
from spine import Kind  # noqa: E402

WINDOW = 8192
BIG = 200_000


def _host(data: str, server: str) -> Host:
    return Host(
        data,
        base="multiprocTCPBase",
        timeout=30,
        factory=ModelFactory(TOOLS, backoff=0.01),
        model_servers=[server],
    )


def _text(n: int) -> str:
    return f"!blob {BIG} {n}" if n % 10 == 0 else f"message {n} " + "words " * 20


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(len(s) * q))] * 1e3


def _drive(data: str, server: WindowServer, turns: int) -> tuple[str, list[tuple[float, bool]]]:
    """Every turn's wall time and whether it compacted; a restart at the half."""
    h = _host(data, server.url)
    spent: list[tuple[float, bool]] = []
    try:
        sid = h.create()
        h.set_metadata(
            sid,
            {
                "ore.model.provider": "openai",
                "ore.model.base_url": server.url,
                "ore.model.name": "m",
            },
        )
        for n in range(1, turns + 1):
            if n == turns // 2 + 1:
                h.close()
                h = _host(data, server.url)
            # Only this turn's requests are looked at: a scan of the whole log would be a
            # cost of the benchmark's growing with the length it measures.
            seen = len(server.log)
            t0 = time.perf_counter()
            ack = h.send(sid, _text(n))
            done = h.wait_turn(sid, ack.seq, timeout=120)
            wall = time.perf_counter() - t0
            if done.kind != Kind.TURN_COMPLETED or done.error:
                raise SystemExit(f"turn {n} did not complete: {done.error or done.kind}")
            spent.append((wall, any(s for *_, s in server.log[seen:])))
    finally:
        h.close()
    return sid, spent


def run(turns: int) -> dict[str, object]:
    server = WindowServer(WINDOW, keep_raw=False)
    data = tempfile.mkdtemp(prefix="vertebra-context-")
    try:
        sid, spent = _drive(os.path.join(data, "data"), server, turns)
        h = _host(os.path.join(data, "data"), server.url)
        try:
            events = h.history(sid)
            report = h.context(sid)
            t0 = time.perf_counter()
            sealed = h.seal(sid).seq
            verified = h.verify(sid)
            checked = time.perf_counter() - t0
        finally:
            h.close()
    finally:
        server.close()
        shutil.rmtree(data, ignore_errors=True)
    rebuilt = [hashlib.sha256(b).digest() for b in replayed(events, sid)]
    tenth = max(1, turns // 10)
    early, late = spent[:tenth], spent[-tenth:]
    out: dict[str, object] = {
        "turns": turns,
        "events stored": len(events),
        "requests": len(server.log),
        "requests refused (over window)": sum(1 for _, _, ok, _ in server.log if not ok),
        "largest request / window": max(t for _, t, _, _ in server.log) / WINDOW,
        "compactions stored": sum(1 for e in events if e.kind == Kind.CONTEXT_COMPACTED),
        "turns that compacted": sum(1 for _, c in spent if c),
        "requests == replay (bytes)": server.turn_digests == rebuilt,
        "estimate next / window": report.get("used", 0.0),
        "sealed through seq, verified": f"{sealed}, {verified.ok}",
        "seal + verify s": checked,
    }
    for name, part in (("first", early), ("last", late)):
        quiet = [w for w, c in part if not c]
        out[f"{name} {tenth} p50 ms"] = _pct([w for w, _ in part], 0.5)
        out[f"{name} {tenth} p99 ms"] = _pct([w for w, _ in part], 0.99)
        out[f"{name} {tenth} no-compaction p99 ms"] = _pct(quiet, 0.99)
    out["all turns mean ms"] = statistics.fmean(w for w, _ in spent) * 1e3
    # The trend over the run: p50 of each tenth, in order (a shared machine's load moves
    # every tenth alike; a cost that grows with length shows as a slope).
    out["p50 ms by tenth"] = " ".join(
        f"{_pct([w for w, _ in spent[i * tenth : (i + 1) * tenth]], 0.5):.1f}" for i in range(10)
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=10_000)
    for k, v in run(ap.parse_args().turns).items():
        print(f"{k:36} {v:.3f}" if isinstance(v, float) else f"{k:36} {v}")


if __name__ == "__main__":
    main()
