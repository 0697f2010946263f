"""Effect-ledger benchmark: the turn rate of tool-calling turns.

One session on ``multiprocTCPBase`` with the scripted provider answers ``--turns`` messages
one after the other, each a turn with one tool call (``calculator``) and a second model
call for the answer: the ledger's intent rides on the call's admission (no extra commit),
its result is stored as the call ends. Prints turns/s, the median of ``--rounds`` rounds.

Run ``python bench/effects.py`` (``--quick`` for a smoke run) on this build, and the same
file against another build (its checkout first on ``PYTHONPATH``) to compare: the
ledger's target is at least 0.9x the turn rate without it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, os.path.dirname(_HERE))

from actors.host import Host  # noqa: E402

TOOL_TURN = '!tool calculator {"expression": "6*7"}'


def round_(h: Host, sid: str, turns: int) -> float:
    """Turns per second over ``turns`` tool-calling turns, each awaited before the next."""
    started = time.perf_counter()
    for _ in range(turns):
        ack = h.send(sid, TOOL_TURN)
        done = h.wait_turn(sid, ack.seq)
        assert done.stop_reason == "end_turn", done
    return turns / (time.perf_counter() - started)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="a fast smoke run")
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    turns, rounds = (10, 2) if args.quick else (args.turns, args.rounds)
    with tempfile.TemporaryDirectory() as tmp:
        h = Host(os.path.join(tmp, "data"), base="multiprocTCPBase", timeout=30)
        try:
            sid = h.create()
            round_(h, sid, 5)  # warm: the session's process, its thread, the imports
            rates = [round_(h, sid, turns) for _ in range(rounds)]
        finally:
            h.close()
    import actors

    where = os.path.dirname(os.path.dirname(os.path.abspath(actors.__file__)))
    print(
        f"{os.path.basename(where)}: tool turns/s median {statistics.median(rates):.1f} "
        f"(rounds {', '.join(f'{r:.1f}' for r in rates)})"
    )


if __name__ == "__main__":
    main()
