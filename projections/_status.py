"""The status model: `Projection`, the entries and states it holds, and the record-state
and verification rules both status folds share (the folds are `projections._status_events`
and `projections._status_rows`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import attrs

from spine import Event, Usage

from ._status_context import ContextStatus

#: Most recent governed actions kept in `Projection.actions`; older ones fall off the front.
MAX_ACTIONS = 32
#: Most recent egress decisions kept in `Projection.egress`; older ones fall off the front.
MAX_EGRESS = 32


class RecordState(enum.StrEnum):
    """A run's record lifecycle; it only ever moves recording -> sealed -> verified."""

    RECORDING = "recording"
    SEALED = "sealed"
    VERIFIED = "verified"


_RECORD_RANK: dict[str, int] = {"recording": 0, "sealed": 1, "verified": 2}


def record_rank(state: str) -> int:
    """The order of record states (an unknown value ranks as recording)."""
    return _RECORD_RANK.get(str(state), 0)


def advance_record(current: RecordState, to: RecordState) -> RecordState:
    """``to`` if it is further along than ``current``, else ``current``: never backwards."""
    return to if record_rank(to) > record_rank(current) else current


class ActionState(enum.StrEnum):
    """Where one governed action stands; every state but running is terminal."""

    RUNNING = "running"
    DONE = "done"
    BLOCKED = "blocked"
    #: Started and cut by a stop: whether it took effect is unknown (``action.in_doubt``).
    IN_DOUBT = "in_doubt"


class FanoutState(enum.StrEnum):
    """Where a delegated child stands; every state but running is terminal."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class Outcome(enum.StrEnum):
    """How a run ended; the empty string (no member) means it is live."""

    CONVERGED = "converged"
    STALLED = "stalled"
    FAILED = "failed"


@attrs.frozen(kw_only=True)
class ActionEntry:
    """One governed action in the ledger; ``(goal, call)`` pairs an admission with its
    outcome.

    ``goal`` is the child whose action it is (its events were mirrored onto this stream),
    empty for the run's own: call ids are numbered per stream, so a child's call can have
    the same number as one of the run's.
    """

    call: int = 0
    action: str = ""
    trust: str = ""
    state: ActionState = ActionState.RUNNING
    fault: str = ""
    goal: str = ""


@attrs.frozen(kw_only=True)
class EgressEntry:
    """One outbound-network decision: the destination, whether it was allowed, and why."""

    host: str = ""
    allowed: bool = False
    reason: str = ""


@attrs.frozen(kw_only=True)
class FanoutChild:
    """One delegated child: its parent, objective, progress, governance and seal state.

    ``parent`` is the spawning goal's id as the spawn event carried it (empty for the run's
    root). ``seal`` stays recording while the child runs, even when a seal lands, because
    its events are not final yet. ``in_flight`` counts the child's admitted actions with no
    outcome yet; its fold-back settles them (a child that ended has nothing in flight).
    """

    id: str
    parent: str = ""
    objective: str = ""
    state: FanoutState = FanoutState.RUNNING
    turns: int = 0
    result: str = ""
    trust: str = ""
    blocked: int = 0
    seal: RecordState = RecordState.RECORDING
    in_flight: int = 0


@attrs.frozen(kw_only=True)
class PendingEntry:
    """A governed action waiting for a human's approval (``action.pending``), until an
    ``action.admitted`` or ``action.rejected`` with its call settles it."""

    call: int
    action: str = ""
    input: str = ""
    turn: int = 0


def _freeze_metadata(value: Mapping[str, str] | None) -> Mapping[str, str]:
    return {} if not value else dict(value)


@attrs.frozen(kw_only=True)
class Projection:
    """The current status of a run, folded from its events (see docs/projections.md).

    The seed's fields: ``objective`` and ``result``; ``turns`` (every turn.completed on the
    stream, the children's included) and cumulative ``usage``; ``record``; ``containment``
    (trust of the latest admitted or rejected action); ``admitted``/``completed``/
    ``rejected``; the bounded ``actions`` ledger; ``egress_allowed``/``egress_blocked`` and
    the bounded ``egress`` ledger; ``fanout`` in spawn order; ``terminal`` and ``error``.

    The session vocabulary adds ``outcome`` (why it is terminal), ``messages`` (user
    messages), ``cancelled`` (turns cut off), ``phase`` (latest lifecycle phase) and
    ``metadata`` (the session's properties, folded from properties events) and ``pending``
    (governed actions waiting for a human's approval), and ``context`` (the window, the
    last request's input tokens, the compactions and the span the summary in force covers).
    """

    objective: str = ""
    result: str = ""
    turns: int = 0
    usage: Usage = attrs.field(factory=Usage)
    record: RecordState = RecordState.RECORDING
    containment: str = ""
    admitted: int = 0
    completed: int = 0
    rejected: int = 0
    actions: tuple[ActionEntry, ...] = ()
    egress_allowed: int = 0
    egress_blocked: int = 0
    egress: tuple[EgressEntry, ...] = ()
    fanout: tuple[FanoutChild, ...] = ()
    terminal: bool = False
    error: str = ""
    outcome: str = ""
    messages: int = 0
    cancelled: int = 0
    phase: str = ""
    metadata: Mapping[str, str] = attrs.field(factory=dict, converter=_freeze_metadata)
    #: Additive: actions waiting for approval, oldest first.
    pending: tuple[PendingEntry, ...] = ()
    #: Additive: where the context window stands (`ContextStatus`).
    context: ContextStatus = attrs.field(factory=ContextStatus)

    def child(self, child_id: str) -> FanoutChild | None:
        """The fan-out child with this id, if it was spawned."""
        for c in self.fanout:
            if c.id == child_id:
                return c
        return None


def cache_hit_rate(usage: Usage) -> float:
    """The seed's cache-hit-rate: cache-read tokens over input tokens (input already counts
    the cached ones), 0 with no input; within [0, 1] whatever a provider reported."""
    if usage.input_tokens <= 0:
        return 0.0
    return min(1.0, max(0.0, usage.cache_read_tokens / usage.input_tokens))


def new_projection() -> Projection:
    """The status of a run with no events yet: recording, and otherwise zero."""
    return Projection()


def verification_passed(ev: Event) -> bool:
    """Whether a record.verified event reports a pass.

    A verification that names a problem (``error`` set, ``record["ok"]`` false, or a
    ``record["outcome"]`` other than a pass) does not advance the record state.
    """
    return _verification_passed(ev.error, ev.record)


_PASSING = frozenset({"ok", "pass", "passed", "valid", "verified"})


def _verification_passed(error: str, record: Any) -> bool:
    if error:
        return False
    if isinstance(record, Mapping):
        if record.get("ok", True) is False:
            return False
        outcome = record.get("outcome")
        if isinstance(outcome, str) and outcome.lower() not in _PASSING:
            return False
    return True
