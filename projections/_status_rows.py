"""The second reduce path: `StatusFolder`, the status fold over decoded JSON rows, for
rebuilds.

Folding a million stored events through `Event` objects and `attrs.evolve` costs several
times the read itself, so the reducer actor folds the decoded JSON dicts of stored rows into
a mutable `StatusFolder` and freezes it into a `Projection` only when asked. The rules are
those of `projections._status_events`, kind by kind (on dicts, in
`projections._status_row_handlers`); a property test pins that ``StatusFolder`` fed the
stored JSON of any events freezes to exactly ``project(events)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

import orjson

from spine import Usage

from ._status import (
    ActionEntry,
    ActionState,
    EgressEntry,
    FanoutChild,
    FanoutState,
    PendingEntry,
    Projection,
    RecordState,
)
from ._status_context import ContextStatus, context_dump, context_load
from ._status_row_handlers import _C_ID, _C_SEAL, _C_STATE, _RUNNING
from ._status_row_handlers import STATUS_HANDLERS as STATUS_HANDLERS


class StatusFolder:
    """A mutable `Projection` under construction, fed stored-shape JSON dicts.

    ``feed`` applies one decoded row; ``freeze`` returns the `Projection`; ``dump`` and
    ``load`` give a JSON-ready form for checkpoints. Only one owner may touch it.
    """

    __slots__ = (
        "actions",
        "admitted",
        "cancelled",
        "children",
        "completed",
        "containment",
        "context",
        "egress",
        "egress_allowed",
        "egress_blocked",
        "error",
        "fanout",
        "messages",
        "metadata",
        "objective",
        "outcome",
        "pending",
        "phase",
        "record",
        "rejected",
        "result",
        "sealed_children",
        "turns",
        "unsealed",
        "usage",
    )

    def __init__(self) -> None:
        self.objective = ""
        self.result = ""
        self.turns = 0
        self.usage = [0, 0, 0, 0, 0]
        self.record = "recording"
        self.containment = ""
        self.admitted = 0
        self.completed = 0
        self.rejected = 0
        self.actions: list[list[Any]] = []
        self.egress_allowed = 0
        self.egress_blocked = 0
        self.egress: list[list[Any]] = []
        self.fanout: list[list[Any]] = []
        self.children: dict[str, int] = {}
        # Finished children still recording, and children sealed but not yet verified:
        # the only ones a seal or a verification changes.
        self.unsealed: list[list[Any]] = []
        self.sealed_children: list[list[Any]] = []
        self.error = ""
        self.outcome = ""
        self.messages = 0
        self.cancelled = 0
        self.phase = ""
        self.metadata: dict[str, str] = {}
        self.pending: list[list[Any]] = []
        # Immutable and rarely changed: replaced, never mutated, so freeze can share it.
        self.context = ContextStatus()

    def feed(self, d: Mapping[str, Any]) -> None:
        """Fold one decoded stored row (unknown kinds change nothing)."""
        h = STATUS_HANDLERS.get(d["kind"])
        if h is not None:
            h(self, d)

    # -- conversions ---------------------------------------------------------------------

    def freeze(self) -> Projection:
        u = self.usage
        return Projection(
            objective=self.objective,
            result=self.result,
            turns=self.turns,
            usage=Usage(
                input_tokens=u[0],
                output_tokens=u[1],
                cache_read_tokens=u[2],
                cache_write_tokens=u[3],
                reasoning_tokens=u[4],
            ),
            record=RecordState(self.record),
            containment=self.containment,
            admitted=self.admitted,
            completed=self.completed,
            rejected=self.rejected,
            actions=tuple(
                ActionEntry(
                    call=a[0],
                    action=a[1],
                    trust=a[2],
                    state=ActionState(a[3]),
                    fault=a[4],
                    goal=a[5],
                )
                for a in self.actions
            ),
            egress_allowed=self.egress_allowed,
            egress_blocked=self.egress_blocked,
            egress=tuple(EgressEntry(host=e[0], allowed=e[1], reason=e[2]) for e in self.egress),
            fanout=_frozen_fanout(self.fanout),
            terminal=bool(self.outcome),
            error=self.error,
            outcome=self.outcome,
            messages=self.messages,
            cancelled=self.cancelled,
            phase=self.phase,
            metadata=dict(self.metadata),
            pending=tuple(
                PendingEntry(call=x[0], action=x[1], input=x[2], turn=x[3]) for x in self.pending
            ),
            context=self.context,
        )

    @classmethod
    def thaw(cls, p: Projection) -> Self:
        """A folder that continues from ``p``."""
        s = cls()
        s.objective = p.objective
        s.result = p.result
        s.turns = p.turns
        u = p.usage
        s.usage = [
            u.input_tokens,
            u.output_tokens,
            u.cache_read_tokens,
            u.cache_write_tokens,
            u.reasoning_tokens,
        ]
        s.record = str(p.record)
        s.containment = p.containment
        s.admitted, s.completed, s.rejected = p.admitted, p.completed, p.rejected
        s.actions = [[a.call, a.action, a.trust, str(a.state), a.fault, a.goal] for a in p.actions]
        s.egress_allowed, s.egress_blocked = p.egress_allowed, p.egress_blocked
        s.egress = [[e.host, e.allowed, e.reason] for e in p.egress]
        s.fanout = [
            [c.id, c.parent, c.objective, str(c.state), c.turns, c.result, c.trust, c.blocked,
             str(c.seal), c.in_flight]
            for c in p.fanout
        ]  # fmt: skip
        s._index_children()
        s.error = p.error
        s.outcome = p.outcome
        s.messages, s.cancelled, s.phase = p.messages, p.cancelled, p.phase
        s.metadata = dict(p.metadata)
        s.pending = [[x.call, x.action, x.input, x.turn] for x in p.pending]
        s.context = p.context
        return s

    def _index_children(self) -> None:
        self.children = {c[_C_ID]: i for i, c in enumerate(self.fanout)}
        self.unsealed = [
            c for c in self.fanout if c[_C_STATE] != _RUNNING and c[_C_SEAL] == "recording"
        ]
        self.sealed_children = [c for c in self.fanout if c[_C_SEAL] == "sealed"]

    def dump(self) -> dict[str, Any]:
        """A JSON-ready snapshot (lists are copied, so later feeds do not change it)."""
        return orjson.loads(orjson.dumps(self.view()))  # type: ignore[no-any-return]

    def view(self) -> dict[str, Any]:
        """Like `dump` but sharing the folder's lists: serialize it before the next feed."""
        return {
            "objective": self.objective,
            "result": self.result,
            "turns": self.turns,
            "usage": self.usage,
            "record": self.record,
            "containment": self.containment,
            "admitted": self.admitted,
            "completed": self.completed,
            "rejected": self.rejected,
            "actions": self.actions,
            "egressAllowed": self.egress_allowed,
            "egressBlocked": self.egress_blocked,
            "egress": self.egress,
            "fanout": self.fanout,
            "error": self.error,
            "outcome": self.outcome,
            "messages": self.messages,
            "cancelled": self.cancelled,
            "phase": self.phase,
            "metadata": self.metadata,
            "pending": self.pending,
            "context": context_dump(self.context),
        }

    @classmethod
    def load(cls, d: Mapping[str, Any]) -> Self:
        """The folder a `dump` describes."""
        s = cls()
        s.objective = d["objective"]
        s.result = d["result"]
        s.turns = d["turns"]
        s.usage = list(d["usage"])
        s.record = d["record"]
        s.containment = d["containment"]
        s.admitted, s.completed, s.rejected = d["admitted"], d["completed"], d["rejected"]
        # A checkpoint of an older version (served while a rebuild replaces it) has
        # shorter rows: its actions are the run's own, its children have nothing in flight.
        s.actions = [_padded(a, _ACTION_SLOTS, "") for a in d["actions"]]
        s.egress_allowed, s.egress_blocked = d["egressAllowed"], d["egressBlocked"]
        s.egress = [list(e) for e in d["egress"]]
        s.fanout = [_padded(c, _CHILD_SLOTS, 0) for c in d["fanout"]]
        s._index_children()
        s.error = d["error"]
        s.outcome = d["outcome"]
        s.messages, s.cancelled, s.phase = d["messages"], d["cancelled"], d["phase"]
        s.metadata = dict(d["metadata"])
        s.pending = [list(x) for x in d.get("pending", ())]
        s.context = context_load(d.get("context"))
        return s


_ACTION_SLOTS = 6
_CHILD_SLOTS = 10


def _padded(row: list[Any], slots: int, fill: Any) -> list[Any]:
    out = list(row)
    if len(out) < slots:
        out.extend([fill] * (slots - len(out)))
    return out


def _frozen_fanout(fanout: list[list[Any]]) -> tuple[FanoutChild, ...]:
    return tuple(
        FanoutChild(
            id=c[0],
            parent=c[1],
            objective=c[2],
            state=FanoutState(c[3]),
            turns=c[4],
            result=c[5],
            trust=c[6],
            blocked=c[7],
            seal=RecordState(c[8]),
            in_flight=c[9],
        )
        for c in fanout
    )
