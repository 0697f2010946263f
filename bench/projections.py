"""Projection benchmarks: rebuild of the status projection, and live lag.

Run ``python bench/projections.py`` (``--events``/``--sessions`` to scale). It prints each
figure with its ratio to the raw baseline measured in the same run:

- rebuild: `StatusReducer` folding every stored event from position 0 (status projection,
  sessions index, checkpoint commits per batch) against a baseline that only reads the
  same rows from SQLite and decodes their JSON;
- live lag: append -> the projection actor reflects the event (wake message, then a status
  query answered after the fold), p50 and p99, on ``multiprocTCPBase``.

Files live in a temporary directory that is removed at the end.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import shutil
import socket
import sqlite3
import statistics
import sys
import tempfile
import time
from typing import Any

import orjson

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from projections import Projection, StatusReducer, new_projection, project, reduce
from spine import SCHEMA_VERSION, Event, Kind, SqliteLog, history

PAGE = 20_000

# One session's arc, repeated: (kind, fields) with the mix a chatty governed run produces.
_ARC: list[tuple[str, dict[str, Any]]] = [
    (Kind.USER_MESSAGE, {"text": "please summarise the quarterly report"}),
    (Kind.TURN_STARTED, {"turn": 1}),
    (Kind.ACTION_ADMITTED, {"action": "model", "trust": "sandboxed"}),
    (Kind.ASSISTANT, {"turn": 1, "text": "Reading the report now; one moment."}),
    (Kind.TOOL_CALL, {"turn": 1, "tool": "read_file", "toolUseID": "t1",
                      "input": {"path": "report.pdf"}}),
    (Kind.ACTION_ADMITTED, {"action": "read_file", "trust": "workspace"}),
    (Kind.EGRESS, {"host": "203.0.113.7", "allowed": True, "reason": "public"}),
    (Kind.ACTION_COMPLETED, {"action": "read_file", "trust": "workspace"}),
    (Kind.TOOL_RESULT, {"turn": 1, "tool": "read_file", "toolUseID": "t1",
                        "result": "Q3 revenue rose 12% ..."}),
    (Kind.ACTION_COMPLETED, {"action": "model", "trust": "sandboxed"}),
    (Kind.TURN_COMPLETED, {"turn": 1, "stopReason": "end_turn",
                           "usage": {"inputTokens": 1200, "outputTokens": 300,
                                     "cacheReadTokens": 800}}),
    (Kind.ACTION_REJECTED, {"action": "send_mail", "trust": "workspace",
                            "fault": "needs_approval"}),
    (Kind.EGRESS, {"host": "10.0.0.5", "allowed": False, "reason": "private address"}),
    (Kind.PROPERTIES, {"properties": {"model.name": "m-large", "model.temperature": "0.2"}}),
    (Kind.CHILD_SPAWNED, {"child": "c", "text": "check the figures"}),
    (Kind.TURN_COMPLETED, {"goal": "c", "turn": 1,
                           "usage": {"inputTokens": 300, "outputTokens": 40}}),
    (Kind.CHILD_COMPLETED, {"child": "c", "result": "figures check out"}),
    (Kind.CONVERGED, {"text": "Revenue rose 12%."}),
    (Kind.LIFECYCLE, {"phase": "done"}),
    (Kind.RECORD_SEALED, {"record": {"first": 1, "last": 19, "root": "ab" * 16}}),
]  # fmt: skip
_TALK: list[tuple[str, dict[str, Any]]] = [
    (Kind.ASSISTANT, {"turn": 2, "text": "Here is what the report says about revenue."}),
    (Kind.TOOL_CALL, {"turn": 2, "tool": "grep", "toolUseID": "t2",
                      "input": {"pattern": "revenue", "path": "report.pdf"}}),
    (Kind.TOOL_RESULT, {"turn": 2, "tool": "grep", "toolUseID": "t2",
                        "result": "p. 4: revenue 12.1M; p. 9: revenue by region"}),
    (Kind.ASSISTANT, {"turn": 2, "text": "Revenue rose 12% year on year, led by EMEA."}),
    (Kind.TURN_STARTED, {"turn": 2}),
    (Kind.ASSISTANT, {"turn": 2, "text": "Checking the regional split as well."}),
]  # fmt: skip

#: The governed run above with the model's talk between its governance events, closer to
#: what a chat session's log looks like: 16 of its 36 rows carry a rule; the rest are
#: assistant text, tool calls and results and turn starts, which the status does not read.
#: (`_ARC` alone, 16 of 20, is the worst case: nearly every row feeds a rule.)
_CHAT_ARC: list[tuple[str, dict[str, Any]]] = [
    x for i, step in enumerate(_ARC) for x in ([step, _TALK[i % len(_TALK)]] if i % 5 else [step])
]

#: Workloads: name -> arc.
MIXES = {"chat": _CHAT_ARC, "governance": _ARC}

_CALLED = {Kind.ACTION_ADMITTED, Kind.ACTION_COMPLETED, Kind.ACTION_REJECTED}


def _time_text(pos: int) -> bytes:
    # One event per millisecond from 2026-01-01, formatted as the spine's format_time does.
    ms = pos
    s, ms = divmod(ms, 1000)
    m, s = divmod(s, 60)
    h, m = divmod(m, 60)
    d, h = divmod(h, 24)
    return b"2026-01-%02dT%02d:%02d:%02d.%03d000Z" % (d + 1, h, m, s, ms)


def generate(
    path: str, events: int, sessions: int, arc: list[tuple[str, dict[str, Any]]], seed: int = 7
) -> None:
    """Write ``events`` stored rows over ``sessions`` streams, interleaved.

    Rows are built as the spine stores them (same schema and payload shape, checked against
    the codec below) from prebuilt payload pieces and inserted with executemany: building
    them through `append` would take minutes.
    """
    SqliteLog(path).close()  # create the schema
    rng = random.Random(seed)
    names = [f"s{i:05d}" for i in range(sessions)]
    seqs = [0] * sessions
    calls = [0] * sessions
    first_pos: dict[str, int] = {}
    last_pos: dict[str, int] = {}
    # Each arc step as (kind, JSON object body without its braces).
    pieces = [(str(k), orjson.dumps(f)[1:-1]) for k, f in arc]
    c = sqlite3.connect(path, isolation_level=None)
    c.execute("PRAGMA synchronous = OFF")
    c.execute("BEGIN")
    rows: list[tuple[int, str, int, str, int, bytes]] = []
    for pos in range(1, events + 1):
        i = rng.randrange(sessions)
        name = names[i]
        seqs[i] += 1
        seq = seqs[i]
        last_pos[name] = pos
        if seq == 1:
            first_pos[name] = pos
            kind = str(Kind.SESSION_STARTED)
            body = b'"text":"objective of %b"' % name.encode()
        else:
            kind, body = pieces[(seq - 2) % len(pieces)]
            if kind in _CALLED:
                if kind == Kind.ACTION_ADMITTED:
                    calls[i] += 1
                body = b'"call":%d,%b' % (calls[i], body)
            if b'"c"' in body:
                child = b"%b-c%d" % (name.encode(), (seq - 2) // len(arc))
                body = body.replace(b'"c"', b'"%b"' % child)
        payload = b'{"seq":%d,"time":"%b","kind":"%b",%b}' % (
            seq,
            _time_text(pos),
            kind.encode(),
            body,
        )
        rows.append((pos, name, seq, kind, SCHEMA_VERSION, payload))
        if len(rows) >= 100_000:
            c.executemany(_INSERT, rows)
            rows.clear()
    c.executemany(_INSERT, rows)
    c.executemany(
        "INSERT INTO streams (stream, last_seq, last_position, first_position) VALUES (?,?,?,?)",
        [(n, seqs[i], last_pos[n], first_pos[n]) for i, n in enumerate(names) if n in first_pos],
    )
    c.execute("COMMIT")
    c.close()
    # The rows must be exactly what the codec reads (seq, time and kind included).
    with SqliteLog(path) as log:
        for r in log.read_all(0, 200):
            ev = r.event()
            assert ev.seq == r.seq and ev.kind == r.kind and ev.time is not None


_INSERT = "INSERT INTO events (position, stream, seq, kind, version, payload) VALUES (?,?,?,?,?,?)"


def baseline(path: str) -> float:
    """Seconds to read every row in pages and decode its JSON, nothing else."""
    c = sqlite3.connect(path)
    loads = orjson.loads
    t = time.perf_counter()
    after = 0
    n = 0
    while True:
        rows = c.execute(
            "SELECT stream, seq, position, kind, version, payload FROM events "
            "WHERE position>? ORDER BY position LIMIT ?",
            (after, PAGE),
        ).fetchall()
        if not rows:
            break
        for r in rows:
            loads(r[5])
        n += len(rows)
        after = rows[-1][2]
    dt = time.perf_counter() - t
    c.close()
    return dt


def rebuild(path: str, checkpoint: str) -> float:
    """Seconds for a reducer to fold the whole log from 0 with its checkpoint commits.

    The result is checked against the pure Event-path fold for a sample of sessions.
    """
    for f in (checkpoint, checkpoint + "-wal", checkpoint + "-shm"):
        if os.path.exists(f):
            os.remove(f)
    with SqliteLog(path) as log:
        t = time.perf_counter()
        r = StatusReducer(log, checkpoint, batch=PAGE)
        r.catch_up()
        dt = time.perf_counter() - t
        assert not r.rebuilding and r.failure is None
        for info in log.streams()[:5]:
            assert r.status(info.stream) == project(history(log, info.stream))
        r.close()
    return dt


def event_path(path: str, limit: int) -> float:
    """Events/s folding the first ``limit`` rows through full `Event` objects and `reduce`."""
    with SqliteLog(path) as log:
        t = time.perf_counter()
        states: dict[str, Projection] = {}
        after = 0
        n = 0
        while n < limit:
            page = log.read_all(after, min(PAGE, limit - n))
            if not page:
                break
            for rec in page:
                p = states.get(rec.stream)
                states[rec.stream] = reduce(p if p is not None else new_projection(), rec.event())
            n += len(page)
            after = page[-1].position
        return n / (time.perf_counter() - t)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def live_lag(directory: str, samples: int) -> tuple[float, float]:
    """p50 and p99 milliseconds from append to a status reply that reflects it."""
    from thespian.actors import ActorSystem

    from projections import ProjectionActor, QueryStatus, StartProjection, StatusReply, Wake

    logdefs = {
        "version": 1,
        "disable_existing_loggers": False,
        "handlers": {"null": {"class": "logging.NullHandler"}},
        "root": {"handlers": ["null"], "level": logging.CRITICAL},
    }
    path = os.path.join(directory, "live.db")
    log = SqliteLog(path)
    asys = ActorSystem(
        "multiprocTCPBase", {"Admin Port": _free_port()}, transientUnique=True, logDefs=logdefs
    )
    try:
        actor = asys.createActor(ProjectionActor)
        asys.ask(
            actor,
            StartProjection(log_path=path, checkpoint_path=os.path.join(directory, "live.ckpt")),
            10,
        )
        lags: list[float] = []
        for i in range(samples):
            t = time.perf_counter()
            res = log.append("live", [Event(kind=Kind.USER_MESSAGE, text=f"m{i}")])
            asys.tell(actor, Wake())
            while True:
                reply = asys.ask(actor, QueryStatus(session="live"), 10)
                info = reply.info if isinstance(reply, StatusReply) else None
                if info is not None and info.last_seq >= res.last_seq:
                    break
            lags.append((time.perf_counter() - t) * 1000)
        lags.sort()
        return statistics.median(lags), lags[int(len(lags) * 0.99) - 1]
    finally:
        asys.shutdown()
        log.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--sessions", type=int, default=1_000)
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mix", nargs="+", choices=sorted(MIXES), default=["chat", "governance"])
    ap.add_argument("--no-live", action="store_true")
    args = ap.parse_args()
    directory = tempfile.mkdtemp(prefix="vertebra-bench-")
    try:
        n = args.events
        for mix in args.mix:
            path = os.path.join(directory, f"{mix}.db")
            t = time.perf_counter()
            generate(path, n, args.sessions, MIXES[mix])
            print(f"[{mix}] generated {n:,} events over {args.sessions:,} sessions "
                  f"in {time.perf_counter() - t:.1f} s")  # fmt: skip
            # Best of a few interleaved rounds: the ratio is what matters, and other load
            # on the machine hits both sides unevenly within one round.
            ck = os.path.join(directory, "status.ckpt")
            base = baseline(path)  # also warms the page cache for both sides
            rounds = [(baseline(path), rebuild(path, ck)) for _ in range(args.rounds)]
            base = min([base, *(b for b, _ in rounds)])
            dt = min(r for _, r in rounds)
            print(f"[{mix}] raw baseline (read rows + decode JSON): "
                  f"{n / base:10,.0f} events/s  {base:.2f} s")  # fmt: skip
            print(
                f"[{mix}] rebuild (status + index + checkpoints): {n / dt:10,.0f} events/s"
                f"  {dt:.2f} s  ratio {base / dt:.2f}x baseline (target >= 0.5x)"
            )
            if mix == args.mix[0]:
                ev = event_path(path, min(n, 100_000))
                print(
                    f"[{mix}] fold through Event objects (first 100k): {ev:9,.0f} events/s"
                    f"  ratio {ev / (n / base):.2f}x baseline"
                )
            os.remove(path)
        if not args.no_live:
            p50, p99 = live_lag(directory, args.samples)
            print(f"live lag append -> reflected: p50 {p50:.2f} ms  p99 {p99:.2f} ms")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
