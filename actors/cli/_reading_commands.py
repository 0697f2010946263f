"""The commands that read and inspect: the daemon's sessions, and from the spine a
session's history, its live tail, its status projection, its trace, and the log's figures."""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import TYPE_CHECKING, Any

from ._access import (
    add_json,
    attach,
    open_spine,
    payload_line,
    session_id,
    spine_conflict,
    unknown_session,
)
from ._daemon import EXIT_INTERRUPTED, EXIT_USAGE, CliError, read_daemon
from ._format import (
    context_fields,
    event_line,
    fanout_tree,
    json_line,
    parse_kinds,
    span_tree,
    status_lines,
    table,
)
from ._output import Out, interrupted
from ._parser import positive, seq_number

if TYPE_CHECKING:
    from spine import Log


def sessions_args(p: argparse.ArgumentParser) -> None:
    add_json(p)


def sessions(args: argparse.Namespace, out: Out) -> int:
    with attach(args) as host:
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


def history_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    add_json(p)


def history(args: argparse.Namespace, out: Out) -> int:
    sid = session_id(args.session)
    with open_spine(args) as log:
        after = 0
        while page := log.read(sid, after, 1000):
            for rec in page:
                out.line(
                    payload_line(rec.payload) if args.json else event_line(rec.event(), out.style)
                )
            after = page[-1].seq
        if after == 0:
            raise unknown_session(sid)
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
    add_json(p)
    p.add_argument("--for-seconds", type=positive, default=None, help=argparse.SUPPRESS)


def tail(args: argparse.Namespace, out: Out) -> int:
    """Follow a session: backlog then live, exactly once, until it closes or Ctrl-C.

    It reads the spine, not the daemon, so a daemon restart does not disturb it.
    """
    sid = session_id(args.session)
    from spine import Kind

    try:
        kinds = None if args.kinds is None else parse_kinds(args.kinds, (k.value for k in Kind))
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    after = args.after if args.after is not None else args.start - 1
    if after < 0:
        raise CliError(f"--after takes a seq of 0 or more, got {after}", EXIT_USAGE)
    from ..host import SessionSubscription

    with open_spine(args) as log:
        if log.last_seq(sid) == 0:
            raise unknown_session(sid)
        log.watch()
        deadline = None if args.for_seconds is None else time.monotonic() + args.for_seconds
        with SessionSubscription(log, sid, after, kinds) as sub, interrupted() as stop:
            try:
                while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
                    rec = sub.get_record(0.5)
                    if rec is not None:
                        out.line(
                            payload_line(rec.payload)
                            if args.json
                            else event_line(rec.event(), out.style)
                        )
                    elif sub.closed:
                        break
            finally:
                log.unwatch()
    # Ctrl-C ends the tail as the README says: exit 130, like any interrupted command.
    return EXIT_INTERRUPTED if stop.is_set() else 0


def _usage_fields(u: Any) -> dict[str, int]:
    # The seed's Usage names, as the gateway's status route spells them.
    return {
        "inputTokens": u.input_tokens,
        "outputTokens": u.output_tokens,
        "cacheReadTokens": u.cache_read_tokens,
        "cacheWriteTokens": u.cache_write_tokens,
    }


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.title() for w in rest)


def status_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    add_json(p)


def status(args: argparse.Namespace, out: Out) -> int:
    sid = session_id(args.session)
    from projections import cache_hit_rate, project_stored

    from ._timer_commands import time_and_money

    with open_spine(args) as log:
        # Folded from the stored rows: a row that does not decode makes the session
        # failed, naming its seq, instead of failing the command.
        count = log.last_seq(sid)
        p = project_stored(log, sid)
        ledger = time_and_money(log, sid) if count else {}
    if not count:
        raise unknown_session(sid)
    fields: dict[str, Any] = {"session": sid, "events": count, **ledger}
    for k in ("objective", "result", "turns", "record", "terminal", "error"):
        if hasattr(p, k):
            fields[k] = getattr(p, k)
    u = getattr(p, "usage", None)
    if u is not None:
        fields["usage"] = _usage_fields(u)
        fields["cacheHitRate"] = cache_hit_rate(u)
    # What governance decided, as the README says the projection shows it.
    for k in ("admitted", "completed", "rejected", "egress_allowed", "egress_blocked"):
        fields[k] = getattr(p, k)
    fields["pending"] = len(p.pending)
    # From the projection, not a fold of the stream of its own.
    context = context_fields(p.context)
    fields.update({"context": context} if context else {})
    waiting = [f"call {w.call} {w.action} {w.input}" for w in p.pending]
    egress = [f"{x.host} {'allowed' if x.allowed else 'blocked'} ({x.reason})" for x in p.egress]
    fanout = getattr(p, "fanout", ())
    if args.json:
        out.line(json_line(_status_json(fields, p, fanout)))
        return 0
    sections = {"waiting for approval": waiting, "egress": egress}
    if fanout:
        sections["fanout"] = fanout_tree(sid, fanout, out.style)
    status_lines(out, fields, sections)
    return 0


def _status_json(fields: dict[str, Any], p: Any, fanout: Any) -> dict[str, Any]:
    """``fields`` with the waiting actions, the egress ledger and the fan-out tree as JSON."""
    import attrs

    fields["pending"] = [
        {"call": w.call, "action": w.action, "turn": w.turn, "input": json_value(w.input)}
        for w in p.pending
    ]
    fields["egress"] = [
        {"host": x.host, "allowed": x.allowed, "reason": x.reason} for x in p.egress
    ]
    if "context" in fields:
        fields["context"] = p.context.report()
    if fanout:
        fields["fanout"] = [
            {_camel(k): str(v) if k in ("state", "seal") else v for k, v in attrs.asdict(c).items()}
            for c in fanout
        ]
    return fields


def json_value(text: str) -> Any:
    """A tool's arguments as the JSON value they are (as the HTTP routes give them)."""
    import json

    try:
        return json.loads(text) if text else {}
    except ValueError:
        return text


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
    add_json(p)


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
    sid = session_id(args.session)
    from projections import spans_of_tree

    from ..otel import capture_content, nanos, otlp_json

    with open_spine(args) as log:
        streams = _trace_streams(log, sid)
    if not streams.get(sid):
        raise unknown_session(sid)
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
    for depth, s in span_tree(spans, lambda s: nanos(s.start)):
        ms = (s.end - s.start).total_seconds() * 1000 if s.start and s.end else 0.0
        tokens = s.attribute("gen_ai.usage.input_tokens")
        extra = f"  in={tokens} out={s.attribute('gen_ai.usage.output_tokens')}" if tokens else ""
        status = "  ERROR " + s.status_message if s.status == "ERROR" else ""
        out.line(f"{s.trace_id[:8]} {'  ' * depth}{s.name}  {ms:.1f} ms{extra}{status}")
    out.note(f"{len(spans)} spans in {traces} traces")
    return 0


def hosts_args(p: argparse.ArgumentParser) -> None:
    add_json(p)


def hosts(args: argparse.Namespace, out: Out) -> int:
    """The member hosts the daemon (a convention leader) knows, from its Runner."""
    with attach(args) as host:
        rows = host.hosts()
    if args.json:
        for r in rows:
            out.line(json_line(r))
        return 0
    if not rows:
        out.note("no member hosts: this daemon runs every session itself")
        return 0
    table_rows = [
        (
            str(r.get("host", "")),
            "alive" if r.get("alive") else "dead",
            r.get("capacity", ""),
            r.get("sessions", ""),
        )
        for r in rows
    ]
    for line in table(("HOST", "STATE", "CAPACITY", "SESSIONS"), table_rows, out.style):
        out.line(line)
    return 0


def stats_args(p: argparse.ArgumentParser) -> None:
    add_json(p)


def _fold_metrics(log: Log, out: Out) -> Any:
    """The log's figures, folded row by row; a row that does not decode is named on
    stderr and left out, so one damaged event does not hide every other figure."""
    from projections import MetricsFolder
    from spine import DecodeError, decode_event

    folder = MetricsFolder()
    position = 0
    while rows := log.read_rows(position, 5000):
        for stream, seq, pos, _kind, _version, payload in rows:
            position = pos
            try:
                ev = decode_event(payload)
            except DecodeError as exc:
                out.note(f"vertebra: left out {stream} seq {seq}, which does not decode: {exc}")
                continue
            folder.feed(stream, ev, pos)
    return folder


def stats(args: argparse.Namespace, out: Out) -> int:
    """The log's figures (no daemon needed) plus, when a daemon runs, its Runner's counters
    and the sessions by state, in the Prometheus text format (or JSON)."""
    from ..otel import metrics_figures, prometheus_text, session_states

    with open_spine(args) as log:
        folder = _fold_metrics(log, out)
    runner = states = runtime = None
    try:
        info = read_daemon(args.data)
    except CliError:
        out.note("no daemon runs: figures from the log only")
    else:
        if spine_conflict(args, info.spine) is not None:
            out.note("the daemon serves another spine: figures from the log only")
        else:
            with attach(args) as host:
                runtime = host.runner_stats()
                runner = dict(runtime.counters)
                states = session_states(host.sessions())
    if args.json:
        out.line(json_line(metrics_figures(folder, runner, states, runtime)))
    else:
        out.stdout.write(prometheus_text(folder, runner, states, runtime=runtime))
        out.stdout.flush()
    return 0


__all__ = [
    "history",
    "history_args",
    "hosts",
    "hosts_args",
    "sessions",
    "sessions_args",
    "stats",
    "stats_args",
    "status",
    "status_args",
    "tail",
    "tail_args",
    "trace",
    "trace_args",
]
