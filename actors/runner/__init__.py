"""The Runner: a pure registry and supervision policy inside a thin actor shell.

`Registry` decides (routing, restarts, poison, passivation) and returns actions;
`RunnerActor` carries them out; `Guardian` keeps a Runner alive; `SinkRouter` fans
session output out to sinks.
"""

from __future__ import annotations

import os

from spine import LogSpec, checkpoints_at

from .rules.entry import EntryState
from .rules.registry import Registry
from .shell.sinks import SinkRouter

__all__ = [
    "EntryState",
    "Guardian",
    "Registry",
    "RunnerActor",
    "SinkRouter",
    "spine_path",
    "spine_spec",
]


def spine_path(data_dir: str) -> str:
    """The spine's SQLite file in a data directory."""
    return os.path.join(data_dir, "spine.db")


def spine_spec(data_dir: str, spine: str = "") -> LogSpec:
    """Where the spine of a runtime lives: ``spine`` (a URL) if given, else the SQLite file
    in its data directory."""
    return LogSpec.parse(spine) if spine else LogSpec.sqlite(spine_path(data_dir))


def checkpoint_location(data_dir: str, spine: str = "") -> str:
    """Where the status projection checkpoints (the spine's backend says: beside a
    PostgreSQL spine in its own database, else its own SQLite file in the data directory)."""
    return checkpoints_at(spine_spec(data_dir, spine), data_dir).url


def __getattr__(name: str) -> object:
    # The actors pull in Thespian; importing the registry (pure) should not.
    if name == "RunnerActor":
        from .shell.actor import RunnerActor

        return RunnerActor
    if name == "Guardian":
        from .shell.guardian import Guardian

        return Guardian
    raise AttributeError(f"module 'actors.runner' has no attribute {name!r}")
