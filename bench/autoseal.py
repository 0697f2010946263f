"""Auto-seal cost: turns/s with sessions sealing themselves against sessions that do not.

Three Hosts run at once on ``multiprocTCPBase`` (20 sessions each, a thread per session,
the instant scripted agent): no auto-seal, the daemon's default policy
(`actors.policy.DAEMON_SEAL_POLICY`), and an aggressive one (every 100 events, every
second) that makes the per-seal cost visible. Rounds alternate between them (only one is
driven at a time); medians and ratios against the no-seal baseline are printed, with the
seals each configuration made.

``--focused`` measures the session's side alone, in one process, where a loaded machine
disturbs it least: a SQLite spine takes turns of five events (user message, turn start,
two assistant messages, turn end) as one append each, the way a session's decisions
store them, with and without the `AutoSealer` a session runs (told of every append;
sealing when due by count), alternating rounds, medians.

The daemon-level run also reports the CPU time the session processes spent per turn
(user and system time from ``/proc``, over every turn a round completed): the sealer runs
there, and on a shared machine CPU per turn resolves a few percent that turns/s, swayed
by whatever else runs, does not.

Run ``python bench/autoseal.py`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

from actors._runtime.system import loopback_only  # noqa: E402
from actors.policy import DAEMON_SEAL_POLICY, SealPolicy  # noqa: E402
from bench.actors import TURN_END, WAIT, _drive, _stat, host  # noqa: E402
from spine import Kind  # noqa: E402

CONFIGS = {
    "off": None,
    "default": DAEMON_SEAL_POLICY,
    "every 100 / 1 s": SealPolicy(every=100, interval=1.0),
}


def focused(rounds: int, turns: int) -> None:
    from actors.session.shell.autoseal import AutoSealer
    from spine import Event, SqliteLog
    from spine.seal import SigningKey, seal_event

    key = SigningKey.generate()
    rates: dict[str, list[float]] = {name: [] for name in CONFIGS}
    seals_made: dict[str, int] = {}
    root = tempfile.mkdtemp(prefix="vertebra-bench-autoseal-")
    try:
        for r in range(rounds):
            for name, policy in CONFIGS.items():
                log = SqliteLog(os.path.join(root, f"{r}-{len(rates[name])}-{id(policy)}.db"))
                sid = "s"
                sealer = None if policy is None else AutoSealer(policy, sid, log, lambda: key)
                made = 0
                last = 0
                t0 = time.perf_counter()
                for t in range(1, turns + 1):
                    evs = [
                        Event(kind=Kind.USER_MESSAGE, text=f"question {t} about the report"),
                        Event(kind=Kind.TURN_STARTED, turn=t),
                        Event(kind=Kind.ASSISTANT, turn=t, text=f"answer {t} " * 8),
                        Event(kind=Kind.ASSISTANT, turn=t, text="and one more thing"),
                        Event(kind=Kind.TURN_COMPLETED, turn=t, stop_reason="end_turn"),
                    ]
                    res = log.append(sid, evs, expected_seq=last)
                    last = res.last_seq
                    if sealer is None:
                        continue
                    due = sealer.appended(evs, res.first_seq, last, {}, res.records)
                    if due is not None and due[0] == 0.0:
                        cmd = sealer.due(due[1], last)
                        if cmd is not None and cmd.seal is not None:
                            ev = seal_event(cmd.seal)
                            res = log.append(sid, [ev], expected_seq=last)
                            last = res.last_seq
                            sealer.appended([ev], res.first_seq, last, {}, res.records)
                            made += 1
                rates[name].append(turns / (time.perf_counter() - t0))
                seals_made[name] = made
                log.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    base = statistics.median(rates["off"])
    print(f"session side alone: {turns} turns of 5 events on SQLite, {rounds} alternating rounds")
    for name, rs in rates.items():
        med = statistics.median(rs)
        print(
            f"  {name:<16} {med:7.0f} turns/s  {med / base:5.3f}x  seals {seals_made[name]:4d}  "
            f"(rounds {', '.join(f'{x:.0f}' for x in rs)})"
        )
    cost = 1 - statistics.median(rates["default"]) / base
    verdict = "met" if cost <= 0.05 else "MISSED"
    what = "of the session's turns/s"
    print(f"  default policy costs {cost * 100:.1f}% {what}  target <= 5%: {verdict}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a fast smoke run")
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--focused", action="store_true", help="the session's side alone")
    args = ap.parse_args()
    if args.focused:
        focused(rounds=3 if args.quick else 9, turns=300 if args.quick else 2000)
        return
    rounds, seconds = (2, 1.0) if args.quick else (5, 3.0)
    n = 10 if args.quick else args.sessions
    loopback_only()
    root = tempfile.mkdtemp(prefix="vertebra-bench-autoseal-")
    rates: dict[str, list[float]] = {name: [] for name in CONFIGS}
    cpu: dict[str, list[float]] = {name: [] for name in CONFIGS}
    try:
        with ExitStack() as stack:
            hosts: dict[str, Any] = {}
            sids: dict[str, list[str]] = {}
            subs: dict[tuple[str, int], Any] = {}
            for name, policy in CONFIGS.items():
                d = os.path.join(root, name.replace(" ", "").replace("/", "-"))
                h = stack.enter_context(host(d, auto_seal=policy))
                hosts[name] = h
                sids[name] = [h.create() for _ in range(n)]

            done = [0] * n

            def driver(name: str) -> tuple[Any, Any]:
                h, ids = hosts[name], sids[name]

                def setup(i: int) -> None:
                    if (name, i) not in subs:
                        last = h.history(ids[i])[-1].seq
                        subs[name, i] = h.subscribe(ids[i], last, kinds=TURN_END)

                def turn(i: int) -> None:
                    a = h.send(ids[i], "hello")
                    while True:
                        ev = subs[name, i].get(WAIT)
                        assert ev is not None
                        if ev.seq > a.seq:
                            done[i] += 1
                            return

                return turn, setup

            try:
                for _ in range(rounds):
                    for name in CONFIGS:
                        turn, setup = driver(name)
                        pids = [hosts[name].session_pid(sid) for sid in sids[name]]
                        done[:] = [0] * n
                        before = _cpu_seconds(pids)
                        rates[name].append(_drive(n, seconds, turn, setup))
                        # Every turn counted ended before _drive returned (it joins the
                        # threads): the CPU read now is theirs, none of the next round's.
                        cpu[name].append((_cpu_seconds(pids) - before) / max(1, sum(done)))
            finally:
                for s in subs.values():
                    s.close()
            sealed = {
                name: sum(
                    len(hosts[name]._log.read(sid, 0, None, kinds=[Kind.RECORD_SEALED]))
                    for sid in sids[name]
                )
                for name in CONFIGS
            }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    base = statistics.median(rates["off"])
    print(f"turns/s, {n} sessions, a thread each, {rounds} alternating rounds of {seconds:g} s")
    for name, rs in rates.items():
        med = statistics.median(rs)
        policy = CONFIGS[name]
        what = "no auto-seal" if policy is None else f"every {policy.every}, {policy.interval:g} s"
        print(
            f"  {name:<16} {med:6.0f} turns/s  {med / base:5.3f}x  seals {sealed[name]:5d}  "
            f"({what}; rounds {', '.join(f'{r:.0f}' for r in rs)})"
        )
    cost = 1 - statistics.median(rates["default"]) / base
    verdict = "met" if cost <= 0.05 else "MISSED"
    print(f"  default policy costs {cost * 100:.1f}% of turns/s  target <= 5%: {verdict}")
    base_cpu = statistics.median(cpu["off"])
    print("session processes' CPU per turn (user + system)")
    for name, cs in cpu.items():
        med = statistics.median(cs)
        print(
            f"  {name:<16} {med * 1000:6.3f} ms  {med / base_cpu:5.3f}x  "
            f"(rounds {', '.join(f'{x * 1000:.3f}' for x in cs)})"
        )
    extra = statistics.median(cpu["default"]) / base_cpu - 1
    verdict = "met" if extra <= 0.05 else "MISSED"
    print(f"  default policy adds {extra * 100:.1f}% CPU per turn  target <= 5%: {verdict}")


def _cpu_seconds(pids: list[int]) -> float:
    """User plus system time of ``pids`` so far, in seconds."""
    ticks = 0
    for pid in pids:
        st = _stat(pid)
        if st is not None:
            ticks += int(st[11]) + int(st[12])
    return ticks / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    main()
