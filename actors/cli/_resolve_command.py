"""``vertebra resolve``: a human gives an in-doubt call's result by hand."""

from __future__ import annotations

import argparse

from ._access import attach, session_id
from ._format import json_line
from ._output import Out
from ._session_commands import decide_args, parse_call

__all__ = ["resolve", "resolve_args"]


def resolve_args(p: argparse.ArgumentParser) -> None:
    decide_args(p)
    p.add_argument(
        "--result", required=True, help="the call's outcome, as its tool would have said it"
    )
    p.add_argument("--error", action="store_true", help="the outcome was an error")


def resolve(args: argparse.Namespace, out: Out) -> int:
    sid = session_id(args.session)
    call = parse_call(args.call)
    with attach(args) as host:
        ack = host.resolve(sid, call, args.result, note=args.note, is_error=args.error)
    if args.json:
        out.line(
            json_line(
                {"call": call, "decision": "resolved", "seq": ack.seq, "duplicate": ack.duplicate}
            )
        )
    elif ack.duplicate:
        out.line(f"action {call} was already resolved")
    else:
        out.line(f"action {call} resolved by hand (seq {ack.seq}); its turn goes on")
    return 0
