"""The commands that work with sessions through the daemon: create, send, submit a goal
run and wait for it, interrupt, approve or reject a waiting action, close, and chat."""

from __future__ import annotations

import argparse
import contextlib
import time
from typing import Any

from ._access import add_json, attach, open_spine, payload_line, session_id, unknown_session
from ._daemon import EXIT_FAILED, EXIT_USAGE, CliError
from ._format import event_line, json_line, parse_meta
from ._output import Out
from ._parser import positive


def new_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", nargs="?", metavar="ID", help="the id (default: a fresh UUIDv7)")
    p.add_argument(
        "--meta",
        action="append",
        default=[],
        metavar="K=V",
        help="metadata to start with (repeatable), e.g. ore.model.name=scripted",
    )
    add_json(p)


def new(args: argparse.Namespace, out: Out) -> int:
    sid = None if args.session is None else session_id(args.session)
    try:
        meta = parse_meta(args.meta)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    with attach(args) as host:
        sid = host.create(sid, metadata=meta)
    out.line(json_line({"session": sid}) if args.json else sid)
    return 0


def close_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    add_json(p)


def close(args: argparse.Namespace, out: Out) -> int:
    sid = session_id(args.session)
    with attach(args) as host:
        host.get(sid)
        host.close_session(sid)
    out.line(json_line({"closed": sid}) if args.json else f"closed {sid}")
    return 0


def send_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    p.add_argument("text", metavar="TEXT", help="the message (a /slash command too)")
    p.add_argument("--create", action="store_true", help="create the session if it is new")
    p.add_argument("--no-wait", dest="wait", action="store_false", help="do not wait for the turn")
    p.add_argument("--timeout", type=positive, default=60.0, metavar="S", help="turn timeout")
    add_json(p)


def send(args: argparse.Namespace, out: Out) -> int:
    sid = session_id(args.session)
    from ..errors import SessionAlreadyExists

    with attach(args) as host:
        if args.create:
            with contextlib.suppress(SessionAlreadyExists):
                host.create(sid)
        ack = host.send(sid, args.text)
        if args.json:
            out.line(
                json_line({"seq": ack.seq, "consumed": ack.consumed, "notices": list(ack.notices)})
            )
        else:
            for severity, text in ack.notices:
                out.line(f"[{severity}] {text}")
        if ack.consumed or not args.wait:
            if not args.json:
                out.line(f"stored at seq {ack.seq}" if ack.seq else "nothing stored")
            return 0
        with host.subscribe(sid, ack.seq) as sub:
            deadline = time.monotonic() + args.timeout
            while (left := deadline - time.monotonic()) > 0:
                rec = sub.get_record(left)
                if rec is None:
                    break
                if args.json:
                    out.line(payload_line(rec.payload))
                else:
                    out.line(event_line(rec.event(), out.style, sid))
                if rec.kind in ("turn.completed", "turn.cancelled"):
                    return 0
        raise CliError(f"no turn ended in {sid} within {args.timeout:g}s")


def submit_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    p.add_argument("objective", metavar="OBJECTIVE", help="what the goal run is to achieve")
    p.add_argument("--create", action="store_true", help="create the session if it is new")
    for name in ("max-turns", "max-tokens", "max-tool-calls", "max-seconds"):
        p.add_argument(f"--{name}", type=int, metavar="N", help=f"budget: {name[4:]}")
    p.add_argument("--wait", action="store_true", help="wait for the run's answer")
    p.add_argument("--timeout", type=positive, default=None, metavar="S", help="wait timeout")
    add_json(p)


def submit(args: argparse.Namespace, out: Out) -> int:
    sid = session_id(args.session)
    from ..errors import SessionAlreadyExists

    budget = {
        k: v
        for k, v in (
            ("max_turns", args.max_turns),
            ("max_tokens", args.max_tokens),
            ("max_tool_calls", args.max_tool_calls),
            ("max_seconds", args.max_seconds),
        )
        if v is not None
    }
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
    from ..errors import GoalStalled

    try:
        answer = wait()
    except GoalStalled as exc:
        if args.json:
            out.line(json_line({"session": sid, "outcome": "stalled", "error": str(exc)}))
            return EXIT_FAILED
        raise CliError(f"the goal run of {sid} stalled: {exc}") from None
    if args.json:
        out.line(json_line({"session": sid, "outcome": "converged", "text": answer}))
    else:
        out.line(answer)
    return 0


def wait_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    p.add_argument("--timeout", type=positive, default=None, metavar="S", help="give up after S")
    add_json(p)


def wait(args: argparse.Namespace, out: Out) -> int:
    sid = session_id(args.session)
    from ..host.goals import wait_goal

    with open_spine(args) as log:
        return _print_outcome(lambda: wait_goal(log, sid, args.timeout), sid, args, out)


def interrupt_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    add_json(p)


def interrupt(args: argparse.Namespace, out: Out) -> int:
    sid = session_id(args.session)
    with attach(args) as host:
        ack = host.interrupt(sid)
    if args.json:
        out.line(json_line({"seq": ack.seq}))
    else:
        out.line(f"interrupted at seq {ack.seq}" if ack.seq else "nothing to interrupt")
    return 0


def _call(text: str) -> int:
    if not text.isdigit() or int(text) <= 0:
        raise CliError(
            f"a call is a positive integer (as `vertebra pending` shows it), got {text!r}",
            EXIT_USAGE,
        )
    return int(text)


def decide_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    p.add_argument("call", metavar="CALL", help="the waiting action's call id")
    p.add_argument("--note", default="", help="why (stored with the decision)")
    add_json(p)


def _decide(args: argparse.Namespace, out: Out, approve: bool) -> int:
    sid = session_id(args.session)
    call = _call(args.call)
    with attach(args) as host:
        if approve:
            ack = host.approve(sid, call, note=args.note)
        else:
            ack = host.reject(sid, call, reason=args.note)
    word = "approved" if approve else "rejected"
    if args.json:
        out.line(
            json_line({"call": call, "decision": word, "seq": ack.seq, "duplicate": ack.duplicate})
        )
    elif ack.duplicate:
        out.line(f"action {call} was already {word}")
    else:
        out.line(f"action {call} {word} (seq {ack.seq})")
    return 0


def approve(args: argparse.Namespace, out: Out) -> int:
    return _decide(args, out, True)


def reject(args: argparse.Namespace, out: Out) -> int:
    return _decide(args, out, False)


def pending_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    add_json(p)


def pending(args: argparse.Namespace, out: Out) -> int:
    """The session's actions waiting for approval, read from the spine."""
    from ..host import pending_actions
    from ._reading_commands import json_value

    sid = session_id(args.session)
    with open_spine(args) as log:
        if not log.last_seq(sid):
            raise unknown_session(sid)
        waiting = pending_actions(log, sid)
    for ev in waiting:
        if args.json:
            out.line(
                json_line(
                    {
                        "call": ev.call,
                        "action": ev.action,
                        "turn": ev.turn,
                        "input": json_value(ev.input),
                    }
                )
            )
        else:
            out.line(f"{ev.call:>6}  {ev.action:<16} {ev.input}")
    if not waiting and not args.json:
        out.line("no action waits for approval")
    return 0


def chat_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", nargs="?", metavar="SESSION", help="the session (default: a new one)")
    p.add_argument("--create", action="store_true", help="create SESSION if it is new")


def chat(args: argparse.Namespace, out: Out) -> int:
    from ._chat import run_chat

    sid = None if args.session is None else session_id(args.session)
    with attach(args) as host:
        return run_chat(host, sid, create=args.create, out=out, data=args.data)


__all__ = [
    "approve",
    "chat",
    "chat_args",
    "close",
    "close_args",
    "decide_args",
    "interrupt",
    "interrupt_args",
    "new",
    "new_args",
    "pending",
    "pending_args",
    "reject",
    "send",
    "send_args",
    "submit",
    "submit_args",
    "wait",
    "wait_args",
]
