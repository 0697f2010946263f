"""The commands that shape a conversation through the daemon: regenerate an answer, edit
a past message, list and switch branches, fork a session at a seq, replay it on another
model. (A steer is ``vertebra send --steer``.)"""

from __future__ import annotations

import argparse
from typing import Any

from ._access import add_json, attach, session_id
from ._daemon import EXIT_USAGE, CliError, read_daemon
from ._format import json_line, parse_meta
from ._output import Out
from ._parser import positive, seq_number


def _follow(host: Any, sid: str, ack: Any, args: argparse.Namespace, out: Out) -> int:
    from ._session_commands import _follow_turn

    if args.json:
        out.line(json_line({"seq": ack.seq, "duplicate": ack.duplicate}))
    if not args.wait:
        if not args.json:
            out.line(f"stored at seq {ack.seq}")
        return 0
    ended = _follow_turn(host, sid, ack.seq, args.pid, args, out, None)
    if ended.kind == "turn.cancelled" or ended.error:
        raise CliError(f"the turn in {sid} ended without an answer: {ended.error or ended.reason}")
    return 0


def _meta(items: list[str]) -> dict[str, str]:
    try:
        return parse_meta(items)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def _turn_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-wait", dest="wait", action="store_false", help="do not wait for the turn")
    p.add_argument("--timeout", type=positive, default=60.0, metavar="S", help="turn timeout")
    p.add_argument("--key", default=None, metavar="KEY", help="idempotency key")
    add_json(p)


def regenerate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    p.add_argument(
        "seq", nargs="?", type=seq_number, default=None, metavar="SEQ",
        help="the user message to answer again (default: the latest on the active path)",
    )  # fmt: skip
    _turn_options(p)


def regenerate(args: argparse.Namespace, out: Out) -> int:
    sid = session_id(args.session)
    args.pid = read_daemon(args.data).pid
    with attach(args) as host:
        return _follow(host, sid, host.regenerate(sid, args.seq, key=args.key), args, out)


def edit_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    p.add_argument("seq", type=seq_number, metavar="SEQ", help="the past user message's seq")
    p.add_argument("text", metavar="TEXT", help="the message's new text")
    _turn_options(p)


def edit(args: argparse.Namespace, out: Out) -> int:
    sid = session_id(args.session)
    args.pid = read_daemon(args.data).pid
    with attach(args) as host:
        return _follow(host, sid, host.edit(sid, args.seq, args.text, key=args.key), args, out)


def branches_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    add_json(p)


def branches(args: argparse.Namespace, out: Out) -> int:
    sid = session_id(args.session)
    with attach(args) as host:
        listed = host.branches(sid)
    for b in listed:
        if args.json:
            fields = {"leaf": b.leaf, "path": list(b.path), "fork": b.fork, "active": b.active}
            out.line(json_line({**fields, "text": b.text, "reply": b.reply}))
        else:
            mark = "*" if b.active else " "
            path = " > ".join(str(t) for t in b.path)
            out.line(f"{mark} {b.leaf:>6}  {path}  {b.text[:40]!r} -> {b.reply[:40]!r}")
    return 0


def switch_branch_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    p.add_argument("turn", type=seq_number, metavar="SEQ", help="a turn's user message seq")
    add_json(p)


def switch_branch(args: argparse.Namespace, out: Out) -> int:
    sid = session_id(args.session)
    with attach(args) as host:
        ack = host.switch_branch(sid, args.turn)
    out.line(json_line({"seq": ack.seq}) if args.json else f"switched at seq {ack.seq}")
    return 0


def fork_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    p.add_argument("--at", type=seq_number, default=None, metavar="SEQ", help="fork point")
    p.add_argument("--id", dest="new_id", default=None, metavar="NEW", help="the fork's id")
    p.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE")
    add_json(p)


def fork(args: argparse.Namespace, out: Out) -> int:
    sid = session_id(args.session)
    new_id = session_id(args.new_id) if args.new_id else None
    meta = _meta(args.meta)
    with attach(args) as host:
        child = host.fork(sid, args.at, new_id=new_id, metadata=meta)
        info = host.get(child)
    at = info.metadata.get("fork.seq", "")
    if args.json:
        out.line(json_line({"session": child, "parent": sid, "at": int(at or 0)}))
    else:
        out.line(f"forked {sid} at seq {at} into {child}")
    return 0


def replay_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    p.add_argument("--at", type=seq_number, default=None, metavar="SEQ", help="replay after SEQ")
    p.add_argument("--provider", default=None, help="ore.model.provider for the replay")
    p.add_argument("--model", default=None, help="ore.model.name for the replay")
    p.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--id", dest="new_id", default=None, metavar="NEW", help="the copy's id")
    p.add_argument("--timeout", type=positive, default=60.0, metavar="S", help="turn timeout")
    add_json(p)


def replay(args: argparse.Namespace, out: Out) -> int:
    sid = session_id(args.session)
    meta = _meta(args.meta)
    if args.provider:
        meta["ore.model.provider"] = args.provider
    if args.model:
        meta["ore.model.name"] = args.model
    with attach(args) as host:
        done = host.replay(sid, at=args.at, metadata=meta, new_id=args.new_id, timeout=args.timeout)
    for t in done.turns:
        if args.json:
            out.line(json_line({"parentSeq": t.parent_seq, "seq": t.seq, "same": t.same,
                                "reply": t.reply, "parentReply": t.parent_reply,
                                "calls": [list(c) for c in t.calls],
                                "parentCalls": [list(c) for c in t.parent_calls],
                                "results": [list(r) for r in t.results],
                                "parentResults": [list(r) for r in t.parent_results]}))  # fmt: skip
        else:
            out.line(f"{'=' if t.same else '!'} {t.parent_seq:>6} {t.text[:40]!r} -> {t.reply!r}")
            if t.calls != t.parent_calls:
                out.line(f"         tools {t.parent_calls} -> {t.calls}")
            elif t.results != t.parent_results:
                out.line(f"         results {t.parent_results} -> {t.results}")
    where = f"diverges at seq {done.diverged_at}" if done.diverged_at else "same answers"
    if not args.json:
        out.line(f"replayed {sid} into {done.session_id}: {where}, tokens {done.tokens_delta:+d}")
    return 0
