"""The Runner: a pure registry and supervision policy inside a thin actor shell.

`Registry` decides (routing, restarts, poison, passivation) and returns actions;
`RunnerActor` carries them out; `Guardian` keeps a Runner alive; `SinkRouter` fans
session output out to sinks.
"""

from __future__ import annotations

from .actor import RunnerActor, spine_path
from .entry import EntryState
from .guardian import Guardian
from .registry import Registry
from .sinks import SinkRouter

__all__ = ["EntryState", "Guardian", "Registry", "RunnerActor", "SinkRouter", "spine_path"]
