"""`LogContract`: the behaviour every `Log` backend owes its callers, composed from the
append, read and misuse contracts, with writers in several threads of one process."""

from __future__ import annotations

import threading

from .. import Log
from .appends import AppendContract
from .events import WAIT, ev, snapshot, texts
from .forks import ForkContract
from .reads import MisuseContract, ReadContract


class LogContract(AppendContract, ReadContract, MisuseContract, ForkContract):
    """Append, read and list semantics shared by every backend."""

    # -- concurrency within a process ------------------------------------------------

    def test_concurrent_writer_threads_lose_duplicate_and_reorder_nothing(self, log: Log) -> None:
        """Threads appending at once: every batch stored once, in order, positions gap-free."""
        writers, batches = 4, 40
        start = threading.Barrier(writers, timeout=WAIT)
        errors: list[BaseException] = []

        def write(w: int) -> None:
            try:
                start.wait()
                for b in range(batches):
                    log.append(f"own-{w}", [ev(f"{w}:{b}")], expected_seq=b)
                    log.append("shared", [ev(f"{w}:{b}:0"), ev(f"{w}:{b}:1")])
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT)
        assert not any(t.is_alive() for t in threads) and not errors
        check_concurrent_outcome(log, writers, batches)


def check_concurrent_outcome(log: Log, writers: int, batches: int) -> None:
    """What several writers of `own-<w>` and `shared` streams must leave behind."""
    records = snapshot(log)
    assert [r.position for r in records] == list(range(1, len(records) + 1))
    assert len(records) == writers * batches * 3
    for w in range(writers):
        own = log.read(f"own-{w}", 0, None)
        assert texts(own) == [f"{w}:{b}" for b in range(batches)]
        assert [r.seq for r in own] == list(range(1, batches + 1))
    shared = log.read("shared", 0, None)
    assert [r.seq for r in shared] == list(range(1, 2 * writers * batches + 1))
    got = texts(shared)
    # Batches are atomic: each writer's two events sit side by side, in its own order.
    for i in range(0, len(got), 2):
        a, b = got[i], got[i + 1]
        assert a.endswith(":0") and b == a[:-1] + "1"
    for w in range(writers):
        mine = [t for t in got[::2] if t.startswith(f"{w}:")]
        assert mine == [f"{w}:{b}:0" for b in range(batches)]
    # Each record's position order agrees with its stream's seq order.
    for stream in {r.stream for r in records}:
        seqs = [r.seq for r in records if r.stream == stream]
        assert seqs == sorted(seqs)
