"""The Runner: a pure registry and supervision policy inside a thin actor shell.

`Registry` decides (routing, restarts, poison, passivation) and returns actions;
`RunnerActor` carries them out; `Guardian` keeps a Runner alive; `SinkRouter` fans
session output out to sinks.
"""

from __future__ import annotations

import os

from .entry import EntryState
from .registry import Registry
from .sinks import SinkRouter

__all__ = ["EntryState", "Guardian", "Registry", "RunnerActor", "SinkRouter", "spine_path"]


def spine_path(data_dir: str) -> str:
    """The spine's SQLite file in a data directory."""
    return os.path.join(data_dir, "spine.db")


def __getattr__(name: str) -> object:
    # The actors pull in Thespian; importing the registry (pure) should not.
    if name == "RunnerActor":
        from .actor import RunnerActor

        return RunnerActor
    if name == "Guardian":
        from .guardian import Guardian

        return Guardian
    raise AttributeError(f"module 'actors.runner' has no attribute {name!r}")
