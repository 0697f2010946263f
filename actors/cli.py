"""The ``vertebra`` command line."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from spine import Event, Kind, SqliteLog, history, subscribe


def _demo(args: argparse.Namespace) -> int:
    """Append a short scripted conversation to the embedded spine and tail it back."""
    os.makedirs(args.data, exist_ok=True)
    path = os.path.join(args.data, "spine.db")
    with SqliteLog(path) as log:
        stream = args.session
        last = log.last_seq(stream)
        script = [
            Event(kind=Kind.USER_MESSAGE, text="What is the spine?"),
            Event(kind=Kind.TURN_STARTED, turn=1),
            Event(kind=Kind.ASSISTANT, turn=1, text="The durable, ordered log of every session."),
            Event(kind=Kind.TURN_COMPLETED, turn=1, stop_reason="end_turn"),
        ]
        log.append(stream, script, expected_seq=last)
        with subscribe(log, stream, after_seq=last) as sub:
            for ev in sub.drain():
                print(f"{stream} #{ev.seq:<4} {ev.kind:<20} {ev.text}")
        print(f"{len(history(log, stream))} events in {stream!r} at {path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vertebra", description=__doc__)
    parser.add_argument("--data", default="vertebra-data", help="data directory")
    sub = parser.add_subparsers(dest="command")
    demo = sub.add_parser("demo", help="append and tail a demo conversation")
    demo.add_argument("--session", default="demo")
    demo.set_defaults(func=_demo)
    args = parser.parse_args(argv)
    if args.command is None:
        args.func, args.session = _demo, "demo"
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
