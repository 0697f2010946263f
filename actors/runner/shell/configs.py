"""What the Runner sends: a new session process's configuration and its own statistics."""

from __future__ import annotations

from typing import Any

from ... import messages as m
from ...messages import RunnerConfig
from ...session import protocol as sp
from .. import spine_path, spine_spec
from ..rules import actions as a

__all__ = ["runner_stats", "session_config"]


def session_config(cfg: RunnerConfig, action: a.Spawn, data_dir: str) -> sp.SessionConfig:
    """What a new session process is configured with."""
    return sp.SessionConfig(
        session_id=action.session_id,
        db_path=spine_path(data_dir),
        spine=spine_spec(cfg.data_dir, cfg.spine).url,
        incarnation=action.incarnation,
        interceptors=cfg.interceptors,
        factory=cfg.factory,
        busy_policy=cfg.busy_policy,
        create=action.create,
        metadata=action.metadata,
        auto_seal=cfg.auto_seal,
        snapshots=cfg.snapshots,
        prices=cfg.prices,
        model_servers=cfg.model_servers,
    )


def runner_stats(
    request_id: str, counters: dict[str, int], queues: Any, sinks: Any, appends: Any
) -> m.RunnerStats:
    return m.RunnerStats(
        request_id=request_id,
        counters=counters,
        queues=queues,
        sinks=sinks.pending(),
        append_bounds=appends.bounds,
        append_counts=tuple(appends.counts),
        append_seconds=appends.sum,
    )
