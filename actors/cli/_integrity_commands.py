"""The commands that check a session's record: seal and verify (through the daemon), and
offline, the spine file's integrity and every seal (`check`) and the rescue of a damaged
spine's readable events (`recover`)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from ._access import add_json, attach, session_id, spine_file, spine_url
from ._daemon import EXIT_FAILED, EXIT_USAGE, CliError
from ._format import json_line
from ._output import Out


def seal_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", metavar="SESSION")
    add_json(p)


def seal(args: argparse.Namespace, out: Out) -> int:
    """Seal through the daemon: the session appends the seal itself, as the only writer."""
    sid = session_id(args.session)
    with attach(args) as host:
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
    add_json(p)


def verify(args: argparse.Namespace, out: Out) -> int:
    sid = session_id(args.session)
    with attach(args) as host:
        r = host.verify(sid)
    if args.json:
        out.line(json_line({"ok": r.ok, "summary": r.summary}))
    else:
        out.line(out.style.paint("green" if r.ok else "red", r.summary))
    return 0 if r.ok else EXIT_FAILED


def check_args(p: argparse.ArgumentParser) -> None:
    add_json(p)


def check(args: argparse.Namespace, out: Out) -> int:
    """The spine's integrity (SQLite's integrity check on a file), then every session's
    seals and rows, offline and read-only (no daemon needed, nothing appended); exit 1
    if anything is wrong. On PostgreSQL the server keeps its own pages sound (and has
    its own tools for them): the seals and rows are checked all the same."""
    from spine import LogSpec

    url = spine_url(args)
    try:
        spec = LogSpec.parse(url or spine_file(args.data))
    except ValueError as exc:
        raise CliError(f"bad --spine {url!r}: {exc}", EXIT_USAGE) from None
    try:
        checked = spec.backend.check_pages(spec)
    except FileNotFoundError as exc:
        where = f"at {exc.filename!r}" if url else f"in {args.data!r}"
        raise CliError(f"no spine {where} (nothing stored there yet)") from None
    integrity = ["ok"] if checked is None else checked
    results = _check_sessions(args.data, spec) if integrity == ["ok"] else []
    bad = integrity != ["ok"] or not all(r["ok"] for r in results)
    if args.json:
        out.line(json_line({"integrity": integrity, "sessions": results, "ok": not bad}))
    else:
        _print_check(integrity, results, out, "" if checked is not None else spec.scheme)
    return 1 if bad else 0


def _check_sessions(data: str, spec: Any) -> list[dict[str, Any]]:
    """Every stream's seals verified and rows decoded, without appending anything."""
    from spine import open_log
    from spine.seal import KeyStore

    ring = KeyStore(os.path.join(data, "keys")).keyring()
    log = open_log(spec, read_only=True)
    try:
        return [_check_session(log, info.stream, ring) for info in log.streams()]
    finally:
        log.close()


def _check_session(log: Any, stream: str, ring: Any) -> dict[str, Any]:
    from spine.seal import verify_stream

    report = verify_stream(log, stream, ring, append=False)
    unreadable = _first_unreadable(log, stream)
    # A session never sealed is not tampered: it has nothing to check yet.
    ok = report.ok or (not report.checks and unreadable is None)
    seq = report.problem.seq if report.problem else 0
    if unreadable is not None and not seq:
        seq = unreadable[0]
    return {
        "session": stream,
        "seals": len(report.checks),
        "ok": ok,
        "summary": report.summary(),
        "seq": seq,
        "unreadable": None if unreadable is None else unreadable[1],
    }


def _print_check(
    integrity: list[str], results: list[dict[str, Any]], out: Out, unchecked: str = ""
) -> None:
    """``unchecked``: the backend whose server checks its own pages (none were checked)."""
    if unchecked:
        out.line(f"integrity: not checked here ({unchecked}: the server's own tools check it)")
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
    add_json(p)


def recover(args: argparse.Namespace, out: Out) -> int:
    """Copy every readable event of a damaged SQLite spine into a new one; exit 1 when
    something could not be read (each such row is named)."""
    from spine import InvalidArgumentError, StorageError, recover_sqlite

    src = spine_file(args.src) if os.path.isdir(args.src) else args.src
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


__all__ = [
    "check",
    "check_args",
    "recover",
    "recover_args",
    "seal",
    "seal_args",
    "verify",
    "verify_args",
]
