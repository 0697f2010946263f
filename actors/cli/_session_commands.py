"""The commands that work with sessions through the daemon: create, send, interrupt,
approve or reject a waiting action, close, and chat (goal runs: `_goal_commands`)."""

from __future__ import annotations

import argparse
import contextlib
import queue
import threading
import time
from typing import Any

from ._access import add_json, attach, open_spine, payload_line, session_id, unknown_session
from ._daemon import (
    EXIT_NO_DAEMON,
    EXIT_USAGE,
    CliError,
    alive,
    read_daemon,
    start_hint,
)
from ._format import event_line, json_line, parse_meta
from ._output import Out
from ._parser import positive

ASSISTANT_DELTA = "assistant.delta"


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
    p.add_argument(
        "--steer",
        action="store_true",
        help="hand it to the running turn at its next safe point (else a plain message)",
    )
    p.add_argument("--no-wait", dest="wait", action="store_false", help="do not wait for the turn")
    p.add_argument("--timeout", type=positive, default=60.0, metavar="S", help="turn timeout")
    p.add_argument(
        "--key",
        default=None,
        metavar="KEY",
        help="idempotency key: a retry with the same key is stored once (and its turn shown)",
    )
    add_json(p)


#: How often a send waiting for its turn looks whether the daemon still runs.
DAEMON_CHECK = 0.05


def send(args: argparse.Namespace, out: Out) -> int:
    """Send, print the notices, then follow the turn (its answer streams in) until it
    ends: exit 1 if the turn failed or was cancelled or a slash command answered an error,
    3 at once if the daemon goes away meanwhile."""
    sid = session_id(args.session)
    from ..errors import SessionAlreadyExists

    if args.key is not None and not args.key.strip():
        raise CliError("--key must not be empty", EXIT_USAGE)
    pid = read_daemon(args.data).pid
    with attach(args) as host:
        if args.create:
            with contextlib.suppress(SessionAlreadyExists):
                host.create(sid)
        stream = _DeltaPrinter(out, sid) if args.wait and not args.json else None
        if stream is not None:
            host.add_sink(stream.on_live, kinds=(ASSISTANT_DELTA,))
        ack = host.send(sid, args.text, key=args.key, mode="steer" if args.steer else "")
        if args.json:
            fields = {"seq": ack.seq, "consumed": ack.consumed, "notices": list(ack.notices)}
            out.line(json_line({**fields, "duplicate": ack.duplicate}))
        else:
            for severity, text in ack.notices:
                out.line(f"[{severity}] {text}")
            if ack.duplicate:
                out.note(f"already stored at seq {ack.seq} (key {args.key!r}): not sent again")
        errors = [text for severity, text in ack.notices if severity == "error"]
        if errors:
            raise CliError(f"{sid} answered: {errors[0]}")
        if ack.consumed or not args.wait:
            if not args.json:
                out.line(f"stored at seq {ack.seq}" if ack.seq else "nothing stored")
            return 0
        ended = _follow_turn(host, sid, ack.seq, pid, args, out, stream)
    if ended.kind == "turn.cancelled":
        raise CliError(f"the turn in {sid} was cancelled ({ended.reason or 'interrupted'})")
    if ended.error:
        raise CliError(f"the turn in {sid} failed: {ended.error}")
    return 0


def _follow_turn(
    host: Any,
    sid: str,
    after: int,
    pid: int,
    args: argparse.Namespace,
    out: Out,
    stream: _DeltaPrinter | None,
) -> Any:
    """Print the turn after seq ``after`` as it is stored; its ending event."""
    with host.subscribe(sid, after) as sub:
        deadline = time.monotonic() + args.timeout
        while (left := deadline - time.monotonic()) > 0:
            if stream is not None:
                stream.flush()
            rec = sub.get_record(min(left, DAEMON_CHECK))
            if rec is None:
                if sub.closed:
                    raise CliError(f"session {sid!r} closed before its turn ended")
                if not alive(pid):
                    raise CliError(
                        f"the daemon of {args.data!r} (pid {pid}) is gone while the turn ran "
                        f"(the message is stored at seq {after}): {start_hint(args.data)}",
                        EXIT_NO_DAEMON,
                    )
                continue
            if args.json:
                out.line(payload_line(rec.payload))
            else:
                ev = rec.event()
                if stream is None or not stream.stored(ev):
                    out.line(event_line(ev, out.style, sid))
            if rec.kind in ("turn.completed", "turn.cancelled"):
                return rec.event()
    raise CliError(f"no turn ended in {sid} within {args.timeout:g}s")


class _DeltaPrinter:
    """The answer's text as the daemon streams it (a sink), printed by the sending thread;
    once the message is stored only what did not stream is printed."""

    def __init__(self, out: Out, sid: str) -> None:
        self.out = out
        self.sid = sid
        self.deltas: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.streamed = ""
        #: Deltas count until the message they stream is stored, again after a tool call.
        self.streaming = threading.Event()
        self.streaming.set()

    def on_live(self, sid: str, ev: Any, live: Any) -> None:
        # The sink pump's thread: only hand over.
        if sid == self.sid and live is not None and self.streaming.is_set():
            self.deltas.put(live[2])

    def flush(self, drop: bool = False) -> None:
        while True:
            try:
                text = self.deltas.get_nowait()
            except queue.Empty:
                return
            if not drop and self.streaming.is_set():
                if not self.streamed:
                    self.out.stdout.write(self.out.style.paint("green", "assistant> "))
                self.streamed += text
                self.out.stdout.write(text)
                self.out.stdout.flush()

    def stored(self, ev: Any) -> bool:
        """Take a stored event into account; True when the streamed text showed it."""
        if ev.kind == "assistant.message":
            self.flush()
            self.streaming.clear()
            shown, self.streamed = self.streamed, ""
            if shown and ev.text.startswith(shown):
                self.out.line(ev.text[len(shown) :])
                return True
            if shown:
                self.out.line()
        elif ev.kind in ("tool.call", "tool.result"):
            self.flush(drop=True)
            self.streaming.set()
        elif ev.kind in ("turn.completed", "turn.cancelled"):
            self.flush()
            if self.streamed:
                self.out.line()
            self.streamed = ""
        return False


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


def parse_call(text: str) -> int:
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
    call = parse_call(args.call)
    with attach(args) as host:
        if approve:
            ack = host.approve(sid, call, args.note, raise_by=args.raise_by, content=args.answer)
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


IN_DOUBT_NOTE = "  (in doubt: it may have run; approve runs it again, resolve gives its result)"


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
            doubt = IN_DOUBT_NOTE if ev.reason == "in_doubt" else ""
            out.line(f"{ev.call:>6}  {ev.action:<16} {ev.input}{doubt}")
    if not waiting and not args.json:
        out.line("no action waits for approval")
    return 0


def chat_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", nargs="?", metavar="SESSION", help="the session (default: a new one)")
    p.add_argument("--create", action="store_true", help="create SESSION if it is new")
    p.add_argument("--steer", action="store_true", help="a line typed while a turn runs steers it")


def chat(args: argparse.Namespace, out: Out) -> int:
    import signal

    from ._chat import run_chat

    # A chat started where SIGINT is ignored (a background job of a script, nohup)
    # inherits that, and Ctrl-C at the prompt would do nothing: it always interrupts.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    sid = None if args.session is None else session_id(args.session)
    with attach(args) as host:
        mode = "steer" if args.steer else ""
        return run_chat(host, sid, create=args.create, out=out, data=args.data, busy_mode=mode)


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
    "parse_call",
    "pending",
    "pending_args",
    "reject",
    "send",
    "send_args",
]
