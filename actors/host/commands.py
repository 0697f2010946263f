"""`SessionCommands`: the `Host` methods that ask a session to do or record something
(create, send, interrupt, metadata, approvals, goals, switch, seal, verify, close, revive)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from projections import secret_problem
from spine import Kind, Log, SpineError, new_session_id, validate_session_id

from .. import messages as m
from ..authority import Authority, refusal
from ..errors import ActorsError, InvalidRequest, NotAuthorized
from ..model_servers import ModelServers
from ..policy import BusyPolicy
from ..session.rules.goals import budget_problem
from .goals import in_flight, runs_in_flight
from .replies import request_id

log = logging.getLogger("vertebra.host")


class SessionCommands:
    """Requests to the Runner that change a session; each returns once it is answered.

    A mixin of `Host`, which provides the spine and the Runner round trip.
    """

    _log: Log
    model_servers: ModelServers

    if TYPE_CHECKING:

        def _request(self, msg: Any, *, timeout: float | None = None) -> Any: ...

    def create(
        self,
        session_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        *,
        authority: str = Authority.OPERATOR,
    ) -> str:
        """Create a session and return its id (a fresh UUIDv7 unless given).

        Raises `SessionAlreadyExists` if the id is taken; the existing session is untouched.
        ``authority`` ``session`` holds ``metadata`` to the authority table
        (`actors.authority`): an operator's key is `InvalidRequest` naming it.
        """
        sid = session_id if session_id is not None else new_session_id()
        try:
            validate_session_id(sid)
        except ValueError as exc:
            raise InvalidRequest(str(exc), session_id=str(sid)) from None
        if metadata is not None:
            if not isinstance(metadata, Mapping):
                raise InvalidRequest(
                    f"metadata must be a mapping of strings to strings, got "
                    f"{type(metadata).__name__}",
                    session_id=sid,
                )
            for k, v in metadata.items():
                if not isinstance(k, str) or not k or not isinstance(v, str):
                    raise InvalidRequest(
                        f"metadata must map non-empty string keys to strings, got {k!r}: {v!r}",
                        session_id=sid,
                    )
        problem = refusal(metadata or {}, {}, authority, self.model_servers)
        if problem is not None:
            raise NotAuthorized(problem, session_id=sid)
        problem = secret_problem(metadata or {})
        if problem is not None:
            raise InvalidRequest(problem, session_id=sid)
        self._request(
            m.CreateSession(request_id=request_id(), session_id=sid, metadata=dict(metadata or {}))
        )
        return sid

    def send(
        self,
        session_id: str,
        text: str,
        *,
        key: str | None = None,
        mode: str | BusyPolicy = "",
        edits: int = 0,
        regenerates: int = 0,
    ) -> m.Ack:
        """Send a user message; returns once its event is committed (or the interceptors
        consumed it). Retrying with the same ``key`` never stores it twice.

        ``mode`` is this message's busy policy (default: the session's): ``steer`` hands it
        to the running turn at its next safe point (`Host.edit` and `Host.regenerate` use
        ``edits`` and ``regenerates``)."""
        if not isinstance(text, str):
            raise InvalidRequest("a message's text must be a string")
        if mode:
            mode = BusyPolicy.parse(mode)
        msg = m.SendMessage(
            request_id=request_id(),
            session_id=session_id,
            key=key or request_id(),
            text=text,
            mode=str(mode),
            edits=edits,
            regenerates=regenerates,
        )
        return self._request(msg)  # type: ignore[no-any-return]

    def interrupt(
        self, session_id: str, *, reason: str = "interrupted", key: str | None = None
    ) -> m.Ack:
        """Cut the running turn off; it closes with ``turn.cancelled`` keeping partial output."""
        msg = m.Interrupt(
            request_id=request_id(), session_id=session_id, key=key or request_id(), reason=reason
        )
        return self._request(msg)  # type: ignore[no-any-return]

    def set_metadata(
        self,
        session_id: str,
        properties: Mapping[str, str | None],
        *,
        key: str | None = None,
        authority: str = Authority.OPERATOR,
    ) -> m.Ack:
        """Change metadata (``None`` deletes a key); stored as a properties event.

        ``authority`` ``session`` (a write on the session's behalf, e.g. through its scoped
        token) may set only what the authority table lets a session set; the session
        refuses the rest with `InvalidRequest` naming the key, and stores nothing."""
        if not isinstance(properties, Mapping):
            raise InvalidRequest(
                f"metadata must be a mapping, got {type(properties).__name__}",
                session_id=session_id,
            )
        for k, v in properties.items():
            if not isinstance(k, str) or not k or (v is not None and not isinstance(v, str)):
                raise InvalidRequest(
                    f"metadata must map non-empty string keys to strings or None, got {k!r}: {v!r}"
                )
        problem = secret_problem(properties)
        if problem is not None:
            raise InvalidRequest(problem, session_id=session_id)
        msg = m.SetMetadata(
            request_id=request_id(),
            session_id=session_id,
            key=key or request_id(),
            properties=dict(properties),
            authority=str(Authority(authority)),
        )
        return self._request(msg)  # type: ignore[no-any-return]

    def approve(
        self,
        session_id: str,
        call: int,
        note: str = "",
        *,
        key: str | None = None,
        raise_by: float = 0.0,
        content: Mapping[str, Any] | None = None,
    ) -> m.Ack:
        """Approve the governed action ``call`` that waits for a human (see `pending`): it
        runs once, even if the session restarted while waiting. Approving it again is
        acknowledged as a duplicate; an unknown or already rejected call is
        `InvalidRequest`. A call paused for the cost budget is approved with ``raise_by``:
        the budget grows by that much and the same turn goes on. A server's question
        (action ``elicitation``) is answered with ``content``, the asked fields (`reject`
        declines it)."""
        return self._decide(session_id, call, True, note, key, raise_by, content)

    def reject(
        self, session_id: str, call: int, reason: str = "", *, key: str | None = None
    ) -> m.Ack:
        """Refuse the waiting action ``call``: ``action.rejected`` with fault
        ``approval_rejected``, and the model is told why."""
        return self._decide(session_id, call, False, reason, key)

    def resolve(
        self,
        session_id: str,
        call: int,
        result: str,
        note: str = "",
        *,
        is_error: bool = False,
        key: str | None = None,
    ) -> m.Ack:
        """Answer the in-doubt call that the waiting action ``call`` asks about (an
        ``action.pending`` with reason ``in_doubt``) with ``result``, the outcome a human
        knows it had: stored as the call's ``tool.result`` (``is_error``: as an error), the
        call is never run again, and its turn goes on with it. An action that is not in
        doubt, or is decided already, is `InvalidRequest`."""
        if not isinstance(result, str) or not result:
            raise InvalidRequest("a result given by hand must be a non-empty string")
        if not isinstance(is_error, bool):
            raise InvalidRequest("is_error must be a boolean")
        return self._decide(session_id, call, False, note, key, result=(result, is_error))

    def _decide(
        self,
        session_id: str,
        call: int,
        approve: bool,
        note: str,
        key: str | None,
        raise_by: float = 0.0,
        content: Mapping[str, Any] | None = None,
        result: tuple[str, bool] = ("", False),
    ) -> m.Ack:
        if content is not None and not (
            isinstance(content, Mapping) and all(isinstance(k, str) and k for k in content)
        ):
            raise InvalidRequest("an answer's content must be an object of named fields")
        if not isinstance(call, int) or isinstance(call, bool) or call <= 0:
            raise InvalidRequest(f"call must be a positive integer, got {call!r}")
        if not isinstance(note, str):
            raise InvalidRequest("the note must be a string")
        if isinstance(raise_by, bool) or not isinstance(raise_by, int | float) or raise_by < 0:
            raise InvalidRequest(f"raise_by must be a non-negative amount, got {raise_by!r}")
        msg = m.DecideAction(
            request_id=request_id(),
            session_id=session_id,
            key=key or request_id(),
            call=call,
            approve=approve,
            note=note,
            raise_by=float(raise_by),
            content=dict(content) if content is not None else None,
            result=result[0],
            is_error=result[1],
        )
        return self._request(msg)  # type: ignore[no-any-return]

    def submit(
        self,
        session_id: str,
        objective: str,
        *,
        budget: Mapping[str, float] | None = None,
        key: str | None = None,
    ) -> m.Ack:
        """Open a goal run on ``session_id``: the session drives turns on its own until it
        converges or stalls (`wait`). ``budget`` limits ``max_turns``, ``max_tokens``,
        ``max_tool_calls`` and ``max_seconds`` from the run's start; exhausting one is an
        ``action.rejected`` (``budget_exceeded``), then ``session.stalled``. ``max_cost``
        (money, under the operator's prices) is reserved before every model call: one that
        would pass it pauses the session (``session.paused``) and asks, like the session's
        own budget; ``approve(..., raise_by=X)`` grows the run's budget and the same turn
        goes on, a rejection stalls the run."""
        if not isinstance(objective, str) or not objective.strip():
            raise InvalidRequest("a goal's objective must be a non-empty string")
        problem = budget_problem(budget or {})
        if problem:
            raise InvalidRequest(problem, session_id=session_id)
        msg = m.SubmitGoal(
            request_id=request_id(),
            session_id=session_id,
            key=key or request_id(),
            objective=objective,
            budget=dict(budget or {}),
        )
        return self._request(msg)  # type: ignore[no-any-return]

    def resume(self, session_id: str, *, key: str | None = None) -> m.Ack:
        """Continue a goal run cut off by a crash or a daemon restart, on the same stream
        (no second ``session.started``). The Ack is ``consumed`` when no run was in flight."""
        msg = m.ResumeGoal(request_id=request_id(), session_id=session_id, key=key or request_id())
        return self._request(msg)  # type: ignore[no-any-return]

    def resume_all(self) -> list[str]:
        """Resume every goal run still in flight in the spine (after a daemon restart);
        returns the sessions resumed. Reads every stream once."""
        resumed = []
        for sid in runs_in_flight(self._log):
            try:
                if not self.resume(sid).consumed:
                    resumed.append(sid)
            except ActorsError as exc:  # one session that cannot come back stops no other
                log.warning("goal run of %s not resumed: %s", sid, exc)
        return resumed

    def recover_cut_off(self) -> list[str]:
        """Bring back every session whose stream ends inside a turn (a daemon crash cut it
        off), so that it closes the turn and the auto-seal policy covers what that wrote,
        instead of both waiting for the next write. Reads a few rows per stream; returns
        the sessions brought back. A goal run in flight is left alone: up, it would go on,
        and going on after a daemon restart is asked for (`resume_all`)."""
        back = []
        for info in self._log.streams():
            try:
                if not _ends_in_a_turn(self._log, info.stream, info.last_seq):
                    continue
                if in_flight(info.stream, self._log.read_events(info.stream)):
                    continue
                self._request(m.GetSession(request_id=request_id(), session_id=info.stream))
            except (ActorsError, SpineError) as exc:  # one that cannot come back stops none
                log.warning("session %s not recovered: %s", info.stream, exc)
                continue
            back.append(info.stream)
        return back

    def switch(self, session_id: str, target: str, *, key: str | None = None) -> m.Ack:
        """Record that the conduit moves to ``target`` (a session switch event)."""
        msg = m.SwitchSession(
            request_id=request_id(), session_id=session_id, key=key or request_id(), target=target
        )
        return self._request(msg)  # type: ignore[no-any-return]

    def seal(self, session_id: str) -> m.SealReply:
        """Seal what is new in the session's stream: a signed Merkle root over the stored
        bytes, appended as ``record.sealed`` by the session itself. ``seq`` 0: nothing new."""
        return self._request(m.SealSession(request_id=request_id(), session_id=session_id))  # type: ignore[no-any-return]

    def verify(self, session_id: str) -> m.VerifyReply:
        """Verify every seal of the session; ``record.verified`` records the outcome, pass
        or failure (``ok`` and ``summary`` say which)."""
        return self._request(m.VerifySession(request_id=request_id(), session_id=session_id))  # type: ignore[no-any-return]

    def close_session(self, session_id: str) -> None:
        """Close one session: it records a "closed" lifecycle event and its actor stops."""
        self._request(m.CloseSession(request_id=request_id(), session_id=session_id))

    def revive(self, session_id: str, reason: str = "") -> int:
        """Bring back a session that failed past its restart budget; the decision is
        stored as a ``recovered`` lifecycle event naming ``reason``, whose seq is returned.
        The next request starts the session. `InvalidRequest` if it is not failed."""
        reply = self._request(
            m.ReviveSession(request_id=request_id(), session_id=session_id, reason=reason)
        )
        return int(reply.seq)

    def close_all(self) -> None:
        """Close every session; the Runner takes no more ingress afterwards."""
        self._request(m.CloseAll(request_id=request_id()))


#: Kinds stored only while a turn runs: a stream ending in one was cut off mid-turn.
_IN_TURN = frozenset(
    {
        Kind.TURN_STARTED,
        Kind.ASSISTANT,
        Kind.TOOL_CALL,
        Kind.TOOL_RESULT,
        Kind.ACTION_ADMITTED,
        Kind.ACTION_COMPLETED,
        Kind.ACTION_REJECTED,
        Kind.EGRESS,
        Kind.CHILD_SPAWNED,
        Kind.CHILD_COMPLETED,
        Kind.STEER_DELIVERED,
    }
)
#: Kinds appended whether or not a turn runs (a seal by count may land mid-turn, a
#: message may wait for the running turn).
_ANYTIME = frozenset(
    {
        Kind.RECORD_SEALED,
        Kind.RECORD_VERIFIED,
        Kind.PROPERTIES,
        Kind.USER_MESSAGE,
        Kind.INTERRUPT,
        Kind.SESSION_SWITCH,
    }
)
#: Rows looked at from a stream's end before deciding it is not inside a turn.
_TAIL = 8


def _ends_in_a_turn(log: Log, sid: str, last_seq: int) -> bool:
    """Whether the newest rows of ``sid`` (seals, metadata and ingress aside) are a turn's.

    A turn waiting for an approval (``action.pending``) is not cut off: it waits."""
    rows = log.read(sid, max(0, last_seq - _TAIL), _TAIL)
    for r in reversed(rows):
        if r.kind not in _ANYTIME:
            return r.kind in _IN_TURN
    return False
