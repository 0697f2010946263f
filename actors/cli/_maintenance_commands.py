"""The maintenance commands: revive a failed session, rebuild the projections, export a
session's stream and import one, and mint HTTP tokens."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from datetime import UTC, datetime
from typing import Any

from ._access import (
    add_json,
    attach,
    open_spine,
    payload_line,
    session_id,
    spine_log,
    unknown_session,
)
from ._daemon import EXIT_USAGE, CliError
from ._format import Rate, json_line, progress_line
from ._output import Out
from ._parser import positive


def revive_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    p.add_argument("--reason", default="", help="why, recorded with the decision")
    add_json(p)


def revive(args: argparse.Namespace, out: Out) -> int:
    """Bring back a session that failed past its restart budget."""
    sid = session_id(args.session)
    with attach(args) as host:
        seq = host.revive(sid, args.reason)
    out.line(json_line({"revived": sid, "seq": seq}) if args.json else f"revived {sid} (seq {seq})")
    return 0


def rebuild_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--timeout", type=positive, default=3600.0, metavar="S", help="give up after S seconds"
    )
    add_json(p)


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

    with attach(args) as host:
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


#: The first line of an export names the format, the session and the count.
EXPORT_FORMAT = "vertebra.export/1"


def export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    p.add_argument("file", metavar="FILE", help="where to write (- for stdout)")
    p.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    add_json(p)


def export(args: argparse.Namespace, out: Out) -> int:
    """A header line, then each stored event's bytes as they are (seq and time included),
    so seals over them stay valid in the copy."""
    sid = session_id(args.session)
    with open_spine(args) as log:
        last = log.last_seq(sid)
        if last == 0:
            raise unknown_session(sid)
        to_stdout = args.file == "-"
        if not to_stdout and os.path.exists(args.file) and not args.force:
            raise CliError(f"{args.file!r} exists: pass --force to overwrite it")
        tmp = args.file + ".tmp"
        header = {"format": EXPORT_FORMAT, "session": sid, "events": last}
        keys = _sealing_keys(args.data, log, sid, last)
        if keys:
            header["keys"] = keys
        with contextlib.ExitStack() as stack:
            f = out.stdout if to_stdout else stack.enter_context(open(tmp, "w"))
            f.write(json_line(header) + "\n")
            after = 0
            while after < last and (page := log.read(sid, after, 1000)):
                for rec in page:
                    if rec.seq > last:
                        break
                    f.write(payload_line(rec.payload) + "\n")
                after = page[-1].seq
        if not to_stdout:
            os.replace(tmp, args.file)
            out.line(
                json_line({"session": sid, "events": last, "file": args.file})
                if args.json
                else f"exported {sid}: {last} events to {args.file}"
            )
    return 0


def _sealing_keys(data: str, log: Any, sid: str, last: int) -> dict[str, str]:
    """The public keys (id to hex) of the seals in seqs 1..last that this data directory
    holds, so the copy's seals can be checked where it is imported."""
    from spine import Kind
    from spine.seal import KeyStore

    ids = {
        str(r.event().record.get("keyId", ""))
        for r in log.read(sid, 0, None, kinds=[Kind.RECORD_SEALED])
        if r.seq <= last
    }
    ring = KeyStore(os.path.join(data, "keys")).keyring()
    return {k: key.hex() for k in sorted(ids) if (key := ring.get(k)) is not None}


def import_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="an export (- for stdin)")
    p.add_argument("--session", default=None, metavar="ID", help="store under ID instead")
    add_json(p)


def import_(args: argparse.Namespace, out: Out) -> int:
    """Append an export as a new stream, seqs as they were; an existing stream is refused
    (the log's expected-seq check makes that atomic even against a concurrent writer)."""
    from ._transfer import provenance, read_export_keys

    try:
        if args.file == "-":
            source, events, keys = read_export_keys(sys.stdin, EXPORT_FORMAT)
        else:
            with open(args.file) as f:
                source, events, keys = read_export_keys(f, EXPORT_FORMAT)
    except FileNotFoundError:
        raise CliError(f"no such file: {args.file!r}", EXIT_USAGE) from None
    except ValueError as exc:
        raise CliError(f"{args.file}: {exc}") from None
    sid = session_id(args.session or source)
    from spine import ConflictError, private_dir
    from spine.seal import KeyStore

    public = _export_keys(args.file, keys)
    name = "-" if args.file == "-" else os.path.basename(args.file)
    events = [*events, provenance(source, events, keys, name)]

    private_dir(args.data)
    with spine_log(args) as log:
        existing = log.last_seq(sid)
        if existing:
            raise CliError(
                f"session {sid!r} already has {existing} events: import never overwrites a "
                "stream (pass --session ID to import under another id)"
            )
        # The sealing keys first: a copy whose seals cannot be checked is never stored.
        store = KeyStore(os.path.join(args.data, "keys"))
        for key in public:
            store.trust(key)
        try:
            log.append(sid, events, expected_seq=0)
        except ConflictError:
            raise CliError(f"session {sid!r} was written meanwhile: nothing imported") from None
    copied = len(events) - 1
    if args.json:
        out.line(json_line({"session": sid, "events": copied, "from": source}))
    else:
        out.line(f"imported {sid}: {copied} events from {source!r}")
    return 0


def _export_keys(file: str, keys: dict[str, str]) -> list[Any]:
    """The public keys an export's header carries, each checked against its id."""
    from spine import InvalidArgumentError
    from spine.seal import PublicKey

    public = []
    for key_id, text in keys.items():
        try:
            key = PublicKey.from_hex(text)
        except InvalidArgumentError as exc:
            raise CliError(f"{file}: key {key_id}: {exc}") from None
        if key.key_id != key_id:
            raise CliError(f"{file}: the header's key {key_id} is key {key.key_id}")
        public.append(key)
    return public


def token_args(p: argparse.ArgumentParser) -> None:
    tsub = p.add_subparsers(dest="token_command", required=True, metavar="create|list|revoke")
    c = tsub.add_parser("create", help="a token scoped to sessions (printed once)")
    c.add_argument("--session", action="append", default=[], help="a session (repeatable)")
    c.add_argument("--tenant", default=None, help="every session of this tenant, instead")
    c.add_argument("--read-only", action="store_true", help="may read but not write")
    c.add_argument(
        "--expires", metavar="TTL", default=None, help="lifetime: 30m, 12h, 7d, 2w (default: none)"
    )
    ls = tsub.add_parser("list", help="every minted token (never the token itself)")
    add_json(ls)
    r = tsub.add_parser("revoke", help="revoke one token by its id (from token list)")
    r.add_argument("id", help="the token's id (tok_...)")


def token(args: argparse.Namespace, out: Out) -> int:
    """Mint a bearer token limited to the given sessions, list the minted ones, or
    revoke one."""
    from ..gateway._tokens import list_tokens, mint, parse_ttl, revoke_token

    if args.token_command == "list":
        now = time.time()
        for info in list_tokens(args.data):
            if args.json:
                out.line(json_line(info.as_json(now)))
            else:
                out.line(_token_line(info, now))
        return 0
    if args.token_command == "revoke":
        if not revoke_token(args.data, args.id):
            raise CliError(f"no token {args.id!r} (vertebra token list shows them)", EXIT_USAGE)
        out.line(f"revoked {args.id}")
        return 0
    try:
        ttl = None if args.expires is None else parse_ttl(args.expires)
        info, secret = mint(
            args.data, args.session, read_only=args.read_only, ttl=ttl, tenant=args.tenant
        )
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    out.line(secret)
    print(f"token id {info.id} (vertebra token revoke {info.id})", file=sys.stderr)
    return 0


def _token_line(info: Any, now: float) -> str:
    def when(t: float) -> str:
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    if info.expires is None:
        expiry = "never expires"
    else:
        expiry = f"{'expired' if info.expired(now) else 'expires'} {when(info.expires)}"
    mode = "read-only" if info.read_only else "read-write"
    scope = f"tenant {info.tenant}" if info.tenant else ",".join(info.sessions)
    return f"{info.id}  {scope}  {mode}  created {when(info.created)}  {expiry}"


__all__ = [
    "EXPORT_FORMAT",
    "export",
    "export_args",
    "import_",
    "import_args",
    "rebuild",
    "rebuild_args",
    "revive",
    "revive_args",
    "token",
    "token_args",
]
