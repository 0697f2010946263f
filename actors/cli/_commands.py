"""The commands: one function declaring a command's arguments, one running it, and the
table (`COMMANDS`) that lists them.

Adding a command is a pair of functions and a row; adding an option is a line in the
command's ``*_args`` function. Runtime imports happen inside the ``run`` functions, so
building the parser (``vertebra --help``) imports none of them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any

from .._version import __version__
from ._daemon import (
    EXIT_FAILED,
    EXIT_UNKNOWN_SESSION,
    EXIT_USAGE,
    CliError,
    DaemonInfo,
    acquire_lock,
    alive,
    read_daemon,
    remove_daemon,
    start_hint,
    wait_stopped,
    write_daemon,
)
from ._format import (
    Rate,
    Style,
    event_line,
    fanout_tree,
    json_line,
    parse_kinds,
    parse_meta,
    progress_line,
    table,
)
from ._parser import Command, positive, seq_number, tcp_port

if TYPE_CHECKING:
    from spine import Log

    from ..host import Host


class Out:
    """Where a command writes: data to stdout, progress and errors to stderr."""

    def __init__(self, style: Style, stdout: IO[str], stderr: IO[str]) -> None:
        self.style = style
        self.stdout = stdout
        self.stderr = stderr

    def line(self, text: str = "") -> None:
        print(text, file=self.stdout, flush=True)

    def note(self, text: str) -> None:
        print(text, file=self.stderr, flush=True)


# -- shared pieces -----------------------------------------------------------------------


def _session_id(text: str) -> str:
    """The id, checked before anything connects: a bad one is a usage error."""
    from spine import validate_session_id

    try:
        validate_session_id(text)
    except ValueError as exc:
        problem = getattr(exc, "problem", None) or str(exc)
        raise CliError(f"bad session id {text!r}: {problem}", EXIT_USAGE) from None
    return text


@contextlib.contextmanager
def _attach(args: argparse.Namespace) -> Iterator[Host]:
    """A Host joined to the running daemon, released (the daemon keeps running) after."""
    info = read_daemon(args.data)
    from ..host import Host

    host = Host(args.data, attach=True, admin_port=info.admin_port, spine=info.spine or None)
    try:
        yield host
    finally:
        host.close()


def _spine_file(data: str) -> str:
    return os.path.join(data, "spine.db")


def _spine_url(args: argparse.Namespace) -> str:
    """The spine named by --spine, else the one the data directory's daemon recorded
    (empty: the data directory's SQLite file)."""
    url = getattr(args, "spine", None) or ""
    if not url:
        try:
            with open(os.path.join(args.data, "daemon.json")) as f:
                url = str(json.load(f).get("spine", ""))
        except (OSError, ValueError, AttributeError):
            url = ""
    return url


def _log_at(args: argparse.Namespace) -> Log:
    from spine import LogSpec, open_log

    url = _spine_url(args)
    if url:
        try:
            return open_log(LogSpec.parse(url))
        except ValueError as exc:
            raise CliError(f"bad --spine {url!r}: {exc}", EXIT_USAGE) from None
    return open_log(LogSpec.sqlite(_spine_file(args.data)))


@contextlib.contextmanager
def _open_log(args: argparse.Namespace) -> Iterator[Log]:
    """The spine of the data directory, read directly (no daemon needed)."""
    if not _spine_url(args) and not os.path.exists(_spine_file(args.data)):
        raise CliError(
            f"no spine in {args.data!r} (nothing stored there yet): {start_hint(args.data)}"
        )
    log = _log_at(args)
    try:
        yield log
    finally:
        log.close()


def _unknown(sid: str) -> CliError:
    return CliError(f"unknown session {sid!r}", EXIT_UNKNOWN_SESSION)


def _add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output (JSON)")


def _payload_line(payload: bytes) -> str:
    # The stored bytes are the event's JSON, seq and time included: printed as they are.
    return payload.decode("utf-8")


# -- serve, stop, demo ---------------------------------------------------------------------


#: `actors.policy.DAEMON_SEAL_POLICY`, spelled out so that `--help` imports no attrs (a
#: test keeps the two equal).
SEAL_EVERY = 1000
SEAL_INTERVAL = 60.0


def serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=tcp_port, default=None, help="admin port (default: a free one)")
    p.add_argument(
        "--idle-timeout",
        type=positive,
        default=300.0,
        metavar="S",
        help="passivate a session idle for S seconds (default 300)",
    )
    p.add_argument(
        "--seal-every",
        type=int,
        default=SEAL_EVERY,
        metavar="N",
        help=f"sessions seal themselves every N events (default {SEAL_EVERY}; 0: not by count)",
    )
    p.add_argument(
        "--seal-interval",
        type=float,
        default=SEAL_INTERVAL,
        metavar="S",
        help="and within S seconds of the first unsealed event "
        f"(default {SEAL_INTERVAL:g}; 0: not by time)",
    )
    p.add_argument("--quiet", action="store_true", help="do not print events")
    p.add_argument("--for-seconds", type=positive, default=None, help=argparse.SUPPRESS)
    p.add_argument(
        "--http", metavar="ADDR", default=None, help="also serve HTTP + SSE on HOST:PORT"
    )
    p.add_argument(
        "--http-allow-remote", action="store_true", help="allow a non-loopback --http address"
    )
    p.add_argument(
        "--resume-goals",
        action="store_true",
        help="resume the goal runs a previous daemon left in flight (reads every stream)",
    )
    p.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="json: every line printed and logged is one JSON object (session, seq, kind)",
    )
    p.add_argument(
        "--log-level",
        default=None,
        metavar="LEVEL",
        help="level of DATA/vertebra.log, Thespian's records included (default WARNING)",
    )
    p.add_argument(
        "--otlp-endpoint",
        default=None,
        metavar="URL",
        help="export spans live over OTLP/HTTP (e.g. http://127.0.0.1:4318/v1/traces; "
        "needs the otel extra)",
    )
    hosts = p.add_argument_group("several hosts (a PostgreSQL --spine shared by all)")
    role = hosts.add_mutually_exclusive_group()
    role.add_argument(
        "--convention-leader",
        action="store_true",
        help="lead a convention: run the Runner and projections, place sessions on members",
    )
    role.add_argument(
        "--join", metavar="ADDR:PORT", default=None, help="join the leader's convention as a member"
    )
    hosts.add_argument(
        "--host-name", default=None, metavar="NAME", help="this member's name (with --join)"
    )
    hosts.add_argument(
        "--capacity",
        type=int,
        default=None,
        metavar="N",
        help="sessions this member should carry (with --join; default 10)",
    )
    hosts.add_argument(
        "--bind",
        default=None,
        metavar="ADDR",
        help="the one private address every listener binds (default 127.0.0.1)",
    )


def _start_otlp(args: argparse.Namespace, host: Any, out: Out) -> None:
    """The live span exporter for ``serve --otlp-endpoint URL``; it ends with the system."""
    if not getattr(args, "otlp_endpoint", None):
        return
    try:
        import opentelemetry.exporter.otlp.proto.http  # noqa: F401
    except ImportError as exc:
        raise CliError(
            f"--otlp-endpoint needs the otel extra (pip install 'vertebra[otel]'): {exc}",
            EXIT_USAGE,
        ) from None
    from ..otel import capture_content, start_trace_export

    spine = getattr(args, "spine", None) or ""
    start_trace_export(host, args.otlp_endpoint, capture_content=capture_content(), spine=spine)
    out.line(f"vertebra otel: exporting spans to {args.otlp_endpoint}")


def _start_http(args: argparse.Namespace, host: Any, out: Out) -> Any:
    """The HTTP gateway for ``serve --http ADDR`` (None without it); prints its URL."""
    if args.http is None:
        return None
    try:
        from ..gateway import GatewayError, start_gateway
    except ImportError as exc:
        raise CliError(
            f"--http needs the http extra (pip install 'vertebra[http]'): {exc}", EXIT_USAGE
        ) from None
    try:
        gw = start_gateway(args.data, args.http, allow_remote=args.http_allow_remote, host=host)
    except GatewayError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    out.line(f"vertebra http: {gw.url}  token {gw.token}")
    out.line(f"vertebra http: open {gw.page_url}")
    return gw


def token_args(p: argparse.ArgumentParser) -> None:
    tsub = p.add_subparsers(dest="token_command", required=True, metavar="create")
    c = tsub.add_parser("create", help="a token scoped to sessions (printed once)")
    c.add_argument("--session", action="append", required=True, help="a session (repeatable)")
    c.add_argument("--read-only", action="store_true", help="may read but not write")


def token(args: argparse.Namespace, out: Out) -> int:
    """Mint a bearer token limited to the given sessions (read-only if asked)."""
    from ..gateway._tokens import create_token

    out.line(create_token(args.data, args.session, read_only=args.read_only))
    return 0


class JsonOut(Out):
    """The daemon's output under ``--log-format json``: one JSON object per line."""

    def line(self, text: str = "") -> None:
        from ..logformat import json_record

        print(json_record("INFO", "vertebra.daemon", text), file=self.stdout, flush=True)

    def note(self, text: str) -> None:
        from ..logformat import json_record

        print(json_record("WARNING", "vertebra.daemon", text), file=self.stderr, flush=True)

    def event(self, sid: str, ev: Any, text: str) -> None:
        from ..logformat import json_record

        line = json_record(
            "INFO", "vertebra.events", text, session=sid, seq=ev.seq, kind=ev.kind, turn=ev.turn
        )
        print(line, file=self.stdout, flush=True)


def _log_setup(args: argparse.Namespace, out: Out) -> Out:
    """Select the log format and level for this process and the actor processes it starts
    (they read the environment), before the actor system exists."""
    import logging

    from ..logformat import FORMAT_ENV, LEVEL_ENV

    level = getattr(args, "log_level", None)
    if level:
        if not isinstance(logging.getLevelName(level.upper()), int):
            raise CliError(
                f"bad --log-level {level!r}: use DEBUG, INFO, WARNING or ERROR", EXIT_USAGE
            )
        os.environ[LEVEL_ENV] = level.upper()
    if getattr(args, "log_format", "text") != "json":
        return out
    os.environ[FORMAT_ENV] = "json"
    return JsonOut(Style(color=False), out.stdout, out.stderr)


def _cluster_role(args: argparse.Namespace) -> str:
    """ "leader", "member" or "" (a single host), after checking the options fit."""
    leader, join = getattr(args, "convention_leader", False), getattr(args, "join", None)
    if not leader and join is None:
        for opt in ("host_name", "capacity", "bind"):
            if getattr(args, opt, None) is not None:
                flag = "--" + opt.replace("_", "-")
                raise CliError(f"{flag} needs --convention-leader or --join", EXIT_USAGE)
        return ""
    spine = getattr(args, "spine", None) or ""
    if not spine.startswith(("postgresql://", "postgres://")):
        raise CliError(
            "several hosts share one PostgreSQL log: give --spine postgresql://...", EXIT_USAGE
        )
    if leader:
        for opt in ("host_name", "capacity"):
            if getattr(args, opt, None) is not None:
                flag = "--" + opt.replace("_", "-")
                raise CliError(f"{flag} is for a member (--join)", EXIT_USAGE)
        return "leader"
    if not args.host_name:
        raise CliError("a member needs --host-name NAME", EXIT_USAGE)
    if args.capacity is not None and args.capacity < 1:
        raise CliError(f"--capacity is at least 1, got {args.capacity}", EXIT_USAGE)
    return "member"


def _serve_member(args: argparse.Namespace, out: Out, stop: threading.Event) -> int:
    """A member host: an actor system in the leader's convention, until stopped."""
    from ..errors import InvalidRequest
    from ..host.member import MemberHost

    try:
        member = MemberHost(
            args.data,
            leader=args.join,
            name=args.host_name,
            capacity=args.capacity or 10,
            bind=args.bind or "127.0.0.1",
            admin_port=args.port,
            spine=getattr(args, "spine", None),
        )
    except InvalidRequest as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise CliError(f"the member could not start: {type(exc).__name__}: {first}") from None
    try:
        out.line(
            f"vertebra member {member.name} {__version__}: joined {args.join}, "
            f"admin port {member.admin_port} on {member.bind}; stop with Ctrl-C"
        )
        deadline = None if args.for_seconds is None else time.monotonic() + args.for_seconds
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            stop.wait(1.0 if deadline is None else min(1.0, deadline - time.monotonic()))
    finally:
        member.close()
    out.line("vertebra member: stopped")
    return 0


def serve(args: argparse.Namespace, out: Out) -> int:
    """Run the daemon until SIGINT, SIGTERM or `vertebra stop`, printing every event."""
    from spine import private_dir

    from ..policy import SealPolicy

    if args.seal_every < 0 or not 0 <= args.seal_interval < float("inf"):
        raise CliError("--seal-every and --seal-interval must be 0 or more", EXIT_USAGE)
    seal_policy = SealPolicy(every=args.seal_every, interval=args.seal_interval)
    role = _cluster_role(args)

    private_dir(args.data)
    # Held (by this process and, inherited, every actor process) until the last of them
    # exits: a second daemon on the directory is refused, a dead one's leftovers reaped.
    acquire_lock(args.data)
    # Holding the lock, any daemon.json here is a dead daemon's.
    remove_daemon(args.data)
    # Whatever the daemon and its actor processes create later (an extra's files
    # included) is owner-only too.
    os.umask(0o077)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    from ..host import Host

    out = _log_setup(args, out)
    if role == "member":
        return _serve_member(args, out, stop)
    spine = getattr(args, "spine", None) or None
    bind = None
    if role == "leader":
        from ..errors import InvalidRequest
        from ..host.member import check_address

        try:
            bind = check_address(args.bind or "127.0.0.1")
        except InvalidRequest as exc:
            raise CliError(str(exc), EXIT_USAGE) from None
    try:
        host = Host(
            args.data,
            admin_port=args.port,
            idle_timeout=args.idle_timeout,
            spine=spine,
            auto_seal=seal_policy,
            convention_bind=bind,
        )
    except (CliError, KeyboardInterrupt):
        raise
    except Exception as exc:
        # Whatever the actor system started dies with this process (its watchdog).
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise CliError(f"the daemon could not start: {type(exc).__name__}: {first}") from None
    gateway = None
    try:
        # Before the daemon file announces the daemon: no turn a client starts goes unseen.
        _start_otlp(args, host, out)
        write_daemon(
            args.data,
            DaemonInfo(
                pid=os.getpid(),
                admin_port=host.admin_port,
                version=__version__,
                system_session=host.system_session,
                spine=spine or "",
            ),
        )
        if not args.quiet:
            style = out.style

            def show(sid: str, ev: Any, live: Any) -> None:
                if ev is None:
                    return
                if isinstance(out, JsonOut):
                    out.event(sid, ev, event_line(ev, style))
                else:
                    out.line(event_line(ev, style, sid))

            host.add_sink(show)
        gateway = _start_http(args, host, out)
        if args.resume_goals:
            for sid in host.resume_all():
                out.line(f"resumed the goal run of {sid}")
        where = "loopback" if bind is None else f"convention leader on {bind}"
        out.line(
            f"vertebra daemon {__version__}: data {args.data}, admin port {host.admin_port} "
            f"({where}); stop with Ctrl-C or `vertebra stop`"
        )
        deadline = None if args.for_seconds is None else time.monotonic() + args.for_seconds
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            stop.wait(1.0 if deadline is None else min(1.0, deadline - time.monotonic()))
    finally:
        if gateway is not None:
            gateway.stop()
        host.close()
        # Last, once the actor system is down: `vertebra stop` waits for this.
        remove_daemon(args.data, pid=os.getpid())
    out.line("vertebra daemon: stopped")
    return 0


def stop_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--timeout", type=positive, default=60.0, metavar="S", help="give up after S seconds"
    )
    _add_json(p)


def stop(args: argparse.Namespace, out: Out) -> int:
    """Ask the daemon to shut down (SIGTERM) and wait until it has."""
    # Any version: stopping is how an old daemon is replaced.
    info = read_daemon(args.data, check_version=False)
    try:
        os.kill(info.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    if not wait_stopped(args.data, info.pid, args.timeout):
        raise CliError(f"the daemon (pid {info.pid}) did not stop within {args.timeout:g}s")
    if args.json:
        out.line(json_line({"stopped": info.pid}))
    else:
        out.line(f"stopped the daemon of {args.data} (pid {info.pid})")
    return 0


def demo_args(p: argparse.ArgumentParser) -> None:
    pass


def demo(args: argparse.Namespace, out: Out) -> int:
    from ._demo import run_demo

    return run_demo(args.data, out)


# -- sessions -----------------------------------------------------------------------------


def new_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", nargs="?", metavar="ID", help="the id (default: a fresh UUIDv7)")
    p.add_argument(
        "--meta",
        action="append",
        default=[],
        metavar="K=V",
        help="metadata to start with (repeatable), e.g. ore.model.name=scripted",
    )
    _add_json(p)


def new(args: argparse.Namespace, out: Out) -> int:
    sid = None if args.session is None else _session_id(args.session)
    try:
        meta = parse_meta(args.meta)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    with _attach(args) as host:
        sid = host.create(sid, metadata=meta)
    out.line(json_line({"session": sid}) if args.json else sid)
    return 0


def close_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    _add_json(p)


def close(args: argparse.Namespace, out: Out) -> int:
    sid = _session_id(args.session)
    with _attach(args) as host:
        host.get(sid)
        host.close_session(sid)
    out.line(json_line({"closed": sid}) if args.json else f"closed {sid}")
    return 0


def check_args(p: argparse.ArgumentParser) -> None:
    _add_json(p)


def check(args: argparse.Namespace, out: Out) -> int:
    """SQLite's integrity check on the spine file, then every session's seals, offline
    and read-only (no daemon needed, nothing appended); exit 1 if anything is wrong."""
    import sqlite3

    from spine import LogSpec, open_log
    from spine.seal import KeyStore, verify_stream

    if _spine_url(args):
        raise CliError("check reads a SQLite spine file; use the database's own tools")
    path = _spine_file(args.data)
    if not os.path.exists(path):
        raise CliError(f"no spine in {args.data!r} (nothing stored there yet)")
    try:
        c = sqlite3.connect(pathlib.Path(path).resolve().as_uri() + "?mode=ro", uri=True)
        try:
            integrity = [str(r[0]) for r in c.execute("PRAGMA integrity_check")]
        finally:
            c.close()
    except sqlite3.DatabaseError as exc:
        integrity = [str(exc)]
    bad = integrity != ["ok"]
    results: list[dict[str, Any]] = []
    if not bad:
        ring = KeyStore(os.path.join(args.data, "keys")).keyring()
        log = open_log(LogSpec.sqlite(path), read_only=True)
        try:
            for info in log.streams():
                report = verify_stream(log, info.stream, ring, append=False)
                unreadable = _first_unreadable(log, info.stream)
                # A session never sealed is not tampered: it has nothing to check yet.
                ok = report.ok or (not report.checks and unreadable is None)
                seq = report.problem.seq if report.problem else 0
                if unreadable is not None and not seq:
                    seq = unreadable[0]
                bad = bad or not ok
                results.append(
                    {
                        "session": info.stream,
                        "seals": len(report.checks),
                        "ok": ok,
                        "summary": report.summary(),
                        "seq": seq,
                        "unreadable": None if unreadable is None else unreadable[1],
                    }
                )
        finally:
            log.close()
    if args.json:
        out.line(json_line({"integrity": integrity, "sessions": results, "ok": not bad}))
    else:
        out.line("integrity: " + ("ok" if integrity == ["ok"] else "; ".join(integrity[:5])))
        for r in results:
            if r["ok"]:
                state = "ok" if r["seals"] else "unsealed"
            elif r["seals"] and r["seq"]:
                state = f"TAMPERED at seq {r['seq']}: {r['summary']}"
            else:
                state = f"UNREADABLE at seq {r['seq']}: {r['unreadable']}"
            out.line(f"{r['session']}: {r['seals']} seal(s), {state}")
            if r["unreadable"] and r["seals"]:
                out.line(f"{r['session']}: does not decode: {r['unreadable']}")
    return 1 if bad else 0


def _first_unreadable(log: Any, stream: str) -> tuple[int, str] | None:
    """The first stored row of ``stream`` that does not decode, with why (None: all do)."""
    from spine import DecodeError

    after = 0
    while page := log.read(stream, after, 2000):
        for r in page:
            try:
                r.event()
            except DecodeError as exc:
                return r.seq, str(exc)
        after = page[-1].seq
    return None


def recover_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("src", metavar="SRC", help="the damaged spine (a data directory or its file)")
    p.add_argument("dst", metavar="DST", help="the new spine file to write (must not exist)")
    _add_json(p)


def recover(args: argparse.Namespace, out: Out) -> int:
    """Copy every readable event of a damaged SQLite spine into a new one; exit 1 when
    something could not be read (each such row is named)."""
    from spine import InvalidArgumentError, StorageError, recover_sqlite

    src = _spine_file(args.src) if os.path.isdir(args.src) else args.src
    try:
        report = recover_sqlite(src, args.dst)
    except (InvalidArgumentError, StorageError, OSError) as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    if args.json:
        lost = [{"session": x.stream, "seq": x.seq, "problem": x.problem} for x in report.lost]
        out.line(
            json_line(
                {
                    "copied": report.copied,
                    "sessions": report.streams,
                    "lost": lost,
                    "unplaced": list(report.unplaced),
                }
            )
        )
    else:
        out.line(f"copied {report.copied} events of {report.streams} sessions into {args.dst}")
        for x in report.lost:
            out.line(f"could not read {x.stream} seq {x.seq}: {x.problem}")
        for u in report.unplaced:
            out.line(f"could not read {u}")
    return 0 if report.complete else EXIT_FAILED


def revive_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    p.add_argument("--reason", default="", help="why, recorded with the decision")
    _add_json(p)


def revive(args: argparse.Namespace, out: Out) -> int:
    """Bring back a session that failed past its restart budget."""
    sid = _session_id(args.session)
    with _attach(args) as host:
        seq = host.revive(sid, args.reason)
    out.line(json_line({"revived": sid, "seq": seq}) if args.json else f"revived {sid} (seq {seq})")
    return 0


def sessions_args(p: argparse.ArgumentParser) -> None:
    _add_json(p)


def sessions(args: argparse.Namespace, out: Out) -> int:
    with _attach(args) as host:
        infos = host.sessions()
    if args.json:
        for i in infos:
            d = {"session": i.session_id, "state": i.state, "seq": i.last_seq}
            out.line(json_line({**d, "error": i.error} if i.error else d))
        return 0
    rows = [
        (i.session_id, f"{i.state}: {i.error}" if i.error else i.state, i.last_seq) for i in infos
    ]
    for line in table(("SESSION", "STATE", "SEQ"), rows, out.style):
        out.line(line)
    return 0


def send_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    p.add_argument("text", metavar="TEXT", help="the message (a /slash command too)")
    p.add_argument("--create", action="store_true", help="create the session if it is new")
    p.add_argument("--no-wait", dest="wait", action="store_false", help="do not wait for the turn")
    p.add_argument("--timeout", type=positive, default=60.0, metavar="S", help="turn timeout")
    _add_json(p)


def send(args: argparse.Namespace, out: Out) -> int:
    sid = _session_id(args.session)
    from ..errors import SessionAlreadyExists

    with _attach(args) as host:
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
                    out.line(_payload_line(rec.payload))
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
    _add_json(p)


def submit(args: argparse.Namespace, out: Out) -> int:
    sid = _session_id(args.session)
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
    with _attach(args) as host:
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
    _add_json(p)


def wait(args: argparse.Namespace, out: Out) -> int:
    sid = _session_id(args.session)
    from ..host.goals import wait_goal

    with _open_log(args) as log:
        return _print_outcome(lambda: wait_goal(log, sid, args.timeout), sid, args, out)


def interrupt_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    _add_json(p)


def interrupt(args: argparse.Namespace, out: Out) -> int:
    sid = _session_id(args.session)
    with _attach(args) as host:
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
    _add_json(p)


def _decide(args: argparse.Namespace, out: Out, approve: bool) -> int:
    sid = _session_id(args.session)
    call = _call(args.call)
    with _attach(args) as host:
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
    _add_json(p)


def pending(args: argparse.Namespace, out: Out) -> int:
    """The session's actions waiting for approval, read from the spine."""
    from ..host import pending_actions

    sid = _session_id(args.session)
    with _open_log(args) as log:
        if not log.last_seq(sid):
            raise _unknown(sid)
        waiting = pending_actions(log, sid)
    for ev in waiting:
        if args.json:
            out.line(
                json_line(
                    {"call": ev.call, "action": ev.action, "turn": ev.turn, "input": ev.input}
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

    sid = None if args.session is None else _session_id(args.session)
    with _attach(args) as host:
        return run_chat(host, sid, create=args.create, out=out, data=args.data)


# -- reading the spine ----------------------------------------------------------------------


def history_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    _add_json(p)


def history(args: argparse.Namespace, out: Out) -> int:
    sid = _session_id(args.session)
    with _open_log(args) as log:
        after = 0
        while page := log.read(sid, after, 1000):
            for rec in page:
                out.line(
                    _payload_line(rec.payload) if args.json else event_line(rec.event(), out.style)
                )
            after = page[-1].seq
        if after == 0:
            raise _unknown(sid)
    return 0


def tail_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--from",
        dest="start",
        type=seq_number,
        default=1,
        metavar="SEQ",
        help="first seq to print (default 1)",
    )
    where.add_argument(
        "--after",
        dest="after",
        type=int,
        default=None,
        metavar="SEQ",
        help="print what comes after SEQ",
    )
    p.add_argument("--kinds", default=None, metavar="A,B", help="only these kinds")
    _add_json(p)
    p.add_argument("--for-seconds", type=positive, default=None, help=argparse.SUPPRESS)


def tail(args: argparse.Namespace, out: Out) -> int:
    """Follow a session: backlog then live, exactly once, until it closes or Ctrl-C.

    It reads the spine, not the daemon, so a daemon restart does not disturb it.
    """
    sid = _session_id(args.session)
    from spine import Kind

    try:
        kinds = None if args.kinds is None else parse_kinds(args.kinds, (k.value for k in Kind))
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    after = args.after if args.after is not None else args.start - 1
    if after < 0:
        raise CliError(f"--after takes a seq of 0 or more, got {after}", EXIT_USAGE)
    from ..host import SessionSubscription

    with _open_log(args) as log:
        if log.last_seq(sid) == 0:
            raise _unknown(sid)
        log.watch()
        deadline = None if args.for_seconds is None else time.monotonic() + args.for_seconds
        with SessionSubscription(log, sid, after, kinds) as sub:
            try:
                while deadline is None or time.monotonic() < deadline:
                    rec = sub.get_record(0.5)
                    if rec is not None:
                        out.line(
                            _payload_line(rec.payload)
                            if args.json
                            else event_line(rec.event(), out.style)
                        )
                    elif sub.closed:
                        break
            except KeyboardInterrupt:
                pass
            finally:
                log.unwatch()
    return 0


def status_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    _add_json(p)


def status(args: argparse.Namespace, out: Out) -> int:
    sid = _session_id(args.session)
    import attrs

    from projections import project_stored

    with _open_log(args) as log:
        # Folded from the stored rows: a row that does not decode makes the session
        # failed, naming its seq, instead of failing the command.
        count = log.last_seq(sid)
        p = project_stored(log, sid)
    if not count:
        raise _unknown(sid)
    fields: dict[str, Any] = {"session": sid, "events": count}
    for k in ("objective", "result", "turns", "record", "terminal", "error"):
        if hasattr(p, k):
            fields[k] = getattr(p, k)
    u = getattr(p, "usage", None)
    if u is not None:
        fields["input_tokens"] = u.input_tokens
        fields["output_tokens"] = u.output_tokens
    fanout = getattr(p, "fanout", ())
    if args.json:
        if fanout:
            fields["fanout"] = [
                {k: str(v) if k in ("state", "seal") else v for k, v in attrs.asdict(c).items()}
                for c in fanout
            ]
        out.line(json_line(fields))
        return 0
    width = max(len(k) for k in fields)
    for k, v in fields.items():
        out.line(f"{out.style.paint('bold', k.ljust(width))}  {v}")
    if fanout:
        out.line(out.style.paint("bold", "fanout"))
        for line in fanout_tree(sid, fanout, out.style):
            out.line("  " + line)
    return 0


# -- traces ---------------------------------------------------------------------------------


def trace_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    p.add_argument(
        "--otlp-json", default=None, metavar="FILE", help="write the spans as OTLP/JSON (- stdout)"
    )
    p.add_argument(
        "--otlp-endpoint",
        default=None,
        metavar="URL",
        help="POST the spans as OTLP/JSON to a collector (e.g. http://127.0.0.1:4318/v1/traces)",
    )
    p.add_argument(
        "--capture-content",
        action="store_true",
        help="include message text, tool arguments and results (also on when "
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true)",
    )
    _add_json(p)


def _trace_streams(log: Log, sid: str) -> dict[str, list[Any]]:
    """The session's events and those of every descendant stored in the same spine."""
    from projections import spawn_links
    from spine import history as read_history
    from spine import validate_session_id

    streams: dict[str, list[Any]] = {}
    todo = [sid]
    while todo:
        s = todo.pop(0)
        if s in streams:
            continue
        try:
            validate_session_id(s)
        except ValueError:
            continue
        streams[s] = read_history(log, s)
        todo.extend(spawn_links(streams[s], s))
    return streams


def _post_otlp(url: str, body: bytes, timeout: float = 10.0) -> None:
    import urllib.error
    import urllib.request

    req = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            resp.read()
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise CliError(f"the collector at {url} refused the spans: {exc}") from None


def trace(args: argparse.Namespace, out: Out) -> int:
    """The session's spans, folded from its log (the same log always gives the same ids)."""
    sid = _session_id(args.session)
    from projections import spans_of_tree

    from ..otel import capture_content, nanos, otlp_json

    with _open_log(args) as log:
        streams = _trace_streams(log, sid)
    if not streams.get(sid):
        raise _unknown(sid)
    spans = spans_of_tree(streams, sid, capture_content=args.capture_content or capture_content())
    body = json.dumps(otlp_json(spans), separators=(",", ":")).encode()
    if args.otlp_json == "-":
        out.line(body.decode())
    elif args.otlp_json:
        tmp = f"{args.otlp_json}.tmp"
        with open(tmp, "wb") as f:
            f.write(body)
        os.replace(tmp, args.otlp_json)
    if args.otlp_endpoint:
        _post_otlp(args.otlp_endpoint, body)
    if args.otlp_json == "-":
        return 0
    traces = len({s.trace_id for s in spans})
    if args.json:
        out.line(json_line({"session": sid, "spans": len(spans), "traces": traces}))
        return 0
    names = {s.span_id: s for s in spans}
    first = {t: i for i, t in reversed(list(enumerate(s.trace_id for s in spans)))}
    for s in sorted(spans, key=lambda s: (first[s.trace_id], nanos(s.start))):
        depth, p = 0, s.parent_span_id
        while p in names:
            depth, p = depth + 1, names[p].parent_span_id
        ms = (s.end - s.start).total_seconds() * 1000 if s.start and s.end else 0.0
        tokens = s.attribute("gen_ai.usage.input_tokens")
        extra = f"  in={tokens} out={s.attribute('gen_ai.usage.output_tokens')}" if tokens else ""
        status = "  ERROR " + s.status_message if s.status == "ERROR" else ""
        out.line(f"{s.trace_id[:8]} {'  ' * depth}{s.name}  {ms:.1f} ms{extra}{status}")
    out.note(f"{len(spans)} spans in {traces} traces")
    return 0


def stats_args(p: argparse.ArgumentParser) -> None:
    _add_json(p)


def stats(args: argparse.Namespace, out: Out) -> int:
    """The log's figures (no daemon needed) plus, when a daemon runs, its Runner's counters
    and the sessions by state, in the Prometheus text format (or JSON)."""
    from ..otel import LogMetrics, metrics_figures, prometheus_text, session_states

    with _open_log(args) as log:
        folder = LogMetrics().update(log)
    runner = states = runtime = None
    try:
        read_daemon(args.data)
    except CliError:
        out.note("no daemon runs: figures from the log only")
    else:
        with _attach(args) as host:
            runtime = host.runner_stats()
            runner = dict(runtime.counters)
            states = session_states(host.sessions())
    if args.json:
        out.line(json_line(metrics_figures(folder, runner, states, runtime)))
    else:
        out.stdout.write(prometheus_text(folder, runner, states, runtime=runtime))
        out.stdout.flush()
    return 0


# -- seals ----------------------------------------------------------------------------------


def seal_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    _add_json(p)


def seal(args: argparse.Namespace, out: Out) -> int:
    """Seal through the daemon: the session appends the seal itself, as the only writer."""
    sid = _session_id(args.session)
    with _attach(args) as host:
        r = host.seal(sid)
    if args.json:
        fields = {"seq": r.seq, "first": r.first, "last": r.last, "root": r.root, "key": r.key_id}
        out.line(json_line(fields))
    elif r.seq == 0:
        out.line("nothing new to seal")
    else:
        out.line(f"sealed seqs {r.first}..{r.last} at seq {r.seq}: root {r.root}, key {r.key_id}")
    return 0


def verify_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    _add_json(p)


def verify(args: argparse.Namespace, out: Out) -> int:
    sid = _session_id(args.session)
    with _attach(args) as host:
        r = host.verify(sid)
    if args.json:
        out.line(json_line({"ok": r.ok, "summary": r.summary}))
    else:
        out.line(out.style.paint("green" if r.ok else "red", r.summary))
    return 0 if r.ok else EXIT_FAILED


# -- projections --------------------------------------------------------------------------


def rebuild_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--timeout", type=positive, default=3600.0, metavar="S", help="give up after S seconds"
    )
    _add_json(p)


def rebuild(args: argparse.Namespace, out: Out) -> int:
    """Rebuild the projections from position 0 in the daemon, showing progress on stderr
    when it is a terminal."""
    show = out.stderr.isatty() and not args.json
    rate = Rate()
    started = time.monotonic()

    def progress(p: Any) -> None:
        # Once the rebuild is done, its state is the queryable one: count that.
        done, total = (p.rebuild_position, p.target) if p.rebuilding else (p.position, p.position)
        rate.add(time.monotonic(), done)
        if show:
            line = progress_line(done, total, rate.per_second(), rate.eta(total))
            out.stderr.write("\r" + line)
            out.stderr.flush()

    with _attach(args) as host:
        done = host.rebuild(progress, timeout=args.timeout)
    if show:
        out.stderr.write("\n")
    events = done.progress.position
    seconds = max(done.seconds, 1e-9)
    if args.json:
        out.line(json_line({"events": events, "seconds": round(done.seconds, 3)}))
    else:
        out.line(
            f"rebuilt the projections: {events:,} events in {done.seconds:.2f}s "
            f"({events / seconds:,.0f} events/s, {time.monotonic() - started:.2f}s in all)"
        )
    return 0


# -- export and import --------------------------------------------------------------------

#: The first line of an export names the format, the session and the count.
EXPORT_FORMAT = "vertebra.export/1"


def export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    p.add_argument("file", metavar="FILE", help="where to write (- for stdout)")
    p.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    _add_json(p)


def export(args: argparse.Namespace, out: Out) -> int:
    """A header line, then each stored event's bytes as they are (seq and time included),
    so seals over them stay valid in the copy."""
    sid = _session_id(args.session)
    with _open_log(args) as log:
        last = log.last_seq(sid)
        if last == 0:
            raise _unknown(sid)
        to_stdout = args.file == "-"
        if not to_stdout and os.path.exists(args.file) and not args.force:
            raise CliError(f"{args.file!r} exists: pass --force to overwrite it")
        tmp = args.file + ".tmp"
        with contextlib.ExitStack() as stack:
            f = out.stdout if to_stdout else stack.enter_context(open(tmp, "w"))
            f.write(json_line({"format": EXPORT_FORMAT, "session": sid, "events": last}) + "\n")
            after = 0
            while after < last and (page := log.read(sid, after, 1000)):
                for rec in page:
                    if rec.seq > last:
                        break
                    f.write(_payload_line(rec.payload) + "\n")
                after = page[-1].seq
        if not to_stdout:
            os.replace(tmp, args.file)
            out.line(
                json_line({"session": sid, "events": last, "file": args.file})
                if args.json
                else f"exported {sid}: {last} events to {args.file}"
            )
    return 0


def import_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="an export (- for stdin)")
    p.add_argument("--session", default=None, metavar="ID", help="store under ID instead")
    _add_json(p)


def import_(args: argparse.Namespace, out: Out) -> int:
    """Append an export as a new stream, seqs as they were; an existing stream is refused
    (the log's expected-seq check makes that atomic even against a concurrent writer)."""
    from ._transfer import read_export

    try:
        if args.file == "-":
            sid, events = read_export(sys.stdin, EXPORT_FORMAT)
        else:
            with open(args.file) as f:
                sid, events = read_export(f, EXPORT_FORMAT)
    except FileNotFoundError:
        raise CliError(f"no such file: {args.file!r}", EXIT_USAGE) from None
    except ValueError as exc:
        raise CliError(f"{args.file}: {exc}") from None
    sid = _session_id(args.session or sid)
    from spine import ConflictError, private_dir

    private_dir(args.data)
    with _log_at(args) as log:
        existing = log.last_seq(sid)
        if existing:
            raise CliError(
                f"session {sid!r} already has {existing} events: import never overwrites a "
                "stream (pass --session ID to import under another id)"
            )
        try:
            log.append(sid, events, expected_seq=0)
        except ConflictError:
            raise CliError(f"session {sid!r} was written meanwhile: nothing imported") from None
    if args.json:
        out.line(json_line({"session": sid, "events": len(events)}))
    else:
        out.line(f"imported {sid}: {len(events)} events")
    return 0


# -- the table ------------------------------------------------------------------------------

COMMANDS: tuple[Command, ...] = (
    Command(
        "serve",
        "run the daemon: Runner, sessions, the spine (SQLite by default); prints every event",
        ("vertebra serve --data ./vertebra-data --idle-timeout 60",),
        serve_args,
        serve,
    ),
    Command(
        "stop",
        "shut the running daemon down cleanly and wait until it has",
        ("vertebra stop --data ./vertebra-data",),
        stop_args,
        stop,
    ),
    Command(
        "pending",
        "list a session's actions waiting for a human's approval",
        ("vertebra pending chat-1", "vertebra pending chat-1 --json"),
        pending_args,
        pending,
    ),
    Command(
        "approve",
        "approve a waiting action: it runs once, even after a restart",
        ("vertebra approve chat-1 17", "vertebra approve chat-1 17 --note 'looks right'"),
        decide_args,
        approve,
    ),
    Command(
        "reject",
        "reject a waiting action: it never runs and the model is told why",
        ("vertebra reject chat-1 17 --note 'not in production'",),
        decide_args,
        reject,
    ),
    Command(
        "chat",
        "talk to a session interactively (Ctrl-C interrupts a turn, Ctrl-D leaves)",
        ("vertebra chat", "vertebra chat chat-1 --create"),
        chat_args,
        chat,
    ),
    Command(
        "new",
        "create a session and print its id",
        ("vertebra new chat-1 --meta ore.model.name=scripted --meta objective=demo",),
        new_args,
        new,
    ),
    Command(
        "send",
        "send a message through the daemon and print the turn",
        ("vertebra send chat-1 'hello there' --create", "vertebra send chat-1 '/model big'"),
        send_args,
        send,
    ),
    Command(
        "interrupt",
        "cut a session's running turn off",
        ("vertebra interrupt chat-1",),
        interrupt_args,
        interrupt,
    ),
    Command(
        "close",
        "close a session (it takes no more messages)",
        ("vertebra close chat-1",),
        close_args,
        close,
    ),
    Command(
        "check",
        "check the spine file's integrity and every session's seals",
        ("vertebra check", "vertebra check --json"),
        check_args,
        check,
    ),
    Command(
        "recover",
        "copy every readable event of a damaged spine into a new one",
        ("vertebra recover vertebra-data recovered.db",),
        recover_args,
        recover,
    ),
    Command(
        "revive",
        "bring back a session that failed past its restart budget",
        ("vertebra revive chat-1 --reason 'disk replaced'",),
        revive_args,
        revive,
    ),
    Command(
        "sessions",
        "list the sessions with their state and last seq",
        ("vertebra sessions", "vertebra sessions --json"),
        sessions_args,
        sessions,
    ),
    Command(
        "submit",
        "open a goal run: the session works on OBJECTIVE until it converges or stalls",
        (
            'vertebra submit research "summarise the spec" --create --max-turns 5 --wait',
            "vertebra submit s1 objective --max-seconds 60 --json",
        ),
        submit_args,
        submit,
    ),
    Command(
        "wait",
        "print a goal run's answer once it ends (exit 1 if it stalled; no daemon needed)",
        ("vertebra wait research", "vertebra wait research --timeout 30 --json"),
        wait_args,
        wait,
    ),
    Command(
        "history",
        "print a session's stored events (no daemon needed)",
        ("vertebra history chat-1", "vertebra history chat-1 --json | jq .kind"),
        history_args,
        history,
    ),
    Command(
        "tail",
        "follow a session's events live, exactly once, until it closes",
        ("vertebra tail chat-1 --from 10 --kinds assistant.message,tool.call --json",),
        tail_args,
        tail,
    ),
    Command(
        "status",
        "print a session's status projection",
        ("vertebra status chat-1 --json",),
        status_args,
        status,
    ),
    Command(
        "trace",
        "write a session's turns, model and tool calls as OpenTelemetry spans (no daemon needed)",
        (
            "vertebra trace chat-1 --otlp-json chat-1.otlp.json",
            "vertebra trace chat-1 --otlp-endpoint http://127.0.0.1:4318/v1/traces",
        ),
        trace_args,
        trace,
    ),
    Command(
        "stats",
        "print turn, token, session and sink figures in the Prometheus text format",
        ("vertebra stats", "vertebra stats --json"),
        stats_args,
        stats,
    ),
    Command(
        "seal",
        "seal what is new in a session (signed Merkle root)",
        ("vertebra seal chat-1",),
        seal_args,
        seal,
    ),
    Command(
        "verify",
        "verify a session's seals (exit 1 if tampered)",
        ("vertebra verify chat-1",),
        verify_args,
        verify,
    ),
    Command(
        "rebuild",
        "rebuild the projections from zero, showing events/s and ETA",
        ("vertebra rebuild",),
        rebuild_args,
        rebuild,
    ),
    Command(
        "export",
        "write a session's stream to a file as JSON lines, seqs preserved",
        ("vertebra export chat-1 chat-1.jsonl",),
        export_args,
        export,
    ),
    Command(
        "import",
        "store an exported stream as a new session (never overwrites)",
        ("vertebra import chat-1.jsonl", "vertebra import chat-1.jsonl --session copy-1"),
        import_args,
        import_,
    ),
    Command(
        "token",
        "mint an HTTP bearer token scoped to sessions (printed once)",
        ("vertebra token create --session chat-1", "vertebra token create --session a --read-only"),
        token_args,
        token,
    ),
    Command(
        "demo",
        "the full runtime: slash command, tool call, approval, blocked egress, a goal run "
        "fanning out to two concurrent children, interrupt, recovery, replay, seal, and "
        "each session's status with the fan-out tree",
        ("vertebra demo --data ./demo-data",),
        demo_args,
        demo,
    ),
)

__all__ = ["COMMANDS", "EXPORT_FORMAT", "Out", "alive"]
