"""Thespian's transport loop with and without the kept poll, against echo and plain Thespian.

Runs ``bench/actors.py --only-throughput`` (vertebra and the raw echo pipeline, 50
sessions, closed loop, instant scripted model) in fresh processes under each selector
choice of `actors._runtime.system.lean_select`, the choices alternating round by round so
that a shared machine's drift moves them alike:

- ``kept``: the poll each thread keeps (`actors._runtime.kept_poll`), vertebra's default;
- ``poll``: a new ``poll`` selector per pass of the loop (the previous default);
- ``thespian``: Thespian's own choice (a new ``epoll`` selector per pass).

Echo gets the same selector as vertebra in each run. Reported: the median turns/s of each
choice for both pipelines and each choice's ratio to ``thespian``, and vertebra's ratio to
echo under each.

First, in this process, the loop's own cost per pass in CPU time (a selector made, every
socket registered, one wait that finds nothing, the selector closed) for 4, 50 and 200
sockets (a session has a handful, the Runner one or more per session), which a shared
machine's load does not move the way it moves turns/s. ``--passes-only`` stops there.
"""

from __future__ import annotations

import argparse
import os
import re
import selectors
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

# Run as a script, this file's folder heads sys.path, and bench/actors.py would shadow the
# package of the same name: the repository's root goes first instead.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

from actors._runtime.kept_poll import KeptPoll  # noqa: E402

HERE = _HERE
LINE = re.compile(r"^\s+(vertebra|echo)\s+(\d+) turns/s", re.M)


def one(choice: str, rounds: int) -> dict[str, float]:
    env = dict(os.environ, VERTEBRA_SELECT=choice)
    env.pop("VERTEBRA_EPOLL", None)
    out = subprocess.run(
        [sys.executable, os.path.join(HERE, "actors.py"), "--only-throughput", str(rounds)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    rates = {name: float(rate) for name, rate in LINE.findall(out)}
    if set(rates) != {"vertebra", "echo"}:
        raise SystemExit(f"unexpected output of bench/actors.py:\n{out}")
    return rates


def _per_pass(factory: Callable[[], Any], fds: list[int], passes: int) -> float:
    started = time.process_time()
    for _ in range(passes):
        sel = factory()
        for fd in fds:
            sel.register(fd, selectors.EVENT_READ)
        sel.select(0)
        sel.close()
    return (time.process_time() - started) / passes


def per_pass() -> None:
    print("the transport loop's selector, CPU per pass (best of 5 x 2,000 passes)")
    kinds = (("thespian", selectors.EpollSelector), ("poll", selectors.PollSelector))
    for n in (4, 50, 200):
        pairs = [socket.socketpair() for _ in range(n)]
        fds = [a.fileno() for a, _ in pairs]
        try:
            got = {k: min(_per_pass(f, fds, 2000) for _ in range(5)) for k, f in kinds}
            kept = min(_per_pass(KeptPoll, fds, 2000) for _ in range(5))
        finally:
            for a, b in pairs:
                a.close()
                b.close()
        print(
            f"  {n:3d} sockets  kept {kept * 1e6:6.1f} us  poll {got['poll'] * 1e6:6.1f} us"
            f"  thespian (epoll) {got['thespian'] * 1e6:6.1f} us"
            f"  kept/poll {kept / got['poll']:4.2f}x  kept/thespian {kept / got['thespian']:4.2f}x"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="runs of each choice (default 3)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds per run (default 2)")
    ap.add_argument("--choices", default="kept,poll,thespian")
    ap.add_argument("--passes-only", action="store_true", help="only the cost per pass")
    args = ap.parse_args()
    per_pass()
    if args.passes_only:
        return
    choices = args.choices.split(",")
    got: dict[str, list[dict[str, float]]] = {c: [] for c in choices}
    for i in range(args.runs):
        order = choices if i % 2 == 0 else list(reversed(choices))
        for choice in order:
            got[choice].append(one(choice, args.rounds))
    med = {
        c: {k: statistics.median(r[k] for r in rs) for k in ("vertebra", "echo")}
        for c, rs in got.items()
    }
    base = med.get("thespian")
    print(f"turns/s at 50 sessions, median of {args.runs} runs per choice")
    for c in choices:
        v, e = med[c]["vertebra"], med[c]["echo"]
        line = f"  {c:9s} vertebra {v:6.0f}  echo {e:6.0f}  vertebra/echo {v / e:4.2f}x"
        if base is not None:
            line += (
                f"  vs thespian: vertebra {v / base['vertebra']:4.2f}x,"
                f" echo {e / base['echo']:4.2f}x"
            )
        print(line)


if __name__ == "__main__":
    main()
