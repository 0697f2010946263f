"""`Exit`: what is left of an incarnation that has asked the Runner to stop it.

Ingress that still reaches it goes back to the Runner (which learned of the stop before
the bounce arrives: same sender, ordered) to be served by the next incarnation; the turn's
output is dropped (the turn was cancelled); news still gathered goes out; the log is
closed when the Runner ends the process.
"""

from __future__ import annotations

from ..protocol import Routed
from .incarnation import Incarnation
from .parent import Parent


class Exit:
    """A stopping incarnation, waiting for the Runner to end its process."""

    def __init__(self, was: Incarnation, reason: str) -> None:
        self.was = was
        self.reason = reason

    @property
    def parent(self) -> Parent:
        return self.was.parent

    def fds(self) -> list[int]:
        return self.was.fds()

    def bounce(self, routed: Routed) -> None:
        self.was.actor.send(self.was.runner, routed)

    def after_message(self) -> None:
        """The slot is emptied (its descriptor would keep waking the loop; what it held is
        dropped) and news the last handler gathered goes out as a live incarnation's would."""
        self.was.after_message()

    def drain(self) -> None:
        self.was.drain()

    def notify_due(self) -> None:
        self.was.notify_due()

    def close(self, tell: bool = True) -> None:
        if tell:
            self.was.notify(now=True)
        self.was.close()
