"""Spine benchmark: the durable log against raw ``sqlite3`` on the same schema, in one run.

Every figure runs its baseline in this same process, on the same machine, in alternating
rounds, and is printed with its ratio to that baseline. The raw baseline uses the spine's
own schema and SQL statements (imported from the implementation, so they cannot drift), the
same pragmas, and encodes each event as a plain dict with orjson; what the ratio measures is
therefore exactly the spine's own cost: validation, the Event codec, records and results.

Run it with ``python bench/spine.py`` (``--quick`` for a smoke run). Temporary database
files live in a temporary directory that is removed at the end. ``--eventsourcing``
compares the batched append with the `eventsourcing` library's SQLite store instead; it
needs an interpreter that has that library (install it beside this repository in a
virtual environment of its own: it is no dependency of the project).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from typing import Any

# Run as a script, this file's folder heads sys.path and its name would shadow the spine
# package; put the repository root there instead.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import orjson  # noqa: E402

from spine import Event, Kind, SqliteLog, Usage, history, subscribe  # noqa: E402
from spine._sqlite import _INSERT, _SCHEMA, _UPSERT_STREAM  # noqa: E402

STREAM = "0190f1c4-6a2b-7cde-8f00-123456789abc"
WAIT = 10.0  # seconds; bounds every wait so a broken run fails instead of hanging


def _mono_ns() -> int:
    # CLOCK_MONOTONIC is one clock for every process on the host, so a writer in another
    # process can stamp the append and the subscriber here can subtract.
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


# -- workloads -------------------------------------------------------------------------


def conversation(n: int) -> Iterator[Event]:
    """A realistic mix: user message, turn, assistant text, tool call and result, usage."""
    text = "The durable, ordered log of every session keeps each event exactly once. " * 2
    i = 0
    turn = 0
    while True:
        turn += 1
        for ev in (
            Event(kind=Kind.USER_MESSAGE, actor="user", text="Summarise the spine, please."),
            Event(kind=Kind.TURN_STARTED, actor="agent", turn=turn),
            Event(kind=Kind.ASSISTANT, actor="agent", turn=turn, text=text),
            Event(
                kind=Kind.TOOL_CALL,
                actor="agent",
                turn=turn,
                tool="read_file",
                tool_use_id=f"toolu_{turn:08d}",
                input='{"path":"docs/spine.md","limit":200}',
            ),
            Event(
                kind=Kind.TOOL_RESULT,
                actor="tool",
                turn=turn,
                tool="read_file",
                tool_use_id=f"toolu_{turn:08d}",
                result="# The spine\n" + "line\n" * 20,
            ),
            Event(
                kind=Kind.TURN_COMPLETED,
                actor="agent",
                turn=turn,
                stop_reason="end_turn",
                usage=Usage(input_tokens=1200, output_tokens=340, cache_read_tokens=800),
            ),
        ):
            if i == n:
                return
            yield ev
            i += 1


def _append_event(i: int) -> Event:
    return Event(kind=Kind.ASSISTANT, actor="agent", turn=1 + i // 50, text="x" * 120)


def _append_dict(i: int) -> dict[str, Any]:
    # The same fields the Event above encodes to, as a plain dict.
    return {"kind": "assistant.message", "actor": "agent", "turn": 1 + i // 50, "text": "x" * 120}


# -- the raw baseline ------------------------------------------------------------------


def _raw_connect(path: str) -> sqlite3.Connection:
    c = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
    c.execute("PRAGMA busy_timeout = 30000")
    c.execute("PRAGMA synchronous = NORMAL")
    return c


class RawLog:
    """The spine's statements on the spine's schema, with dicts instead of Events."""

    def __init__(self, path: str) -> None:
        self.c = _raw_connect(path)
        self.c.execute("PRAGMA journal_mode = WAL")
        self.c.executescript("BEGIN IMMEDIATE;" + _SCHEMA + "COMMIT;")

    def append(self, stream: str, dicts: Sequence[dict[str, Any]], expected: int, key: str) -> int:
        c = self.c
        c.execute("BEGIN IMMEDIATE")
        try:
            prior = c.execute(
                "SELECT first_seq, last_seq, first_position, last_position "
                "FROM idempotency WHERE stream=? AND key=?",
                (stream, key),
            ).fetchone()
            assert prior is None
            row = c.execute("SELECT last_seq FROM streams WHERE stream=?", (stream,)).fetchone()
            last = row[0] if row else 0
            assert last == expected
            pos0 = c.execute("SELECT COALESCE(MAX(position), 0) FROM events").fetchone()[0]
            now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
            rows = []
            for i, d in enumerate(dicts):
                seq = last + i + 1
                payload = orjson.dumps({"seq": seq, "time": now, **d})
                rows.append((stream, seq, pos0 + i + 1, d["kind"], payload, 1))
            c.executemany(_INSERT, rows)
            last_seq, first_pos, last_pos = last + len(rows), pos0 + 1, pos0 + len(rows)
            c.execute(_UPSERT_STREAM, (stream, last_seq, last_pos, first_pos))
            c.execute(
                "INSERT INTO idempotency VALUES (?,?,?,?,?,?)",
                (stream, key, last + 1, last_seq, first_pos, last_pos),
            )
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise
        return last_seq

    def close(self) -> None:
        self.c.close()


# -- measurements ----------------------------------------------------------------------


def _fresh(tmp: str, name: str) -> str:
    path = os.path.join(tmp, name)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    return path


def _median_rounds(rounds: int, fns: dict[str, Callable[[], float]]) -> dict[str, float]:
    # Alternate the contenders round by round so drift in the machine hits both alike.
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            samples[k].append(fn())
    return {k: statistics.median(v) for k, v in samples.items()}


def bench_append(tmp: str, per_commit: int, commits: int, rounds: int) -> dict[str, float]:
    """Events per second through append, ``per_commit`` events per transaction.

    Each round opens a fresh file for each side and alternates them in chunks of commits,
    so both sides meet the same moments of a shared machine; the round's figure is the
    total events over the total time of each side, and the result the median round.
    """
    events = [_append_event(i) for i in range(per_commit)]
    dicts = [_append_dict(i) for i in range(per_commit)]
    chunks = 10
    per_chunk = commits // chunks
    samples: dict[str, list[float]] = {"raw": [], "spine": []}
    for _ in range(rounds):
        raw_log = RawLog(_fresh(tmp, "raw.db"))
        spine_log = SqliteLog(_fresh(tmp, "spine.db"))
        spent = {"raw": 0.0, "spine": 0.0}
        raw_last = spine_last = 0
        try:
            for c in range(chunks):
                keys = [f"k{c * per_chunk + n}" for n in range(per_chunk)]
                t0 = time.perf_counter()
                for key in keys:
                    raw_last = raw_log.append(STREAM, dicts, raw_last, key)
                t1 = time.perf_counter()
                for key in keys:
                    spine_last = spine_log.append(
                        STREAM, events, expected_seq=spine_last, idempotency_key=key
                    ).last_seq
                t2 = time.perf_counter()
                spent["raw"] += t1 - t0
                spent["spine"] += t2 - t1
        finally:
            raw_log.close()
            spine_log.close()
        assert raw_last == spine_last == chunks * per_chunk * per_commit
        for k, dt in spent.items():
            samples[k].append(raw_last / dt)
    return {k: statistics.median(v) for k, v in samples.items()}


def _eventsourcing_app(path: str) -> tuple[Any, Callable[[], Any]]:
    """An `eventsourcing` application on its SQLite store at ``synchronous = NORMAL``
    (set on each connection it opens, as the spine runs; SQLite's own default is FULL),
    and a factory of the aggregate it saves."""
    from eventsourcing import sqlite as es_sqlite
    from eventsourcing.application import Application
    from eventsourcing.domain import Aggregate, event

    pool = es_sqlite.SQLiteConnectionPool
    if not getattr(pool, "_vertebra_normal", False):
        opened = pool._create_connection

        def create(self: Any) -> Any:
            conn = opened(self)
            conn._sqlite_conn.execute("PRAGMA synchronous = NORMAL")
            return conn

        pool._create_connection = create  # type: ignore[method-assign]
        pool._vertebra_normal = True  # type: ignore[attr-defined]

    if "chat" not in _ES:  # the library registers each class under one topic, once

        class Chat(Aggregate):  # type: ignore[misc]
            @event("Said")  # type: ignore[misc]
            def say(self, kind: str, actor: str, turn: int, text: str) -> None:
                pass

        _ES["chat"] = Chat
    env = {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": path}
    return Application(env=env), _ES["chat"]


_ES: dict[str, Any] = {}


def bench_eventsourcing(tmp: str, per_commit: int, commits: int, rounds: int) -> dict[str, float]:
    """Events per second saving ``per_commit`` events per transaction: the spine's append
    against an `eventsourcing` aggregate that records as many events and is saved (one
    transaction of the library's SQLite recorder). Alternated in chunks as `bench_append`."""
    events = [_append_event(i) for i in range(per_commit)]
    dicts = [_append_dict(i) for i in range(per_commit)]
    chunks = 10
    per_chunk = commits // chunks
    samples: dict[str, list[float]] = {"eventsourcing": [], "spine": []}
    for _ in range(rounds):
        app, chat_class = _eventsourcing_app(_fresh(tmp, "es.db"))
        chat = chat_class()
        app.save(chat)
        spine_log = SqliteLog(_fresh(tmp, "spine.db"))
        spent = {"eventsourcing": 0.0, "spine": 0.0}
        spine_last = 0
        try:
            for c in range(chunks):
                t0 = time.perf_counter()
                for _ in range(per_chunk):
                    for d in dicts:
                        chat.say(d["kind"], d["actor"], d["turn"], d["text"])
                    app.save(chat)
                t1 = time.perf_counter()
                for n in range(per_chunk):
                    spine_last = spine_log.append(
                        STREAM, events, expected_seq=spine_last, idempotency_key=f"k{c}-{n}"
                    ).last_seq
                spent["eventsourcing"] += t1 - t0
                spent["spine"] += time.perf_counter() - t1
        finally:
            spine_log.close()
            app.close()
        assert chat.version == spine_last + 1  # its creation is one event more
        for k, dt in spent.items():
            samples[k].append(spine_last / dt)
    return {k: statistics.median(v) for k, v in samples.items()}


def bench_durability(tmp: str, commits: int, rounds: int) -> dict[str, float]:
    """Single-event appends per second at ``normal`` and ``full`` durability (the spine
    both sides), alternated in chunks as `bench_append` does."""
    events = [_append_event(0)]
    chunks = 10
    per_chunk = commits // chunks
    samples: dict[str, list[float]] = {"normal": [], "full": []}
    for _ in range(rounds):
        logs = {
            "normal": SqliteLog(_fresh(tmp, "normal.db")),
            "full": SqliteLog(_fresh(tmp, "full.db"), synchronous="FULL"),
        }
        spent = dict.fromkeys(logs, 0.0)
        last = dict.fromkeys(logs, 0)
        try:
            for c in range(chunks):
                for name, log in logs.items():
                    t0 = time.perf_counter()
                    for n in range(per_chunk):
                        last[name] = log.append(
                            STREAM, events, expected_seq=last[name], idempotency_key=f"k{c}-{n}"
                        ).last_seq
                    spent[name] += time.perf_counter() - t0
        finally:
            for log in logs.values():
                log.close()
        for name, dt in spent.items():
            samples[name].append(last[name] / dt)
    return {k: statistics.median(v) for k, v in samples.items()}


def bench_replay(tmp: str, n: int, rounds: int) -> dict[str, float]:
    """Events per second reading one ``n``-event stream back: spine to Events, raw to dicts."""
    path = _fresh(tmp, "replay.db")
    with SqliteLog(path) as log:
        batch: list[Event] = []
        last = 0
        for ev in conversation(n):
            batch.append(ev)
            if len(batch) == 1000:
                last = log.append(STREAM, batch, expected_seq=last).last_seq
                batch = []
        if batch:
            log.append(STREAM, batch, expected_seq=last)

    def raw() -> float:
        c = _raw_connect(path)
        try:
            t0 = time.perf_counter()
            rows = c.execute(
                "SELECT seq, version, payload FROM events WHERE stream=? AND seq>? ORDER BY seq",
                (STREAM, 0),
            ).fetchall()
            out = [orjson.loads(b) for _s, _v, b in rows]
            dt = time.perf_counter() - t0
        finally:
            c.close()
        assert len(out) == n
        return n / dt

    def spine() -> float:
        with SqliteLog(path) as log:
            t0 = time.perf_counter()
            out = history(log, STREAM)
            dt = time.perf_counter() - t0
        assert len(out) == n and out[-1].seq == n
        return n / dt

    return _median_rounds(rounds, {"raw": raw, "spine": spine})


def _percentiles(samples_ns: list[int]) -> tuple[float, float]:
    ms = sorted(s / 1e6 for s in samples_ns)
    q = statistics.quantiles(ms, n=100, method="inclusive")
    return q[49], q[98]


def latency_in_process_spine(tmp: str, n: int) -> list[int]:
    """Append -> delivered through `subscribe`, writer and subscriber threads in one process."""
    with SqliteLog(_fresh(tmp, "lat.db")) as log:
        stamps: list[int] = [0] * (n + 1)
        out: list[int] = []
        delivered = threading.Event()
        failed: list[BaseException] = []
        sub = subscribe(log, STREAM, after_seq=0)

        def reader() -> None:
            try:
                for _ in range(n):
                    ev = sub.get(timeout=WAIT)
                    now = _mono_ns()
                    assert ev is not None, "an event was not delivered"
                    out.append(now - stamps[ev.seq])
                    delivered.set()
            except BaseException as exc:
                failed.append(exc)
                delivered.set()

        t = threading.Thread(target=reader, daemon=True)
        t.start()
        ev = _append_event(0)
        for i in range(n):
            delivered.clear()
            stamps[i + 1] = _mono_ns()
            log.append(STREAM, [ev], expected_seq=i)
            if not delivered.wait(WAIT) or failed:
                raise RuntimeError(f"in-process delivery failed: {failed}")
        t.join(WAIT)
        sub.close()
    return out


def latency_in_process_raw(tmp: str, n: int) -> list[int]:
    """Baseline: raw insert, a condition notify, the reader selects and decodes new rows."""
    log = RawLog(_fresh(tmp, "lat-raw.db"))
    reader_c = _raw_connect(log.c.execute("PRAGMA database_list").fetchone()[2])
    cond = threading.Condition()
    gen = [0]
    stamps: list[int] = [0] * (n + 1)
    out: list[int] = []
    delivered = threading.Event()

    def reader() -> None:
        cursor = 0
        seen = 0
        while cursor < n:
            rows = reader_c.execute(
                "SELECT seq, payload FROM events WHERE stream=? AND seq>? ORDER BY seq LIMIT 500",
                (STREAM, cursor),
            ).fetchall()
            for seq, payload in rows:
                orjson.loads(payload)
                out.append(_mono_ns() - stamps[seq])
                cursor = seq
                delivered.set()
            if not rows:
                with cond:
                    if gen[0] == seen:
                        cond.wait(0.25)
                    seen = gen[0]

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    d = _append_dict(0)
    try:
        for i in range(n):
            delivered.clear()
            stamps[i + 1] = _mono_ns()
            log.append(STREAM, [d], i, f"k{i}")
            with cond:
                gen[0] += 1
                cond.notify_all()
            if not delivered.wait(WAIT):
                raise RuntimeError("raw in-process delivery timed out")
        t.join(WAIT)
    finally:
        reader_c.close()
        log.close()
    return out


def _remote_writer(path: str, raw: bool, n: int, go: Connection) -> None:
    """Child process: on each 'go', stamp the clock and append one event carrying the stamp."""
    log: RawLog | SqliteLog = RawLog(path) if raw else SqliteLog(path)
    try:
        go.send("ready")
        for i in range(n):
            if not go.poll(WAIT):
                return
            go.recv()
            stamp = str(_mono_ns())
            if isinstance(log, RawLog):
                log.append(STREAM, [{"kind": "assistant.message", "text": stamp}], i, f"k{i}")
            else:
                log.append(STREAM, [Event(kind=Kind.ASSISTANT, text=stamp)], expected_seq=i)
    finally:
        log.close()
        go.close()


def _start_writer(path: str, raw: bool, n: int) -> tuple[Any, Connection]:
    # Spawn, not fork: this process runs threads, and a forked child would inherit their locks.
    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    p = ctx.Process(target=_remote_writer, args=(path, raw, n, there), daemon=True)
    p.start()
    there.close()
    if not here.poll(WAIT * 3) or here.recv() != "ready":
        p.kill()
        raise RuntimeError("writer process did not start")
    return p, here


def latency_cross_process_spine(tmp: str, n: int) -> list[int]:
    """Writer in another process; the subscriber here is woken by the data_version watcher."""
    path = _fresh(tmp, "xlat.db")
    SqliteLog(path).close()
    p, go = _start_writer(path, False, n)
    out: list[int] = []
    try:
        with SqliteLog(path) as log, subscribe(log, STREAM, after_seq=0) as sub:
            for _ in range(n):
                go.send("go")
                ev = sub.get(timeout=WAIT)
                now = _mono_ns()
                if ev is None:
                    raise RuntimeError("cross-process delivery timed out")
                out.append(now - int(ev.text))
    finally:
        go.close()
        p.join(WAIT)
        if p.is_alive():
            p.kill()
    return out


def latency_cross_process_raw(tmp: str, n: int, interval: float) -> list[int]:
    """Baseline: poll ``PRAGMA data_version`` every ``interval`` s, then select and decode."""
    path = _fresh(tmp, "xlat-raw.db")
    RawLog(path).close()
    p, go = _start_writer(path, True, n)
    c = _raw_connect(path)
    out: list[int] = []
    try:
        version = c.execute("PRAGMA data_version").fetchone()[0]
        cursor = 0
        for _ in range(n):
            go.send("go")
            deadline = time.monotonic() + WAIT
            while True:
                v = c.execute("PRAGMA data_version").fetchone()[0]
                if v != version:
                    version = v
                    rows = c.execute(
                        "SELECT seq, payload FROM events WHERE stream=? AND seq>? ORDER BY seq",
                        (STREAM, cursor),
                    ).fetchall()
                    if rows:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError("raw cross-process delivery timed out")
                time.sleep(interval)
            now = _mono_ns()
            for seq, payload in rows:
                out.append(now - int(orjson.loads(payload)["text"]))
                cursor = seq
    finally:
        c.close()
        go.close()
        p.join(WAIT)
        if p.is_alive():
            p.kill()
    return out


# -- report ----------------------------------------------------------------------------


def wal_under_overlapping_readers(tmp: str, n: int, restart_pages: int) -> int:
    """The largest size (bytes) the WAL reaches over ``n`` commits of ~500 bytes while three
    readers always overlap, the checkpointer restarting the WAL past ``restart_pages``.

    It depends on how often the checkpointer thread gets the CPU, so it is measured here,
    not bounded in a test (which checks that the WAL starts over at all)."""
    import spine._sqlite_watch as watch
    from spine import open_log

    path = _fresh(tmp, f"wal-{restart_pages}.db")
    saved, watch._WAL_RESTART_PAGES = watch._WAL_RESTART_PAGES, restart_pages
    stop = threading.Event()

    def read() -> None:
        with SqliteLog(path) as reader:
            while not stop.is_set():
                reader.read("s", 0, 20)

    largest = 0
    try:
        with open_log(path, deferred_checkpoints=True) as writer, SqliteLog(path) as keeper:
            readers = [threading.Thread(target=read) for _ in range(3)]
            for t in readers:
                t.start()
            try:
                keeper.start_checkpoints(every=0.005)
                for i in range(n):
                    writer.append("s", [Event(kind=Kind.USER_MESSAGE, text=f"message {i} " * 40)])
                    if i % 50 == 0:
                        largest = max(largest, os.path.getsize(path + "-wal"))
            finally:
                stop.set()
                for t in readers:
                    t.join(10)
    finally:
        watch._WAL_RESTART_PAGES = saved
    return largest


def _line(name: str, value: str, ratio: str, target: str, ok: bool) -> str:
    mark = "met" if ok else "MISSED"
    return f"  {name:<40} {value:>22}  {ratio:>14}  {target:<22} {mark}"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="a smoke run with small sizes")
    ap.add_argument(
        "--eventsourcing",
        action="store_true",
        help="only the batched append against the eventsourcing library (run with an "
        "interpreter that has it, in an environment of its own)",
    )
    args = ap.parse_args(argv)
    q = args.quick
    if args.eventsourcing:
        return _versus_eventsourcing(q)
    rounds = 3 if q else 7
    replay_n = 10_000 if q else 100_000
    lat_n = 100 if q else 1000
    warm = 20

    print(f"spine benchmark: python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}")
    print(f"{os.cpu_count()} cores, WAL, synchronous=NORMAL, medians of {rounds} rounds")
    missed: list[str] = []
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="spine-bench-") as tmp:
        batched = bench_append(tmp, 100, 40 if q else 400, rounds)
        single = bench_append(tmp, 1, 500 if q else 4000, rounds)
        replay = bench_replay(tmp, replay_n, 3 if q else rounds)
        durable = bench_durability(tmp, 200 if q else 2000, 3 if q else rounds)
        lat_in = _percentiles(latency_in_process_spine(tmp, lat_n + warm)[warm:])
        lat_in_raw = _percentiles(latency_in_process_raw(tmp, lat_n + warm)[warm:])
        lat_x = _percentiles(latency_cross_process_spine(tmp, lat_n + warm)[warm:])
        lat_x_raw = _percentiles(latency_cross_process_raw(tmp, lat_n + warm, 0.001)[warm:])
        wal_n = 300 if q else 1500
        wal_restarted = wal_under_overlapping_readers(tmp, wal_n, 64)
        wal_never = wal_under_overlapping_readers(tmp, wal_n, 1 << 30)

    print()
    print(f"  {'measure':<40} {'spine':>22}  {'ratio to raw':>14}  {'target':<22}")
    rows: list[tuple[str, str, str, str, bool, str, str]] = []
    r = batched["spine"] / batched["raw"]
    rows.append(
        ("append, 100 events per commit", f"{batched['spine']:,.0f} ev/s", f"{r:.2f}x",
         ">= 0.75x raw", r >= 0.75, f"raw sqlite3 + orjson {batched['raw']:,.0f} ev/s",
         "batched append")
    )  # fmt: skip
    r = single["spine"] / single["raw"]
    rows.append(
        ("append, 1 event per commit (durable)", f"{single['spine']:,.0f} ev/s", f"{r:.2f}x",
         ">= 0.8x raw", r >= 0.8, f"raw sqlite3 + orjson {single['raw']:,.0f} ev/s",
         "single append")
    )  # fmt: skip
    r = durable["full"] / durable["normal"]
    rows.append(
        ("append, 1 event per commit, durability full", f"{durable['full']:,.0f} ev/s",
         f"{r:.2f}x", "(a cost, shown)", True,
         f"durability normal {durable['normal']:,.0f} ev/s (ratio: full to normal)",
         "durability")
    )  # fmt: skip
    r = replay["spine"] / replay["raw"]
    rows.append(
        (f"replay {replay_n:,} events to Event", f"{replay['spine']:,.0f} ev/s", f"{r:.2f}x",
         ">= 150,000 ev/s", replay["spine"] >= 150_000,
         f"raw select + orjson.loads to dicts {replay['raw']:,.0f} ev/s", "replay")
    )  # fmt: skip
    for name, (p50, p99), (b50, b99), limit, key in (
        ("wake latency in-process", lat_in, lat_in_raw, 1.0, "wake in-process"),
        ("wake latency cross-process", lat_x, lat_x_raw, 5.0, "wake cross-process"),
    ):
        rows.append(
            (name, f"p50 {p50:.3f} p99 {p99:.3f} ms", f"{p50 / b50:.2f}x/{p99 / b99:.2f}x",
             f"p99 < {limit:g} ms", p99 < limit, f"raw baseline p50 {b50:.3f} p99 {b99:.3f} ms",
             key)
        )  # fmt: skip
    rows.append(
        (f"largest WAL, {wal_n:,} commits, readers overlap", f"{wal_restarted / 1e6:.1f} MB",
         f"{wal_restarted / wal_never:.2f}x", "< 8 MB", wal_restarted < 8_000_000,
         f"never restarted {wal_never / 1e6:.1f} MB (restart past 64 pages)", "wal size")
    )  # fmt: skip
    for name, value, ratio, target, ok, base, key in rows:
        print(_line(name, value, ratio, target, ok))
        print(f"      {base}")
        if not ok:
            missed.append(key)
    print()
    elapsed = time.perf_counter() - t_start
    print(f"total {elapsed:.1f} s; targets missed: {', '.join(missed) or 'none'}")
    for key in missed:
        print(f"  {key}: {BOUNDS[key]}")
    return 0


def _versus_eventsourcing(quick: bool) -> int:
    import importlib.metadata

    version = importlib.metadata.version("eventsourcing")
    rounds = 3 if quick else 7
    with tempfile.TemporaryDirectory(prefix="spine-bench-") as tmp:
        r = bench_eventsourcing(tmp, 100, 40 if quick else 400, rounds)
    ratio = r["spine"] / r["eventsourcing"]
    mark = "met" if ratio >= 3 else "MISSED"
    print(f"append, 100 events per commit, medians of {rounds} rounds (WAL, NORMAL both)")
    print(f"  spine {r['spine']:,.0f} ev/s  eventsourcing {version} {r['eventsourcing']:,.0f} ev/s")
    print(f"  ratio {ratio:.2f}x  target >= 3x: {mark}")
    return 0


#: What limits each figure, printed when its target is missed.
BOUNDS = {
    "batched append": (
        "per-event Python work the raw baseline skips: reading ~30 Event attributes into the "
        "seed-shaped dict (generated straight-line code, ~1 us), the Record per event and the "
        "checks; SQLite's own insert is shared. A loaded machine stretches the Python part more."
    ),
    "single append": (
        "per-append overhead on top of the same seven statements: argument checks, time "
        "stamp, encode, result object and the in-process wake (a few us of ~60 us)."
    ),
    "replay": (
        "building ~100k frozen Event objects in Python: JSON parse (~0.6 us), field checks "
        "(~1 us) and construction (~0.8 us) per event; the SQL read is ~0.7 us."
    ),
    "wake in-process": "thread wake-up and the GIL hand-off from the appending thread.",
    "wal size": (
        "the commits made before the checkpointer thread runs again: on a loaded machine it "
        "gets the CPU less often, and each commit it misses stays in the WAL until it does."
    ),
    "wake cross-process": (
        "the watcher's PRAGMA data_version poll interval (1 ms) plus scheduling on 2 cores."
    ),
}


if __name__ == "__main__":
    raise SystemExit(main())
