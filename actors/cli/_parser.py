"""Argument parsing: the command table becomes an argparse parser.

Pure: no runtime imports, so ``vertebra --help`` starts fast. Global options (``--data``,
``--color``) are accepted before or after the command: each subparser declares them again
with a suppressed default, so a value given after the command wins and one given before
is not overwritten. A bad argument is one line on stderr (`CliError`), not a usage dump.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from .._version import __version__
from ._daemon import EXIT_USAGE, CliError

DEFAULT_DATA = "vertebra-data"
DATA_ENV = "VERTEBRA_DATA"


class Command(NamedTuple):
    """One row of the command table: adding a command is adding a row."""

    name: str
    #: One line for the command list (the README's table repeats it; a test checks).
    help: str
    #: Example invocations shown at the end of the command's ``--help``.
    examples: tuple[str, ...]
    #: Declares the command's own arguments on its subparser.
    arguments: Callable[[argparse.ArgumentParser], None]
    #: Runs the command: ``run(args, out) -> exit code``.
    run: Callable[[argparse.Namespace, Any], int]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise CliError(f"{message} (see `{self.prog} --help`)", EXIT_USAGE)

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        # Leftovers are found by the top-level parser: point to the command's own help.
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            spec = getattr(ns, "command_spec", None)
            prog = f"{self.prog} {spec.name}" if spec is not None else self.prog
            words = " ".join(extras)
            raise CliError(f"unrecognized arguments: {words} (see `{prog} --help`)", EXIT_USAGE)
        return ns


def _global_options(p: argparse.ArgumentParser, top: bool) -> None:
    # Defaults live on the top-level parser only; see the module docstring.
    keep = {} if top else {"default": argparse.SUPPRESS}
    p.add_argument(
        "--data",
        metavar="DIR",
        help=f"data directory (default: ${DATA_ENV}, else ./{DEFAULT_DATA})",
        **keep,  # type: ignore[arg-type]
    )
    p.add_argument(
        "--spine",
        metavar="URL",
        help="where the log lives, e.g. postgresql://user@host:5432/db "
        "(default: spine.db in the data directory)",
        **keep,  # type: ignore[arg-type]
    )
    p.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        help="color human output: auto (on a terminal, unless NO_COLOR is set), always, never",
        **({"default": "auto"} if top else keep),  # type: ignore[arg-type]
    )


def build_parser(commands: Sequence[Command]) -> argparse.ArgumentParser:
    names = ", ".join(c.name for c in commands)
    parser = _Parser(
        prog="vertebra",
        description="vertebra: an event-sourced actor runtime for agent conversation sessions.",
        epilog=(
            "examples:\n"
            "  vertebra serve                  # the daemon, data in ./vertebra-data\n"
            "  vertebra chat                   # talk to a new session\n"
            "  vertebra tail chat-1 --json     # follow a session as JSON lines\n"
            f"\nEvery command takes --data DIR (or ${DATA_ENV}) before or after it;\n"
            "`vertebra COMMAND --help` shows its options and an example."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"vertebra {__version__}")
    _global_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for cmd in commands:
        p = sub.add_parser(
            cmd.name,
            help=cmd.help,
            description=cmd.help[:1].upper() + cmd.help[1:] + ".",
            epilog="example"
            + ("s" if len(cmd.examples) > 1 else "")
            + ":\n"
            + "\n".join(f"  {e}" for e in cmd.examples),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        cmd.arguments(p)
        _global_options(p, top=False)
        p.set_defaults(command_spec=cmd)
    parser.set_defaults(command_spec=None, _names=names)
    return parser


def data_dir(args: argparse.Namespace, environ: Mapping[str, str]) -> str:
    """``--data``, else ``$VERTEBRA_DATA``, else ``./vertebra-data``."""
    return str(args.data or environ.get(DATA_ENV) or DEFAULT_DATA)


def tcp_port(text: str) -> int:
    """An argparse type: a TCP port, 1 to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"a port is 1 to 65535, got {text!r}")
    return value


def positive(text: str) -> float:
    """An argparse type: a number of seconds above zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above zero: {text!r}")
    return value


def count(text: str) -> int:
    """An argparse type: a whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more: {text!r}")
    return value


def seq_number(text: str) -> int:
    """An argparse type: a seq, 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"seqs start at 1: {text!r}")
    return value


def abspath(path: str) -> str:
    return os.path.abspath(path)


__all__ = [
    "DATA_ENV",
    "DEFAULT_DATA",
    "Command",
    "abspath",
    "build_parser",
    "data_dir",
    "positive",
    "seq_number",
]
