"""How commands reach what they work on: the running daemon (`attach`), the spine read
directly (`open_spine`), a session id checked before either, and the options they share."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ._daemon import EXIT_UNKNOWN_SESSION, EXIT_USAGE, CliError, read_daemon, start_hint

if TYPE_CHECKING:
    from spine import Log

    from ..host import Host


def session_id(text: str) -> str:
    """The id, checked before anything connects: a bad one is a usage error."""
    from spine import validate_session_id

    try:
        validate_session_id(text)
    except ValueError as exc:
        problem = getattr(exc, "problem", None) or str(exc)
        raise CliError(f"bad session id {text!r}: {problem}", EXIT_USAGE) from None
    return text


def _same_spine(a: str, b: str, data: str) -> bool:
    """Whether two spine locations name one log (empty: the data directory's file)."""
    from spine import LogSpec

    try:
        mine, theirs = LogSpec.parse(a or spine_file(data)), LogSpec.parse(b or spine_file(data))
        return mine.location == theirs.location
    except ValueError:
        return False


def spine_conflict(args: argparse.Namespace, daemon_spine: str) -> str | None:
    """Why ``--spine`` cannot go through the daemon (None: it names the daemon's own
    spine, or is not given): the daemon acts on the spine it opened, and a command that
    silently used it instead of the one named would report on another log."""
    from spine import LogSpec

    given = getattr(args, "spine", None) or ""
    if not given or _same_spine(given, daemon_spine, args.data):
        return None
    theirs = LogSpec.parse(daemon_spine or spine_file(args.data)).redacted()
    try:
        mine = LogSpec.parse(given).redacted()
    except ValueError:
        mine = given
    verify = args.command == "verify"
    hint = "; `vertebra check --spine URL` verifies seals offline" if verify else ""
    return (
        f"--spine {mine} is not the spine the daemon of {args.data!r} serves ({theirs}): "
        f"`{args.command}` goes through the daemon; drop --spine, or pass the --data of a "
        f"daemon serving that spine{hint}"
    )


@contextlib.contextmanager
def attach(args: argparse.Namespace) -> Iterator[Host]:
    """A Host joined to the running daemon, released (the daemon keeps running) after.

    A ``--spine`` naming another log than the daemon's is refused (exit 2)."""
    info = read_daemon(args.data)
    conflict = spine_conflict(args, info.spine)
    if conflict is not None:
        raise CliError(conflict, EXIT_USAGE)
    from ..host import Host

    host = Host(args.data, attach=True, admin_port=info.admin_port, spine=info.spine or None)
    try:
        yield host
    finally:
        host.close()


def spine_file(data: str) -> str:
    return os.path.join(data, "spine.db")


def spine_url(args: argparse.Namespace) -> str:
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


def spine_log(args: argparse.Namespace, *, read_only: bool = False) -> Log:
    """The log ``--spine`` names, else the data directory's SQLite file; the caller
    closes it. ``read_only``: the caller only reads, so nothing is created or written
    (a read-only data directory can be read)."""
    from spine import LogSpec, open_log

    url = spine_url(args)
    if url:
        try:
            return open_log(LogSpec.parse(url), read_only=read_only)
        except ValueError as exc:
            raise CliError(f"bad --spine {url!r}: {exc}", EXIT_USAGE) from None
    return open_log(LogSpec.sqlite(spine_file(args.data)), read_only=read_only)


@contextlib.contextmanager
def open_spine(args: argparse.Namespace) -> Iterator[Log]:
    """The spine of the data directory, read directly and read-only (no daemon needed)."""
    if not spine_url(args) and not os.path.exists(spine_file(args.data)):
        raise CliError(
            f"no spine in {args.data!r} (nothing stored there yet): {start_hint(args.data)}"
        )
    log = spine_log(args, read_only=True)
    try:
        yield log
    finally:
        log.close()


def unknown_session(sid: str) -> CliError:
    return CliError(f"unknown session {sid!r}", EXIT_UNKNOWN_SESSION)


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output (JSON)")


def payload_line(payload: bytes) -> str:
    # The stored bytes are the event's JSON, seq and time included: printed as they are.
    return payload.decode("utf-8")


__all__ = [
    "add_json",
    "attach",
    "open_spine",
    "payload_line",
    "session_id",
    "spine_conflict",
    "spine_file",
    "spine_log",
    "spine_url",
    "unknown_session",
]
