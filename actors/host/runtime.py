"""Where a Host's runtime is, and requests to it that survive a Runner restart.

The guardian (``vertebra.guardian``) creates the Runner and the status projection actor
and replaces either when it dies; `Runtime` remembers their addresses, asks the guardian
again when the Runner stops answering, and resends the request to a replacement. A request
that may be delivered twice (`IDEMPOTENT`) is also sent again after `RESEND_AFTER` seconds
without a reply (Thespian delivers at most once), but only when it is lost: the Runner
is asked where it stands first (`Silence`), so a session that is loading its stream or
busy is waited for, not sent copies. Projection requests go
through the same reply matching; a projection actor that is missing, silent or refusing
only means the Host folds the stream itself.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from .. import messages as m
from .._runtime.system import data_identity
from ..errors import ActorsError, HostTimeout, InvalidRequest, WrongDaemon
from ..messages import GetRunner, Ping, Pong, RunnerAddress, RunnerConfig, SessionPid
from ..runner.shell.guardian import Guardian
from ..session.protocol import WAITING, FindRequest
from ..validation import field_problem
from .replies import raise_failed, request_id
from .transport import Transport


def _str_or_empty(msg: Any, name: str) -> str:
    value = getattr(msg, name, "")
    return value if isinstance(value, str) else ""


log = logging.getLogger("vertebra.host")

GUARDIAN_NAME = "vertebra.guardian"
#: Seconds between checks, while a request waits, that the Runner is still the same one.
RUNNER_CHECK = 0.5
#: Seconds without a reply after which an idempotent request is sent again.
RESEND_AFTER = 2.0
#: Requests that may be delivered twice: ingress dedups by its key, the rest change
#: nothing or the same thing again. A create is not among them (a second one would report
#: the session it created as already existing), nor a subscribe (a second subscription).
IDEMPOTENT: tuple[type, ...] = (
    m.SendMessage,
    m.Interrupt,
    m.SetMetadata,
    m.SwitchSession,
    m.SwitchBranch,
    m.DecideAction,
    m.SubmitGoal,
    m.SetTimer,
    m.CancelTimer,
    m.ResumeGoal,
    m.GetSession,
    m.RegisterSession,
    m.ListSessions,
    m.CloseSession,
    m.CloseAll,
    m.GetRunnerStats,
    m.GetHostTable,
    SessionPid,
    Ping,
)
#: Seconds to wait for the projection actor before looking it up again (or folding here).
PROJECTION_TIMEOUT = 1.0


class Runtime:
    """The guardian, the current Runner and projection actor, and requests to them.

    ``follow_restarts`` is false on ``simpleSystemBase``, where nothing is replaced
    behind the Host's back (everything runs in its own thread).
    """

    def __init__(self, transport: Transport, timeout: float, follow_restarts: bool) -> None:
        self._transport = transport
        self._timeout = timeout
        self._follow = follow_restarts
        self.guardian: Any = None
        self.runner: Any = None
        self.generation = 0
        self.projection: Any = None
        #: Requests sent again for want of a reply (`RESEND_AFTER`).
        self.resent = 0

    def start(self, cfg: RunnerConfig) -> None:
        """Find or create the guardian and configure it: it starts the Runner."""
        self.guardian = self._transport.system.createActor(Guardian, globalName=GUARDIAN_NAME)
        # The guardian answers a configuration with the request id "config".
        reply = self._transport.ask(self.guardian, cfg, self._timeout, request_id="config")
        if not isinstance(reply, RunnerAddress):
            raise HostTimeout(f"the runtime did not start within {self._timeout}s")
        mine = data_identity(cfg.data_dir)
        if reply.data_id and mine and reply.data_id != mine:
            # Reached (and authenticated with) a daemon that serves another directory:
            # a copied secret, or a port that now belongs to another daemon.
            raise WrongDaemon(
                f"the actor system on this admin port serves another data directory, "
                f"not {cfg.data_dir!r}"
            )
        self._learn(reply)

    def guardian_pid(self) -> int:
        """The guardian's process id."""
        pong = self._transport.ask(self.guardian, Ping(request_id=request_id()), self._timeout)
        if not isinstance(pong, Pong):
            raise HostTimeout(f"the guardian did not answer within {self._timeout}s")
        return pong.pid

    def request(self, msg: Any, timeout: float) -> Any:
        """Send ``msg`` to the Runner and return its reply; a failure reply raises.

        While waiting, the guardian is asked every `RUNNER_CHECK` seconds whether the
        Runner was replaced; if so the request goes to the new one, so a Runner crash
        costs well under a second. A request that may go twice and has no reply after
        `RESEND_AFTER` seconds is sent again only when it is lost (`Silence`).
        """
        problem = field_problem(msg)
        if problem is not None:
            raise InvalidRequest(
                f"{type(msg).__name__}: {problem}", session_id=_str_or_empty(msg, "session_id")
            )
        deadline = time.monotonic() + timeout
        silence = Silence(self, msg)
        reply = self._transport.ask(self.runner, msg, min(RUNNER_CHECK, timeout))
        while reply is None:
            now = time.monotonic()
            left = deadline - now
            if left <= 0:
                raise HostTimeout(f"no reply to {type(msg).__name__} within {timeout}s")
            if self._follow and self.refresh():
                self._transport.tell(self.runner, msg)
                silence.restart(now)
            elif self._follow and isinstance(msg, IDEMPOTENT):
                reply = silence.check(now)
                if reply is not None:
                    break
            reply = self._transport.wait(msg.request_id, min(RUNNER_CHECK, left))
        return raise_failed(reply)

    def resend(self, msg: Any, silent: float) -> None:
        # Thespian delivers at most once: a message lost between actors is sent again
        # rather than waited for until the timeout.
        log.warning("no reply to %s after %.1fs; sending it again", type(msg).__name__, silent)
        self._transport.tell(self.runner, msg)
        self.resent += 1

    def refresh(self) -> bool:
        """Ask the guardian where the Runner and the projection actor are; True if the
        Runner changed."""
        reply = self._transport.ask(
            self.guardian, GetRunner(request_id=request_id()), self._timeout
        )
        if not isinstance(reply, RunnerAddress):
            return False
        changed = bool(reply.generation != self.generation or reply.address != self.runner)
        self._learn(reply)
        return changed

    def _learn(self, reply: RunnerAddress) -> None:
        self.runner, self.generation = reply.address, reply.generation
        self.projection = reply.projection

    def ask_projection(self, msg: Any) -> Any:
        """The projection actor's reply to ``msg``; if none comes promptly (it died and
        the guardian is restarting it), look it up again and ask once more. None when
        there is no projection actor, or it does not answer, or it refuses."""
        for attempt in range(2):
            if self.projection is None:
                return None
            reply = self._transport.ask(self.projection, msg, PROJECTION_TIMEOUT)
            if reply is not None:
                try:
                    return raise_failed(reply)
                except ActorsError as exc:
                    log.info("%s", exc)
                    return None
            if attempt == 0 and self._follow:
                with contextlib.suppress(ActorsError):
                    self.refresh()
        return None


class Silence:
    """A request without a reply, and whether to send it again: asked, not guessed.

    After `RESEND_AFTER` seconds the Runner is asked where the request stands
    (`FindRequest`). Queued for a session that is loading or restarting (`WAITING`): it
    goes on when the session is ready, however long that takes. Keyed ingress forwarded
    to a live session: the session answers once it has handled what the Runner sent it
    before, on the path its reply takes, so a reply not arrived by then is lost. Held
    nowhere: lost. A lost request is sent again; a question without an answer (a busy
    session, or the question lost) is asked again, never taken for a loss.
    """

    def __init__(self, rt: Runtime, msg: Any) -> None:
        self.rt, self.msg = rt, msg
        #: When the request was last sent or last known to wait.
        self.since = time.monotonic()
        #: The question in flight (its request id, when asked), if any.
        self.asked: tuple[str, float] | None = None

    def restart(self, now: float) -> None:
        self.since, self.asked = now, None

    def check(self, now: float) -> Any:
        """The request's reply if it came in ahead of the answer, else None (and the
        request sent again if the answer says it is lost)."""
        transport = self.rt._transport
        if self.asked is not None:
            answer = transport.wait(self.asked[0], 0)
            if answer is None:
                if now - self.asked[1] >= RESEND_AFTER:
                    self._ask(now)
                return None
            self.asked = None
            reply = transport.wait(self.msg.request_id, 0)
            if reply is not None:
                return reply
            if getattr(answer, "where", "") != WAITING:
                self.rt.resend(self.msg, now - self.since)
            self.since = now
        elif now - self.since >= RESEND_AFTER:
            if getattr(self.msg, "session_id", ""):
                self._ask(now)
            else:  # not a session's: nobody holds it but the Runner, which answers at once
                self.rt.resend(self.msg, now - self.since)
                self.since = now
        return None

    def _ask(self, now: float) -> None:
        rid = request_id()
        self.asked = (rid, now)
        find = FindRequest(
            request_id=rid, session_id=self.msg.session_id, about=self.msg.request_id
        )
        self.rt._transport.tell(self.rt.runner, find)
