"""The commands of goal runs: submit one, wait for its end, resume one nothing drives."""

from __future__ import annotations

import argparse
import contextlib
import time
from typing import Any

from ._access import add_json, attach, open_spine, session_id, spine_conflict
from ._daemon import EXIT_FAILED, CliError, lock_held, read_daemon
from ._format import json_line
from ._output import Out
from ._parser import positive

#: Seconds `wait` gives a daemon that holds the data directory to announce itself (it
#: resumes the runs it resumes first, which reads every stream).
STARTING_WAIT = 30.0


def submit_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    p.add_argument("objective", metavar="OBJECTIVE", help="what the goal run is to achieve")
    p.add_argument("--create", action="store_true", help="create the session if it is new")
    for name in ("max-turns", "max-tokens", "max-tool-calls", "max-seconds"):
        p.add_argument(f"--{name}", type=int, metavar="N", help=f"budget: {name[4:]}")
    p.add_argument("--max-cost", type=positive, metavar="AMOUNT", help="budget: money")
    p.add_argument("--wait", action="store_true", help="wait for the run's answer")
    p.add_argument("--timeout", type=positive, default=None, metavar="S", help="wait timeout")
    add_json(p)


def submit(args: argparse.Namespace, out: Out) -> int:
    sid = session_id(args.session)
    from ..errors import SessionAlreadyExists

    names = ("max_turns", "max_tokens", "max_tool_calls", "max_seconds", "max_cost")
    budget = {k: v for k in names if (v := getattr(args, k)) is not None}
    with attach(args) as host:
        if args.create:
            with contextlib.suppress(SessionAlreadyExists):
                host.create(sid)
        ack = host.submit(sid, args.objective, budget=budget)
        if not args.wait:
            out.line(json_line({"seq": ack.seq}) if args.json else f"run opened at seq {ack.seq}")
            return 0
        return _print_outcome(lambda: host.wait(sid, args.timeout), sid, args, out)


def _print_outcome(wait: Any, sid: str, args: argparse.Namespace, out: Out) -> int:
    from ..errors import GoalInterrupted, GoalStalled

    try:
        answer = wait()
    except GoalStalled as exc:
        if args.json:
            out.line(json_line({"session": sid, "outcome": "stalled", "error": str(exc)}))
            return EXIT_FAILED
        raise CliError(f"the goal run of {sid} stalled: {exc}") from None
    except GoalInterrupted as exc:
        if args.json:
            line = {"session": sid, "outcome": "interrupted", "error": str(exc)}
            out.line(json_line({**line, "goal": exc.goal, "seq": exc.seq}))
            return EXIT_FAILED
        raise CliError(str(exc)) from None
    if args.json:
        out.line(json_line({"session": sid, "outcome": "converged", "text": answer}))
    else:
        out.line(answer)
    return 0


def wait_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    p.add_argument("--timeout", type=positive, default=None, metavar="S", help="give up after S")
    add_json(p)


def _served(args: argparse.Namespace) -> bool:
    """Whether a daemon serves the spine `wait` reads: only its Runner knows whether a
    process works on the run (a daemon of another version is named by `attach`). A
    daemon still starting (it holds the lock, has not written its file) is waited for."""
    deadline = time.monotonic() + STARTING_WAIT
    while True:
        try:
            info = read_daemon(args.data, check_version=False)
        except CliError:
            if not lock_held(args.data) or time.monotonic() > deadline:
                return False
            time.sleep(0.1)
            continue
        return spine_conflict(args, info.spine) is None


def wait(args: argparse.Namespace, out: Out) -> int:
    sid = session_id(args.session)
    if _served(args):
        with attach(args) as host:
            return _print_outcome(lambda: host.wait(sid, args.timeout), sid, args, out)
    from ..host.goals import wait_goal

    with open_spine(args) as log:
        # No daemon serves this spine: nothing drives a run in flight in it.
        outcome = lambda: wait_goal(log, sid, args.timeout, lambda: False)  # noqa: E731
        return _print_outcome(outcome, sid, args, out)


def resume_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    add_json(p)


def resume(args: argparse.Namespace, out: Out) -> int:
    sid = session_id(args.session)
    with attach(args) as host:
        ack = host.resume(sid)
    if args.json:
        out.line(json_line({"session": sid, "resumed": not ack.consumed, "seq": ack.seq}))
    elif ack.consumed:
        out.line(f"{sid} has no goal run in flight: nothing to resume")
    else:
        out.line(f"resumed the goal run of {sid} (at seq {ack.seq})")
    return 0
