"""Ingress that changes a session (user messages, interrupts, metadata, approval decisions,
goal runs, switches), each under an idempotency ``key``, and its reply `Ack`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from .converters import _frozen_map, _tuple


@attrs.frozen(kw_only=True)
class SendMessage:
    """A user message; acknowledged once its event is committed.

    ``mode`` is this message's busy policy ("": the session's), e.g. ``steer``.
    ``edits`` (a past user message's seq) starts a new branch with this text in its
    place; ``regenerates`` answers a past user message again as a sibling branch (-1:
    the latest on the active path). The model sees only the active path."""

    request_id: str
    session_id: str
    key: str
    text: str
    mode: str = ""
    edits: int = 0
    regenerates: int = 0


@attrs.frozen(kw_only=True)
class SwitchBranch:
    """Make the branch through the turn whose user message is at ``turn`` the active
    path (down to its most recent turn). Answered with an `Ack`."""

    request_id: str
    session_id: str
    key: str
    turn: int


@attrs.frozen(kw_only=True)
class Interrupt:
    """Cut the running turn off; it closes with ``turn.cancelled`` keeping partial output."""

    request_id: str
    session_id: str
    key: str
    reason: str = "interrupted"


@attrs.frozen(kw_only=True)
class SetMetadata:
    """Change session metadata (``None`` deletes a key); emits a properties event."""

    request_id: str
    session_id: str
    key: str
    properties: Mapping[str, str | None] = attrs.field(converter=_frozen_map)
    #: On whose behalf (`actors.authority.Authority`): ``session`` writes are held to the
    #: authority table, ``operator`` ones are not.
    authority: str = "operator"


@attrs.frozen(kw_only=True)
class DecideAction:
    """A human's decision on a governed action waiting for approval (``call`` as the
    ``action.pending`` event names it): approve runs it once, reject refuses it with
    fault ``approval_rejected``, a ``result`` (for a call in doubt) answers it by hand.
    Answered with an `Ack`; deciding a call again the same way is a duplicate, an unknown
    call or a contrary decision is `InvalidRequest`."""

    request_id: str
    session_id: str
    key: str
    call: int
    approve: bool
    note: str = ""
    #: With an approval of a call paused for its cost budget: raise the budget by this.
    raise_by: float = 0.0
    #: With an approval of a server's question (MCP elicitation): the answer's fields.
    content: Mapping[str, Any] | None = None
    #: Neither approve nor reject: the result of the in-doubt call asked about, given by a
    #: human who knows its outcome (stored as its ``tool.result``; the turn goes on).
    result: str = ""
    is_error: bool = False


@attrs.frozen(kw_only=True)
class SubmitGoal:
    """Open a goal run on the session: ``session.started`` with the objective, then the
    session drives turns on its own until ``session.converged`` or ``session.stalled``.
    ``budget`` maps ``max_turns``, ``max_tokens``, ``max_tool_calls``, ``max_seconds`` and
    ``max_cost`` (money) to limits counted from the run's start. Answered with an `Ack`; a
    run already in flight is `InvalidRequest`."""

    request_id: str
    session_id: str
    key: str
    objective: str
    budget: Mapping[str, float] = attrs.field(factory=dict, converter=_frozen_map)


@attrs.frozen(kw_only=True)
class ResumeGoal:
    """Bring the session up so that a goal run cut off by a crash or a restart goes on,
    on the same stream and without a second ``session.started``. Answered with an `Ack`
    (``consumed`` when no run was in flight)."""

    request_id: str
    session_id: str
    key: str


@attrs.frozen(kw_only=True)
class SwitchSession:
    """Record that the conduit moves to ``target`` (a session switch event)."""

    request_id: str
    session_id: str
    key: str
    target: str


@attrs.frozen(kw_only=True)
class Ack:
    """Ingress is committed: ``seq`` is the last seq it wrote (0 if it wrote nothing).

    ``duplicate`` is true when the key had been seen; ``consumed`` when an interceptor
    handled the ingress (a slash command) so that no turn runs. ``notices`` are the
    interceptors' (severity, text) notices, also pushed live to sinks.
    """

    request_id: str
    session_id: str
    key: str
    seq: int = 0
    duplicate: bool = False
    consumed: bool = False
    notices: tuple[tuple[str, str], ...] = attrs.field(factory=tuple, converter=_tuple)
