"""Command-line startup: the wall time of ``vertebra --help`` against the interpreter alone.

Run ``python bench/cli.py`` (``--runs`` to change the count). Each row starts a fresh
process N times and reports the median and the best wall time, and the median's ratio to
the baseline measured in the same run: ``python -c pass`` (the interpreter's own start).
Rows:

- ``vertebra --help``: the installed command (parses, prints the command list);
- ``vertebra tail --help``: a command's own help;
- ``import actors.host``: what every command that talks to the daemon loads on top, shown
  to say what ``--help`` avoids by importing runtime modules inside the commands.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

PY = sys.executable


def wall(argv: list[str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=21)
    args = ap.parse_args()
    vertebra = os.path.join(os.path.dirname(PY), "vertebra")
    rows = [
        ("baseline: python -c pass", [PY, "-c", "pass"]),
        ("vertebra --help", [vertebra, "--help"]),
        ("vertebra tail --help", [vertebra, "tail", "--help"]),
        ("python -c 'import actors.host'", [PY, "-c", "import actors.host"]),
    ]
    base = None
    print(f"{'what':<34} {'median ms':>10} {'best ms':>8} {'vs baseline':>12}")
    for name, argv in rows:
        wall(argv, 2)  # warm the page cache
        times = wall(argv, args.runs)
        med = statistics.median(times)
        base = base or med
        print(f"{name:<34} {med * 1000:>10.1f} {min(times) * 1000:>8.1f} {med / base:>11.2f}x")


if __name__ == "__main__":
    main()
