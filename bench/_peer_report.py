"""The printed report of `bench/peers.py`: each figure, then vertebra/peer ratios (for
times, below 1 means vertebra is faster)."""

from __future__ import annotations

import statistics
from typing import Any

from bench._peer_measure import PEERS, Plan, pct

V = "vertebra"


def _ms(x: float) -> str:
    return f"{x * 1e3:8.2f} ms"


def _times(name: str, xs: list[float]) -> str:
    return f"  {name:<11} p50 {_ms(pct(xs, 0.5))}  p99 {_ms(pct(xs, 0.99))}  (n={len(xs)})"


def _ratios(fig: dict[str, list[float]], label: str) -> None:
    for peer in PEERS:
        a, b = fig[V], fig[peer]
        print(
            f"  {V}/{peer:<11} {label} p50 {pct(a, 0.5) / pct(b, 0.5):6.3f}x"
            f"  p99 {pct(a, 0.99) / pct(b, 0.99):6.3f}x"
        )


def _throughput(plan: Plan, load: dict[str, dict[str, list[float]]]) -> None:
    print(
        f"\nturns/s, {plan.sessions} sessions, closed loop ({plan.rounds} rounds of "
        f"{plan.seconds:g} s, the latencies under that load)"
    )
    for n, f in load.items():
        rounds = ", ".join(f"{r:.0f}" for r in f["rates"])
        print(f"  {n:<11} {statistics.median(f['rates']):7.0f} turns/s  (rounds {rounds})")
    for n, f in load.items():
        print(_times(n, f["lat"]))
    for peer in PEERS:
        per_round = [a / b for a, b in zip(load[V]["rates"], load[peer]["rates"], strict=True)]
        print(
            f"  {V}/{peer:<11} turns/s {statistics.median(per_round):6.2f}x "
            f"(median of the rounds' {', '.join(f'{x:.2f}' for x in per_round)})"
        )
    _ratios({n: f["lat"] for n, f in load.items()}, "turn")


def report(
    plan: Plan,
    load: dict[str, dict[str, list[float]]],
    long: dict[str, list[float]],
    restarts: dict[str, dict[str, list[float]]],
) -> None:
    _throughput(plan, load)
    print(f"\none session alone, {plan.single_turns} turns on a fresh session each round")
    single = {n: f["single"] for n, f in load.items()}
    for n, xs in single.items():
        print(_times(n, xs))
    _ratios(single, "turn")
    print(
        f"\na session already holding {plan.long_history} events (vertebra) or messages "
        f"(the peers), {plan.long_turns} more turns"
    )
    for n, xs in long.items():
        grow = pct(xs, 0.5) / pct(single[n], 0.5)
        print(f"{_times(n, xs)}  {grow:6.1f}x its fresh session's p50")
    _ratios(long, "turn")
    print(f"\nrestart to serving the next turn of an existing session (median of {plan.restarts})")
    for n, f in restarts.items():
        print(
            f"  {n:<11} fresh process {_ms(statistics.median(f['process']))}"
            f"   after its imports {_ms(statistics.median(f['reopen']))}"
        )
    for peer in PEERS:
        a: Any = restarts[V]
        b: Any = restarts[peer]
        print(
            f"  {V}/{peer:<11} fresh process "
            f"{statistics.median(a['process']) / statistics.median(b['process']):6.3f}x"
            f"   after its imports "
            f"{statistics.median(a['reopen']) / statistics.median(b['reopen']):6.3f}x"
        )
