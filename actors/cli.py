"""The ``vertebra`` command line: the daemon, a client that attaches to it, and a demo.

The daemon records its admin port in the data directory, and clients read it from there,
so a client never guesses a port (and never silently starts a second actor system).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from spine import Event, Kind, SqliteLog, StorageError, history, subscribe

from .errors import ActorsError
from .host import Host

DAEMON_FILE = "daemon.json"


def _line(sid: str, ev: Event) -> str:
    detail = ev.text or ev.reason or ev.error or ev.stop_reason or ev.phase or ev.session
    if ev.properties:
        detail = ", ".join(f"{k}={v}" for k, v in ev.properties.items())
    if ev.kind == Kind.TOOL_CALL:
        detail = f"{ev.tool} {ev.input}"
    if ev.usage is not None:
        detail += f"  [in {ev.usage.input_tokens} / out {ev.usage.output_tokens} tokens]"
    return f"{sid} #{ev.seq:<5} {ev.kind:<20} {detail}"


def _daemon_port(data: str) -> int:
    path = os.path.join(data, DAEMON_FILE)
    try:
        with open(path) as f:
            info = json.load(f)
    except FileNotFoundError:
        raise SystemExit(f"no daemon runs on {data!r}: start one with `vertebra serve`") from None
    pid = int(info["pid"])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        raise SystemExit(f"the daemon of {data!r} (pid {pid}) is gone; start it again") from None
    return int(info["admin_port"])


def _attach(args: argparse.Namespace) -> Host:
    return Host(args.data, attach=True, admin_port=_daemon_port(args.data))


# -- commands -----------------------------------------------------------------------------


def _start_http(args: argparse.Namespace, host: Host) -> Any:
    """The HTTP gateway for ``serve --http ADDR`` (None without it); prints its URL."""
    if args.http is None:
        return None
    try:
        from .gateway import GatewayError, start_gateway
    except ImportError as exc:
        raise SystemExit(
            f"--http needs the http extra (pip install 'vertebra[http]'): {exc}"
        ) from None
    try:
        gw = start_gateway(args.data, args.http, allow_remote=args.http_allow_remote, host=host)
    except GatewayError as exc:
        raise SystemExit(f"vertebra: {exc}") from None
    print(f"vertebra http: {gw.url}  token {gw.token}", flush=True)
    print(f"vertebra http: open {gw.page_url}", flush=True)
    return gw


def _token_create(args: argparse.Namespace) -> int:
    """Mint a bearer token limited to the given sessions (read-only if asked)."""
    from .gateway._tokens import create_token

    print(create_token(args.data, args.session, read_only=args.read_only))
    return 0


def _token_commands(sub: Any) -> None:
    p = sub.add_parser("token", help="mint HTTP tokens")
    tsub = p.add_subparsers(dest="token_command", required=True)
    c = tsub.add_parser("create", help="a token scoped to sessions (printed once)")
    c.add_argument("--session", action="append", required=True, help="a session (repeatable)")
    c.add_argument("--read-only", action="store_true", help="may read but not write")
    c.set_defaults(func=_token_create)


def _serve(args: argparse.Namespace) -> int:
    """Run the daemon until SIGINT or SIGTERM, printing every session's events."""
    os.makedirs(args.data, exist_ok=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    host = Host(args.data, admin_port=args.port, idle_timeout=args.idle_timeout)
    gateway = None
    info_path = os.path.join(args.data, DAEMON_FILE)
    try:
        tmp_path = info_path + ".tmp"
        with open(tmp_path, "w") as f:
            json.dump(
                {
                    "pid": os.getpid(),
                    "admin_port": host.admin_port,
                    "system_session": host.system_session,
                },
                f,
            )
        # Clients must never see a half-written file.
        os.replace(tmp_path, info_path)
        if not args.quiet:
            host.add_sink(lambda sid, ev, live: print(_line(sid, ev), flush=True) if ev else None)
        gateway = _start_http(args, host)
        print(
            f"vertebra daemon: data {args.data}, admin port {host.admin_port} (loopback); "
            "stop with Ctrl-C",
            flush=True,
        )
        if args.for_seconds is not None:
            stop.wait(args.for_seconds)
        else:
            while not stop.is_set():
                stop.wait(1.0)
    finally:
        try:
            os.unlink(info_path)
        except FileNotFoundError:
            pass
        if gateway is not None:
            gateway.stop()
        host.close()
    print("vertebra daemon: stopped", flush=True)
    return 0


def _send(args: argparse.Namespace) -> int:
    host = _attach(args)
    try:
        if args.create:
            try:
                host.create(args.session)
            except ActorsError as exc:
                if type(exc).__name__ != "SessionAlreadyExists":
                    raise
        ack = host.send(args.session, args.text)
        for severity, text in ack.notices:
            print(f"[{severity}] {text}")
        if ack.consumed or not args.wait:
            print(f"stored at seq {ack.seq}" if ack.seq else "nothing stored")
            return 0
        ended = host.wait_turn(args.session, ack.seq, timeout=args.timeout)
        for ev in host.history(args.session)[ack.seq :]:
            if ev.seq > ended.seq:
                break
            print(_line(args.session, ev))
        return 0
    finally:
        host.close()


def _sessions(args: argparse.Namespace) -> int:
    host = _attach(args)
    try:
        for info in host.sessions():
            print(f"{info.session_id:<40} {info.state:<11} seq {info.last_seq}")
        return 0
    finally:
        host.close()


def _interrupt(args: argparse.Namespace) -> int:
    host = _attach(args)
    try:
        ack = host.interrupt(args.session)
        print(f"interrupted at seq {ack.seq}" if ack.seq else "nothing to interrupt")
        return 0
    finally:
        host.close()


def _seal(args: argparse.Namespace) -> int:
    """Seal a session through the daemon (the session appends the seal itself)."""
    host = _attach(args)
    try:
        r = host.seal(args.session)
        if r.seq == 0:
            print("nothing new to seal")
        else:
            print(f"sealed seqs {r.first}..{r.last} at seq {r.seq}: root {r.root}, key {r.key_id}")
        return 0
    finally:
        host.close()


def _verify(args: argparse.Namespace) -> int:
    host = _attach(args)
    try:
        r = host.verify(args.session)
        print(r.summary)
        return 0 if r.ok else 1
    finally:
        host.close()


def _open_log(args: argparse.Namespace) -> SqliteLog:
    path = os.path.join(args.data, "spine.db")
    if not os.path.exists(path):
        raise SystemExit(f"no spine at {path!r}")
    return SqliteLog(path)


def _history(args: argparse.Namespace) -> int:
    with _open_log(args) as log:
        evs = history(log, args.session)
        if not evs:
            print(f"no events for session {args.session!r}", file=sys.stderr)
            return 1
        for ev in evs:
            print(_line(args.session, ev))
    return 0


def _tail(args: argparse.Namespace) -> int:
    """Follow a session from a seq, live, until interrupted."""
    with _open_log(args) as log, subscribe(log, args.session, args.after) as sub:
        deadline = None if args.for_seconds is None else time.monotonic() + args.for_seconds
        try:
            while deadline is None or time.monotonic() < deadline:
                ev = sub.get(0.5)
                if ev is not None:
                    print(_line(args.session, ev), flush=True)
        except KeyboardInterrupt:
            pass
    return 0


def _status(args: argparse.Namespace) -> int:
    from projections import project

    with _open_log(args) as log:
        p = project(history(log, args.session))
    out: dict[str, Any] = {}
    for k in ("objective", "result", "turns", "record", "terminal", "error"):
        if hasattr(p, k):
            out[k] = getattr(p, k)
    u = getattr(p, "usage", None)
    if u is not None:
        out["usage"] = {"input": u.input_tokens, "output": u.output_tokens}
    print(json.dumps(out, indent=2, default=str))
    return 0


def _demo(args: argparse.Namespace) -> int:
    """A conversation on the full runtime: sessions in their own processes, a slash command,
    a streamed turn cut off by an interrupt, and a session killed and brought back."""
    os.makedirs(args.data, exist_ok=True)
    host = Host(args.data)
    try:
        sid = host.create(metadata={"objective": "show the runtime"})
        print(f"session {sid} (its own process, pid {host.session_pid(sid)})")

        def say(text: str) -> None:
            print(f"\n> {text}")
            ack = host.send(sid, text)
            for severity, notice in ack.notices:
                print(f"  [{severity}] {notice}")
            if not ack.consumed:
                ended = host.wait_turn(sid, ack.seq)
                for ev in host.history(sid)[ack.seq : ended.seq]:
                    print("  " + _line(sid, ev))

        say("/model scripted-large")
        say("What is the spine?")
        say('!tool search {"q": "event sourcing"}')
        print("\n> !slow 0.05 a long answer that the user cuts off halfway through")
        ack = host.send(sid, "!slow 0.05 a long answer that the user cuts off halfway through")
        with host.subscribe(sid, ack.seq, kinds=[Kind.TURN_STARTED]) as sub:
            sub.get(10)
        time.sleep(0.3)  # let some of the answer stream before the user interrupts
        host.interrupt(sid, reason="user pressed stop")
        ended = host.wait_turn(sid, ack.seq)
        print("  " + _line(sid, ended))

        pid = host.session_pid(sid)
        os.kill(pid, signal.SIGKILL)
        print(f"\nkilled the session's process (pid {pid}) with SIGKILL")
        say("Are you still there?")
        print(f"back in pid {host.session_pid(sid)}, restarts: {host.get(sid).restarts}")
        evs = host.history(sid)
        gapless = [e.seq for e in evs] == list(range(1, len(evs) + 1))
        print(f"\n{len(evs)} events in {sid}, seqs gapless: {gapless}, data in {args.data}")
    finally:
        host.close()
    return 0


def _daemon_commands(sub: Any) -> None:
    p = sub.add_parser("demo", help="run a short conversation on the full runtime")
    p.set_defaults(func=_demo)

    p = sub.add_parser("serve", help="run the daemon (SQLite spine, scripted model)")
    p.add_argument("--port", type=int, default=None, help="admin port (default: a free one)")
    p.add_argument("--idle-timeout", type=float, default=300.0, help="passivate after seconds")
    p.add_argument("--quiet", action="store_true", help="do not print events")
    p.add_argument("--for-seconds", type=float, default=None, help=argparse.SUPPRESS)
    p.add_argument("--http", metavar="ADDR", default=None, help="serve HTTP on HOST:PORT")
    p.add_argument(
        "--http-allow-remote", action="store_true", help="allow a non-loopback --http address"
    )
    p.set_defaults(func=_serve)

    p = sub.add_parser("send", help="send a message to a session of the running daemon")
    p.add_argument("session")
    p.add_argument("text")
    p.add_argument("--create", action="store_true", help="create the session if needed")
    p.add_argument("--no-wait", dest="wait", action="store_false", help="do not wait for the turn")
    p.add_argument("--timeout", type=float, default=60.0)
    p.set_defaults(func=_send)

    p = sub.add_parser("interrupt", help="interrupt a session's running turn")
    p.add_argument("session")
    p.set_defaults(func=_interrupt)

    p = sub.add_parser("sessions", help="list the daemon's sessions")
    p.set_defaults(func=_sessions)


def _session_commands(sub: Any) -> None:
    for name, text, func in (
        ("seal", "seal what is new in a session (signed Merkle root)", _seal),
        ("verify", "verify a session's seals (exit 1 if tampered)", _verify),
        ("history", "print a session's stored events", _history),
        ("status", "print a session's status projection", _status),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("session")
        p.set_defaults(func=func)

    p = sub.add_parser("tail", help="follow a session's events live")
    p.add_argument("session")
    p.add_argument("--after", type=int, default=0, help="start after this seq")
    p.add_argument("--for-seconds", type=float, default=None)
    p.set_defaults(func=_tail)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vertebra", description=__doc__)
    parser.add_argument("--data", default="vertebra-data", help="data directory")
    sub = parser.add_subparsers(dest="command")
    _daemon_commands(sub)
    _session_commands(sub)
    _token_commands(sub)
    args = parser.parse_args(argv)
    if args.command is None:
        args.func = _demo
    try:
        return int(args.func(args))
    except (ActorsError, StorageError) as exc:
        print(f"vertebra: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
