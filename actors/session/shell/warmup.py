"""A spare session process's warm-up: one goal run in memory before it serves anything.

A forked process runs every path for the first time slowly: its pages are shared with
the Runner until written (reference counts write them), the interpreter has not yet
specialised the code, and the turn's threads, the provider loop and its tool executor
do not exist yet. A goal's child then paid for all of it on its first model call through
the gate (8-9 ms against 4 ms in a warm process). A spare runs one goal run through the
same code a session runs (the decider, the gate, the fold, the event codec, the turn
worker, the tool loop with the scripted model and a calculator call) against an
in-memory log while nothing waits for it, so the session it is handed later starts warm.

Nothing here touches the spine, the Runner or the network: the stream lives in a
`spine.MemoryLog` and is dropped afterwards.
"""

from __future__ import annotations

import queue
import time
from typing import Any

import attrs

from spine import Kind

from ...agents import ModelFactory
from ..rules import commands as c
from ..rules.state import GOAL_OBJECTIVE
from .executor import RecordingPorts
from .kit import SessionKit
from .worker import TurnWorker

__all__ = ["WARM_UP", "warm_up"]

#: The warm-up's session id (a valid id that no session has: it never reaches the spine).
WARM_UP = "warm-up"

#: The warm-up run's objective: a model call, a tool call through the gate, the answer.
OBJECTIVE = '!tool calculator {"expression": "6*7"}'


@attrs.define
class _WarmPorts(RecordingPorts):
    """Recording ports that run the turn on a worker, handing its output to ``handed``."""

    handed: queue.SimpleQueue[Any] = attrs.field(factory=queue.SimpleQueue)
    factory: ModelFactory = attrs.field(factory=ModelFactory)
    worker: TurnWorker | None = None

    def start_turn(self, effect: c.StartTurn) -> c.Command | None:
        self.worker = TurnWorker(self.handed.put, effect.turn, 0.02)
        self.worker.start(self.factory.build(effect.spec, self.session_id), effect.input)
        return None

    def answer_worker(self, effect: c.AnswerWorker) -> None:
        if self.worker is not None:
            self.worker.answer(
                effect.action,
                effect.tool_use_id,
                effect.verdict,
                effect.call,
                effect.fault,
                key=effect.key,
                steers=effect.steers,
                answer=effect.answer,
            )


class _WarmKit(SessionKit):
    """The in-memory session, its turns run by workers."""

    _ports_type = _WarmPorts


def warm_up(timeout: float = 2.0) -> bool:
    """Run one scripted goal run in memory; True when it converged within ``timeout``
    seconds (a warm-up that does not finish is abandoned: the session warms as it runs)."""
    deadline = time.monotonic() + timeout
    kit = _WarmKit(session_id=WARM_UP)
    ports = kit._ports
    assert isinstance(ports, _WarmPorts)
    out = kit.create({GOAL_OBJECTIVE: OBJECTIVE})
    while True:
        if any(e.kind in (Kind.CONVERGED, Kind.STALLED) for e in out.events):
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        try:
            msg = ports.handed.get(timeout=left)
        except queue.Empty:
            return False
        if isinstance(msg, c.Govern):
            msg = attrs.evolve(msg, now=time.time())
        out = kit.run(msg)
