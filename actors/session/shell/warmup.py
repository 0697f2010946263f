"""The warm-up of session processes: a goal run and a chat turn in memory, before anything
waits for them.

A forked process runs every path for the first time slowly: the interpreter has not yet
specialised the code, caches are empty, its pages are shared with the Runner until written
(reference counts write them), and the turn's threads, the provider loop and its tool
executor do not exist yet. A goal's child then paid for all of it on its first model call
through the gate (8-9 ms against 4 ms in a warm process). The work is split by where it
pays off:

- the Runner runs `warm_for_forks` once before it forks its first session process: one
  goal run (the decider, the gate, the fold, the event codec, the turn worker, the tool
  loop with the scripted model and a calculator call) and a chat turn. Code specialised
  and caches filled there are inherited by every session as pages they share;
- a spare (`warm_spare`, `RunnerConfig.warm_spares`) then starts the threads a goal's
  first tool call would wait for (a turn thread, the provider loop and one thread of its
  tool executor) and runs a chat turn, the path every session takes. It runs no goal run
  of its own: those pages (about 1 MB) would be written in every session, chat sessions
  included, and measured in a forked child the spare's own goal run bought less than
  the threads did (docs/performance.md).

Nothing here touches the spine, the Runner or the network: the streams live in a
`spine.MemoryLog` and are dropped afterwards.
"""

from __future__ import annotations

import asyncio
import gc
import queue
import time
from typing import Any

import attrs

from spine import Kind

from ...agents import ModelFactory
from ...agents.provider_loop import provider_loop, stop_provider_loop
from ..rules import commands as c
from ..rules.state import GOAL_OBJECTIVE
from . import turn_threads
from .executor import RecordingPorts
from .kit import SessionKit
from .worker import TurnWorker

__all__ = ["WARM_UP", "warm_for_forks", "warm_spare", "warm_up"]

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
    """Run one scripted goal run in memory, then one chat turn; True when both ended
    within ``timeout`` seconds (a warm-up that does not finish is abandoned: the session
    warms as it runs)."""
    deadline = time.monotonic() + timeout
    kit = _WarmKit(session_id=WARM_UP)
    ports = kit._ports
    assert isinstance(ports, _WarmPorts)
    out = kit.create({GOAL_OBJECTIVE: OBJECTIVE})
    if not _drive(kit, ports, out, (Kind.CONVERGED, Kind.STALLED), deadline):
        return False
    out = kit.send("hello")
    return _drive(kit, ports, out, (Kind.TURN_COMPLETED, Kind.TURN_CANCELLED), deadline)


def warm_spare(timeout: float = 2.0) -> bool:
    """A spare's warm-up: start the threads a session's first turns wait for, then run one
    chat turn in memory; True when both happened within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    if not _start_threads(timeout):
        return False
    kit = _WarmKit(session_id=WARM_UP)
    ports = kit._ports
    assert isinstance(ports, _WarmPorts)
    kit.create({})
    out = kit.send("hello")
    return _drive(kit, ports, out, (Kind.TURN_COMPLETED, Kind.TURN_CANCELLED), deadline)


def _start_threads(timeout: float) -> bool:
    """Start the provider loop and one thread of its tool executor (a tool call runs
    there: `agents.tool_run`); a new thread waits to be scheduled, on a busy machine for
    milliseconds, on the first tool call's path otherwise."""
    loop = provider_loop()

    async def start_executor() -> None:
        await loop.run_in_executor(None, int)

    try:
        asyncio.run_coroutine_threadsafe(start_executor(), loop).result(timeout)
    except Exception:
        return False
    return True


def _drive(
    kit: SessionKit, ports: _WarmPorts, out: Any, ends: tuple[str, ...], deadline: float
) -> bool:
    while True:
        if any(e.kind in ends for e in out.events):
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


def warm_for_forks() -> bool:
    """Warm this process up for the session processes it will fork (a Runner whose spares
    stay cold): `warm_up`, then end the threads the run started and collect its garbage,
    so that a child is forked from one thread and inherits no litter; True when all of
    that happened.

    A child then inherits the specialised code and what the run created once (caches,
    generated functions) as pages it shares with every other session, and writes only the
    pages its own work touches. A spare's own warm-up (`Spare`) is about time instead: it
    writes the pages a first goal run writes while nothing waits (about 1 MB a session,
    `RunnerConfig.warm_spares`).
    """
    warm = warm_up()
    quiet = turn_threads.retire() and stop_provider_loop()
    gc.collect()
    gc.freeze()
    return warm and quiet
