"""`Guardian`: the fixed point hosts ask. It keeps a Runner (and the status projection
actor) alive, replacing either if it dies."""

from __future__ import annotations

import logging
import os
from typing import Any

from thespian.actors import ActorExitRequest, ChildActorExited

from projections import ProjectionActor, StartProjection

from ... import messages as m
from ..._runtime.shell import GuardedActor
from ..._runtime.system import configure_actor_logging, data_identity
from ...messages import GetRunner, Ping, Pong, RunnerAddress, RunnerConfig
from .. import checkpoint_location, spine_spec
from ..protocol import UseProjection
from .actor import RunnerActor


def _log() -> logging.Logger:
    return logging.getLogger("vertebra.runner")


class Guardian(GuardedActor):
    """Keeps a Runner alive: creates it, configures it, and replaces it if it dies.

    A top-level actor has no supervisor, and a ``globalName`` lookup silently creates a
    fresh, unconfigured actor after a death; the guardian is the fixed point hosts ask.
    Each Runner it starts is a new ``generation``, so hosts notice a replacement.
    """

    log_name = "vertebra.runner"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cfg: RunnerConfig | None = None
        self.runner: Any = None
        self.generation = 0
        self.waiting: list[tuple[str, Any]] = []
        self.ready = False
        self.exiting = False
        self.projection: Any = None

    def _start(self) -> None:
        assert self.cfg is not None
        self.generation += 1
        self.ready = False
        self.runner = self.createActor(RunnerActor)
        self.send(self.runner, self.cfg)
        if self.projection is not None:
            self.send(self.runner, UseProjection(address=self.projection))

    def _start_projection(self) -> None:
        """The status projection folds the spine in its own process, checkpointing to its
        own file; after a crash it resumes from the checkpoint."""
        assert self.cfg is not None
        self.projection = self.createActor(ProjectionActor)
        self.send(
            self.projection,
            StartProjection(
                log_path=spine_spec(self.cfg.data_dir, self.cfg.spine).url,
                checkpoint_path=checkpoint_location(self.cfg.data_dir, self.cfg.spine),
            ),
        )
        if self.runner is not None:
            self.send(self.runner, UseProjection(address=self.projection))

    def receiveMsg_RunnerConfig(self, cfg: RunnerConfig, sender: Any) -> None:
        if self.cfg is None:
            self.cfg = cfg
            configure_actor_logging(cfg.data_dir)
            if cfg.projections:
                self._start_projection()
            self._start()
        self.waiting.append(("config", sender))
        self._flush()

    def receiveMsg_Done(self, msg: m.Done, sender: Any) -> None:
        if sender == self.runner:
            self.ready = True
            self._flush()

    def _flush(self) -> None:
        if not self.ready:
            return
        waiting, self.waiting = self.waiting, []
        for request_id, to in waiting:
            self.send(
                to,
                RunnerAddress(
                    request_id=request_id,
                    address=self.runner,
                    generation=self.generation,
                    projection=self.projection,
                    data_id=data_identity(self.cfg.data_dir) if self.cfg is not None else "",
                ),
            )

    def receiveMsg_StartedReply(self, msg: Any, sender: Any) -> None:
        """The projection actor started; nothing to do."""

    def receiveMsg_ProjectionFailed(self, msg: Any, sender: Any) -> None:
        _log().error("projection actor failed to start: %s", getattr(msg, "reason", msg))

    def receiveMsg_GetRunner(self, msg: GetRunner, sender: Any) -> None:
        if self.cfg is None:
            text = "no runner configured"
            self.send(
                sender,
                m.RequestFailed(request_id=msg.request_id, error="RunnerClosed", message=text),
            )
            return
        self.waiting.append((msg.request_id, sender))
        self._flush()

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: Any) -> None:
        self.exiting = True

    def receiveMsg_Ping(self, msg: Ping, sender: Any) -> None:
        self.send(sender, Pong(request_id=msg.request_id, pid=os.getpid()))

    def receiveMsg_ChildActorExited(self, msg: ChildActorExited, sender: Any) -> None:
        if self.exiting:
            return
        if self.projection is not None and msg.childAddress == self.projection:
            _log().error("projection actor died; starting it again from its checkpoint")
            self._start_projection()
            return
        if self.runner is not None and msg.childAddress == self.runner and self.cfg is not None:
            _log().error("runner died; starting generation %d", self.generation + 1)
            self._start()
