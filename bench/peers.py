"""Peers benchmark: vertebra beside LangGraph + SqliteSaver and the OpenAI Agents SDK's
`Runner` + `SQLiteSession`, side by side in one run, in alternating rounds.

Not part of the test suite. The peers are installed at pinned versions (`PINS`) into a
virtual environment of the benchmark's own, under the user's cache folder (or
``--env DIR``), with this repository installed there too; the script then runs itself
again inside it. Installing is the only use of the network: the run itself refuses every
connection and name look-up that is not loopback.

Like for like: each system keeps its history durable in a real SQLite file at
``synchronous = NORMAL`` (vertebra: its spine's default, ``durability="normal"``;
LangGraph: set on the connection the user hands `SqliteSaver`; the Agents SDK: set in
`SQLiteSession`'s per-connection hook, beside the WAL it sets), and an instant model
(vertebra's scripted agent; an instant LangGraph node; a `Model` of the SDK's interface).
Figures, each with the ratio vertebra/peer (for times, below 1 is vertebra faster):

- turns/s of 50 sessions in a closed loop (vertebra and LangGraph one thread a session,
  the Agents SDK one task a session on an event loop, as its `Runner` is asynchronous),
  with the per-turn p50/p99 under that load, and the same of one session alone;
- the per-turn cost on a session already holding 10,000 events (vertebra) or messages
  (the peers), built straight into the store, then 100 more turns timed;
- restart to serving: a fresh process that reopens the store and serves the next turn of
  an existing session, from the process's start and from the end of its imports.

Run ``python bench/peers.py`` (``--quick`` for a smoke run; ``--rounds``, ``--seconds``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import venv

_HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(_HERE)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, ROOT)

from bench import _peer_measure as measure  # noqa: E402

PINS = ("langgraph==1.2.24", "langgraph-checkpoint-sqlite==3.1.2", "openai-agents==0.24.0")
INSIDE = "VERTEBRA_PEERS_ENV"


def env_dir() -> pathlib.Path:
    """The environment's folder: one per pin set, Python and checkout, in the user's cache
    folder (the temporary folder where that cannot be made)."""
    key = "\n".join([*PINS, sys.version, ROOT]).encode()
    name = "peers-" + hashlib.sha256(key).hexdigest()[:12]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    try:
        os.makedirs(os.path.join(base, "vertebra-bench"), exist_ok=True)
    except OSError:
        base = tempfile.gettempdir()
    return pathlib.Path(base, "vertebra-bench", name)


def ensure_env(where: pathlib.Path) -> pathlib.Path:
    """The environment's Python, creating and installing it on first use."""
    python = where / "bin" / "python"
    done = where / "installed.json"
    # The repository's own dependencies change too: a new setup.cfg reinstalls.
    cfg = hashlib.sha256(pathlib.Path(ROOT, "setup.cfg").read_bytes()).hexdigest()
    wanted = [*PINS, cfg]
    if done.exists() and python.exists() and json.loads(done.read_text()) == wanted:
        return python
    print(f"installing {', '.join(PINS)} and this repository into a benchmark environment")
    shutil.rmtree(where, ignore_errors=True)
    venv.create(where, with_pip=True)
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "-e", ROOT, *PINS], check=True)
    done.write_text(json.dumps(wanted))
    return python


def reexec(args: list[str], env: str | None) -> None:
    python = ensure_env(pathlib.Path(env) if env else env_dir())
    os.environ[INSIDE] = "1"
    os.execv(str(python), [str(python), os.path.abspath(__file__), *args])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a fast smoke run")
    ap.add_argument("--rounds", type=int, help="closed-loop rounds (default 5, quick 1)")
    ap.add_argument("--seconds", type=float, help="seconds of each closed loop")
    ap.add_argument("--env", help="the benchmark environment's folder")
    ap.add_argument("--serve", nargs=3, metavar=("SYSTEM", "STORE", "ID"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not os.environ.get(INSIDE):
        reexec(sys.argv[1:], args.env)
    measure.no_network()
    if args.serve:
        measure.serve_main(*args.serve)
        return
    q = args.quick
    plan = measure.Plan(
        sessions=50,
        rounds=args.rounds or (1 if q else 5),
        seconds=args.seconds or (1.0 if q else 3.0),
        long_history=2_000 if q else 10_000,
        long_turns=20 if q else 100,
        restarts=1 if q else 5,
    )
    measure.run(plan, os.path.abspath(__file__))


if __name__ == "__main__":
    main()
