"""The ``vertebra`` command line.

`_parser` turns the command table into argparse (pure), `_format` renders (pure),
`_commands` holds the table, the ``*_commands`` modules one pair of functions per command,
`_chat` the interactive chat, `_daemon` the daemon's file and the exit codes. Runtime
modules are imported by the commands that need them, so ``vertebra --help`` starts in tens
of milliseconds.
"""

from ._main import main

__all__ = ["main"]
