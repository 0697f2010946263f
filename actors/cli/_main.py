"""`main`: parse, run one command, and turn every failure into one line on stderr."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from ..errors import (
    ActorsError,
    HostTimeout,
    InvalidRequest,
    SessionAlreadyExists,
    SessionClosed,
    SessionNotFound,
)
from ._commands import COMMANDS
from ._daemon import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_UNKNOWN_SESSION, EXIT_USAGE, CliError
from ._format import Style, use_color
from ._output import Out
from ._parser import build_parser, data_dir


def describe(exc: BaseException) -> tuple[str, int]:
    """The one line and exit code a runtime error is reported with."""
    sid = getattr(exc, "session_id", "")
    if isinstance(exc, SessionNotFound):
        return (f"unknown session {sid!r}" if sid else str(exc)), EXIT_UNKNOWN_SESSION
    if isinstance(exc, SessionAlreadyExists):
        return (f"session {sid!r} already exists" if sid else str(exc)), EXIT_FAILED
    if isinstance(exc, SessionClosed):
        return (f"session {sid!r} is closed" if sid else str(exc)), EXIT_FAILED
    if isinstance(exc, InvalidRequest):
        return str(exc), EXIT_USAGE
    if isinstance(exc, HostTimeout):
        return f"the daemon did not answer in time ({exc})", EXIT_FAILED
    return f"{type(exc).__name__}: {exc}", EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    environ = os.environ
    try:
        parser = build_parser(COMMANDS)
        args = parser.parse_args(argv)
        args.data = data_dir(args, environ)
        color = use_color(args.color, sys.stdout.isatty(), environ)
        out = Out(Style(color), sys.stdout, sys.stderr)
        if args.command_spec is None:
            parser.print_help()
            return EXIT_USAGE
        return int(args.command_spec.run(args, out))
    except CliError as exc:
        message, code = str(exc), exc.code
    except ActorsError as exc:
        message, code = describe(exc)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `vertebra history s | head`: the reader left; nothing to report, and nothing
        # more to flush into the closed pipe at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:
        spine = sys.modules.get("spine")
        if spine is None or not isinstance(exc, spine.SpineError):
            raise
        message, code = f"{type(exc).__name__}: {exc}", EXIT_FAILED
    print(f"vertebra: {message}", file=sys.stderr, flush=True)
    return code


__all__ = ["describe", "main"]
