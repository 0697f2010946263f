"""`SessionReading`: the `Host` methods that read what sessions did: the log (history,
subscriptions, turns, pending approvals, goal outcomes) and the projections (status,
index, rebuild); `pending_actions` over a log."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import attrs

from projections import (
    IndexReply,
    Progress,
    ProgressReply,
    Projection,
    QueryIndex,
    QueryProgress,
    QueryStatus,
    Rebuild,
    RebuildCompleted,
    RebuildProgress,
    RebuildStartedReply,
    SessionsIndex,
    StatusReply,
    project_stored,
)
from spine import Event, Kind, Log, history, subscribe

from .. import messages as m
from ..errors import ActorsError, GoalInterrupted, HostTimeout, SessionNotFound
from ..session.rules.state import SessionState, fold
from ..session.rules.views import context_report
from .goals import interruption, wait_goal
from .replies import request_id
from .runtime import Runtime
from .subscription import SessionSubscription
from .transport import Transport

#: What settles a pending action (an answered question has only its decision).
_DECIDED = frozenset({Kind.ACTION_ADMITTED, Kind.ACTION_REJECTED, Kind.ACTION_APPROVAL})


def pending_actions(log: Log, session_id: str) -> list[Event]:
    """The ``action.pending`` events of ``session_id`` not yet decided, oldest first."""
    waiting: dict[int, Event] = {}
    for ev in history(log, session_id):
        if ev.goal and ev.goal != session_id:
            continue  # a child's events mirrored here: its calls and turns are its own
        if ev.kind == Kind.ACTION_PENDING:
            waiting[ev.call] = ev
        elif ev.kind in _DECIDED and ev.call in waiting:
            del waiting[ev.call]
        elif ev.kind in (Kind.TURN_COMPLETED, Kind.TURN_CANCELLED):
            waiting = {c: e for c, e in waiting.items() if e.turn != ev.turn}
    return list(waiting.values())


class SessionReading:
    """Reads of the spine and queries of the projection actor.

    A mixin of `Host`, which provides the spine, the runtime and the transport.
    """

    _log: Log
    _closed: bool
    _runtime: Runtime
    _transport: Transport

    if TYPE_CHECKING:

        def _request(self, msg: Any, *, timeout: float | None = None) -> Any: ...

    def sessions(self) -> list[m.SessionInfo]:
        """Every session the spine knows, with its state. A session the Runner has not
        loaded since it started is "passivated" to the Runner; the sessions index tells
        whether it is in fact closed or failed, and the status projection gives its
        metadata (no process holds it). Reading never brings a session back."""
        infos = list(self._request(m.ListSessions(request_id=request_id())).sessions)
        if not any(i.state == "passivated" for i in infos):
            return infos
        index = self.index()
        out = []
        for info in infos:
            if info.state == "passivated":
                info = self._stored_info(info, index)
            out.append(info)
        return out

    def info(self, session_id: str) -> m.SessionInfo:
        """Where a session stands, as `sessions` tells it: unlike `Host.get`, a passivated
        session stays passivated (a read must not start a process). Raises
        `SessionNotFound` for an unknown id."""
        for info in self._request(m.ListSessions(request_id=request_id())).sessions:
            if info.session_id == session_id:
                if info.state == "passivated":
                    return self._stored_info(info, self.index())
                return info  # type: ignore[no-any-return]
        raise SessionNotFound(f"no session {session_id}", session_id=session_id)

    def _stored_info(self, info: m.SessionInfo, index: SessionsIndex | None) -> m.SessionInfo:
        """A passivated session's info completed from the projections."""
        known = index.get(info.session_id) if index is not None else None
        if known is not None and known.terminal:
            info = attrs.evolve(info, state=known.terminal)
        if not info.metadata and info.last_seq > 0:
            info = attrs.evolve(info, metadata=dict(self.status(info.session_id).metadata))
        return info

    def pending(self, session_id: str) -> list[Event]:
        """The actions of ``session_id`` waiting for approval (their ``action.pending``
        events: ``call``, ``tool``, ``toolUseID``, ``input``), oldest first; read from
        the log."""
        return pending_actions(self._log, session_id)

    def wait(self, session_id: str, timeout: float | None = None) -> str:
        """The final answer of the session's latest goal run, once it converged; raises
        `GoalStalled` with the reason if it stalled, `HostTimeout` if it has not ended
        within ``timeout`` seconds (None: wait as long as it takes), and `GoalInterrupted`
        (its ``goal`` and ``seq``) as soon as the run is in flight with nothing driving it
        (`interrupted`): a wait never hangs on a run no process works on. Reads the
        stream, so it answers for a run that ended before the call, and across restarts."""
        return wait_goal(self._log, session_id, timeout, lambda: self.working(session_id))

    def interrupted(self, session_id: str) -> GoalInterrupted | None:
        """Why the session's latest goal run is interrupted: in flight in the log while no
        process is on the session (the daemon started with ``--no-resume-goals``, or the
        session failed) and no human was asked anything; `resume` continues it. None if it
        is not: ended, driven, waiting for a human, or no run at all."""
        return interruption(self._log, session_id, lambda: self.working(session_id))

    def working(self, session_id: str) -> bool:
        """Whether a process is on the session or about to be, as the Runner's registry
        knows it (`SessionInfo.working`); reading it never brings a session up."""
        reply = self._request(m.ListSessions(request_id=request_id(), session_id=session_id))
        return any(i.working for i in reply.sessions)

    def history(self, session_id: str) -> list[Event]:
        """Every stored event of the session, in order (empty for an unknown id)."""
        return history(self._log, session_id)

    def context(self, session_id: str) -> dict[str, Any]:
        """Where the session's context stands: its window and where that came from, the
        estimate of its next request, the last compaction (`context_report`; empty when
        nothing is managed: the scripted model without ``ore.model.context_window``)."""
        st = fold(SessionState(session_id=session_id), history(self._log, session_id))
        return context_report(st)

    def subscribe(
        self, session_id: str, after_seq: int = 0, kinds: Iterable[str] | None = None
    ) -> SessionSubscription:
        """Backlog after ``after_seq``, then live events, exactly once and in order.

        Ends (``get`` returns None, iteration stops) once the session is closed and every
        event up to its closing lifecycle event was handed out, like the seed's immediately
        closed channel. Reads the spine directly, so it survives session crashes and restarts.
        """
        return SessionSubscription(self._log, session_id, after_seq, kinds)

    def wait_turn(self, session_id: str, after_seq: int = 0, timeout: float = 30.0) -> Event:
        """The first ``turn.completed`` or ``turn.cancelled`` after ``after_seq``."""
        with subscribe(
            self._log, session_id, after_seq, (Kind.TURN_COMPLETED, Kind.TURN_CANCELLED)
        ) as sub:
            ev = sub.get(timeout)
        if ev is None:
            raise HostTimeout(f"no turn ended in session {session_id} within {timeout}s")
        return ev

    # -- the projections ---------------------------------------------------------------

    def status(self, session_id: str) -> Projection:
        """The session's status projection (`projections.Projection`).

        Answered by the projection actor when it has folded the session up to its last
        seq; otherwise (it is rebuilding, or a few milliseconds behind) folded here from the
        stream, so the answer is always exact.
        """
        last = self._log.last_seq(session_id)
        if last > 0:
            reply = self._ask_projection(QueryStatus(request_id=request_id(), session=session_id))
            if (
                isinstance(reply, StatusReply)
                and reply.status is not None
                and reply.info is not None
                and reply.info.last_seq == last
            ):
                return reply.status
        return project_stored(self._log, session_id)

    def index(self) -> SessionsIndex | None:
        """The sessions index (created, last seq, last activity, terminal state of every
        session), or None while the projection actor rebuilds or when it is disabled."""
        reply = self._ask_projection(QueryIndex(request_id=request_id()))
        return reply.index if isinstance(reply, IndexReply) else None

    def projection_pid(self) -> int | None:
        """The projection actor's process id (None if it does not answer)."""
        reply = self._ask_projection(QueryProgress(request_id=request_id()))
        return reply.pid if isinstance(reply, ProgressReply) else None

    def rebuild(
        self, on_progress: Callable[[Progress], None] | None = None, timeout: float = 3600.0
    ) -> RebuildCompleted:
        """Rebuild the projections from position 0 and wait until done; ``on_progress``
        gets the reducer's `Progress` as it goes (the projection actor reports it about
        ten times a second). Queries are answered by folding the stream meanwhile."""
        rid = request_id()
        started = self._ask_projection(Rebuild(request_id=rid))
        if not isinstance(started, RebuildStartedReply):
            raise ActorsError("no projection actor answers (projections disabled?)")
        if on_progress is not None:
            on_progress(started.progress)
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            msg = self._transport.wait(rid, min(left, 1.0))
            if isinstance(msg, RebuildCompleted):
                if on_progress is not None:
                    on_progress(msg.progress)
                return msg
            if isinstance(msg, RebuildProgress) and on_progress is not None:
                on_progress(msg.progress)
        raise HostTimeout(f"the projections were not rebuilt within {timeout}s")

    def _ask_projection(self, msg: Any) -> Any:
        return None if self._closed else self._runtime.ask_projection(msg)
