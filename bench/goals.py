"""Goal-run benchmark: a 2-child fan-out against the same turns in one session.

Each round, on ``multiprocTCPBase`` with the scripted provider:

- fan-out: a new session submits a goal whose one response spawns two children; each
  child is a session of its own (its own process) whose goal run makes a tool call and
  answers; the parent folds both back and answers. Timed from ``create`` to ``wait``
  returning the parent's answer.
- baseline: a new session runs the same work as three goal runs one after the other
  (each child's objective, then the parent's own answer), so the same model turns and
  tool calls, without child sessions.

Two model speeds: instant (the scripted model answers at once; the overhead of a child
session, its process, its stream and the fold-back is all there is; target: fan-out at
most 1.5x the baseline's wall time) and slow (each child's answer streams over ~0.4 s, so
running the children concurrently pays for the overhead). Rounds alternate, medians and
ratios are printed: the ratio of the medians and the median of each round's own ratio
(the order of the two flips every round).

Run ``python bench/goals.py`` (``--quick`` for a smoke run, ``--phases`` to also print
where a fan-out round's time goes, read from the stored events' times). The actor system is shut
down at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

from actors.host import Host  # noqa: E402
from actors.messages import RunnerConfig  # noqa: E402
from spine import Event, Kind  # noqa: E402

#: The Runner's default number of spare session processes.
SPARES = RunnerConfig(data_dir="").spare_sessions

INSTANT = ('!tool calculator {"expression": "6*7"}', '!tool calculator {"expression": "2+2"}')
SLOW = ("!slow 0.05 a b c d e f g h", "!slow 0.05 i j k l m n o p")


def _spawns(objectives: tuple[str, str]) -> str:
    return "\n".join("!tool spawn " + json.dumps({"objective": o}) for o in objectives)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


def _settle(h: Host, sessions: list[str], spares: int) -> None:
    """Outside the timing: close the round's sessions and wait until their processes
    have exited and the Runner has its spares again, so that neither idle processes of
    earlier rounds (three per fan-out, one per baseline) nor the work a round leaves
    behind (process exits, spare starts) land on the next round's clock."""
    pids = [h.session_pid(sid) for sid in sessions]
    for sid in sessions:
        h.close_session(sid)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if all(map(_gone, pids)) and h.stats().get("spare_sessions_ready", 0) >= spares:
            return
        time.sleep(0.01)
    raise RuntimeError("the round's sessions did not settle within 30 s")


def fanout(h: Host, objectives: tuple[str, str], spares: int) -> float:
    t0 = time.perf_counter()
    sid = h.create()
    h.submit(sid, _spawns(objectives))
    h.wait(sid, timeout=60)
    took = time.perf_counter() - t0
    kids = [e.child for e in h.history(sid) if e.kind == Kind.CHILD_SPAWNED and e.goal == sid]
    _settle(h, [sid, *kids], spares)
    return took


def single(h: Host, objectives: tuple[str, str], spares: int) -> float:
    t0 = time.perf_counter()
    sid = h.create()
    for objective in (*objectives, "both answers are in"):
        h.submit(sid, objective)
        h.wait(sid, timeout=60)
    took = time.perf_counter() - t0
    _settle(h, [sid], spares)
    return took


def bench(h: Host, name: str, objectives: tuple[str, str], rounds: int, spares: int) -> float:
    fan: list[float] = []
    one: list[float] = []
    fanout(h, objectives, spares)  # warm up: the first child's process start is not typical
    single(h, objectives, spares)
    for i in range(rounds):
        # The order flips every round, so neither side always runs first after a settle.
        if i % 2:
            one.append(single(h, objectives, spares))
            fan.append(fanout(h, objectives, spares))
        else:
            fan.append(fanout(h, objectives, spares))
            one.append(single(h, objectives, spares))
    f = statistics.median(fan) * 1e3
    b = statistics.median(one) * 1e3
    # Each round's own ratio too: a round that the machine's other work slowed as a whole
    # then counts against neither side (the ratio of medians mixes different moments).
    paired = sorted(x / y for x, y in zip(fan, one, strict=True))
    q = len(paired) // 4
    print(
        f"{name:8s} fan-out (parent + 2 children) median {f:7.1f} ms | "
        f"same turns in one session median {b:7.1f} ms | ratio {f / b:4.2f}x | "
        f"per-round ratio median {statistics.median(paired):4.2f}x "
        f"(middle half {paired[q]:4.2f}-{paired[-q - 1]:4.2f}x) ({rounds} rounds)"
    )
    return f / b


def phases(h: Host, rounds: int, spares: int) -> None:
    """Where a fan-out round's time goes, read from the stored events' times (medians)."""
    seen: dict[str, list[float]] = {}

    def add(name: str, seconds: float) -> None:
        seen.setdefault(name, []).append(seconds * 1e3)

    def at(e: Event) -> float:
        return e.time.timestamp() if e.time is not None else 0.0

    for _ in range(rounds):
        sid = h.create()
        t0 = time.time()
        h.submit(sid, _spawns(INSTANT))
        h.wait(sid, timeout=60)
        evs = h.history(sid)
        spawned = {e.child: at(e) for e in evs if e.kind == Kind.CHILD_SPAWNED and e.goal == sid}
        folded = {e.child: at(e) for e in evs if e.kind == Kind.CHILD_COMPLETED and e.goal == sid}
        add("submit -> first child.spawned", min(spawned.values()) - t0)
        for kid, when in spawned.items():
            own = h.history(kid)
            add("child.spawned -> child's first event", at(own[0]) - when)
            add("child's run (first event -> converged)", at(own[-1]) - at(own[0]))
            add("child converged -> parent's child.completed", folded[kid] - at(own[-1]))
        answer = next(at(e) for e in evs if e.kind == Kind.CONVERGED)
        add("last child.completed -> parent converged", answer - max(folded.values()))
        _settle(h, [sid, *spawned], spares)
    for name, values in seen.items():
        print(f"  {name:45s} median {statistics.median(values):6.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="a fast smoke run")
    ap.add_argument(
        "--phases", action="store_true", help="also print where a fan-out round's time goes"
    )
    ap.add_argument(
        "--spares",
        default=f"0,{SPARES}",
        help=f"comma-separated spare session process counts to run (default: 0,{SPARES})",
    )
    ap.add_argument("--rounds", type=int, help="rounds of the instant run (default 20, 3 quick)")
    ap.add_argument("--cold-spares", action="store_true", help="spares that skip their warm-up")
    args = ap.parse_args()
    rounds = args.rounds or (3 if args.quick else 20)
    for spares in (int(n) for n in args.spares.split(",")):
        print(f"-- spare session processes: {spares}")
        with tempfile.TemporaryDirectory() as tmp:
            h = Host(
                os.path.join(tmp, "data"),
                base="multiprocTCPBase",
                timeout=30,
                spare_sessions=spares,
                warm_spares=not args.cold_spares,
            )
            try:
                bench(h, "instant", INSTANT, rounds, spares)
                bench(h, "slow", SLOW, max(3, rounds // 2), spares)
                if args.phases:
                    phases(h, rounds, spares)
            finally:
                h.close()


if __name__ == "__main__":
    main()
