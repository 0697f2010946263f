"""`Spares`: session processes the Runner starts ahead of need.

Starting a process is most of what creating a session costs (a goal's children wait on
it): a spare is started, told to stand by (`Standby`: it opens the log and warms up), and
handed the next session to start.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from ...messages import RunnerConfig
from ...session import protocol as sp
from ...session.shell.actor import SessionActor
from ...session.shell.warmup import warm_for_forks
from .. import spine_path, spine_spec
from ..protocol import SparesDue

#: Seconds after a spare session process is used before the Runner starts another.
SPARE_REFILL_AFTER = 0.2


class Spares:
    """The spare processes of one Runner, those started and those ready."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        #: Session processes started ahead of need (`RunnerConfig.spare_sessions`).
        self.started: list[Any] = []
        #: Those of `started` that have answered `Standby` (opened and warmed up).
        self.standing: list[Any] = []
        self.refill_due = False
        #: Asked to start no more (`StopSpares`).
        self.stopped = False
        #: Whether this Runner has warmed up for the session processes it forks.
        self.warmed = False

    def refill(self, cfg: RunnerConfig) -> None:
        """Start spare session processes up to `RunnerConfig.spare_sessions`."""
        if self.stopped:
            return
        if not self.warmed:
            # Warm or cold, a spare inherits what this run specialises and fills as pages
            # it shares (`warmup`); a warm spare then only starts its threads and runs a
            # chat turn of its own.
            self.warmed = True
            try:
                warm_for_forks()
            except Exception:  # a Runner handler never raises; its children warm as they run
                logging.getLogger("vertebra.runner").warning("warm-up failed", exc_info=True)
        while len(self.started) < cfg.spare_sessions:
            address = self.runner.createActor(SessionActor)
            spine = spine_spec(cfg.data_dir, cfg.spine).url
            standby = sp.Standby(
                db_path=spine_path(cfg.data_dir), spine=spine, warm=cfg.warm_spares
            )
            self.runner.send(address, standby)
            self.started.append(address)

    def take(self) -> Any:
        """A spare to configure (one that is ready if there is one: another may still be
        starting), or None; another is started later, not now: starting a process now
        would compete with the session just handed out (and with its siblings of the same
        fan-out) for the CPU."""
        if not self.started:
            return None
        address = self.standing.pop(0) if self.standing else self.started[0]
        self.started.remove(address)
        if not self.refill_due:
            self.refill_due = True
            self.runner.wakeupAfter(timedelta(seconds=SPARE_REFILL_AFTER), SparesDue())
        return address

    def ready(self, address: Any) -> None:
        if address in self.started and address not in self.standing:
            self.standing.append(address)

    def exited(self, address: Any) -> bool:
        """Forget a spare that exited; whether ``address`` was one. Not refilled here: a
        spare that cannot stay up would be started in a loop."""
        if address not in self.started:
            return False
        self.started.remove(address)
        if address in self.standing:
            self.standing.remove(address)
        return True

    def stats(self) -> dict[str, int]:
        return {"spare_sessions": len(self.started), "spare_sessions_ready": len(self.standing)}
