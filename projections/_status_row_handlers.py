"""The status rules on decoded stored rows, one handler per kind (`STATUS_HANDLERS`): the
rules of `projections._status_events` on dicts, applied to a mutable `StatusFolder`.

Rows reach this path only in the stored shape the spine's encoder writes (the reducer
sends rows of another schema version through the strict decoder), so the handlers read
fields without re-validating their types.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import orjson

from spine import REVIVING_PHASES, Kind

from ._status import MAX_ACTIONS, MAX_EGRESS, Outcome, _verification_passed
from ._status_context import answered, compacted, measured, rewindowed, uncompacted

if TYPE_CHECKING:
    from ._status_rows import StatusFolder

# Fan-out child slots in the mutable list form.
(_C_ID, _C_PARENT, _C_OBJ, _C_STATE, _C_TURNS, _C_RESULT, _C_TRUST, _C_BLOCKED, _C_SEAL,
 _C_IN_FLIGHT) = range(10)  # fmt: skip
# Action ledger slots.
_A_CALL, _A_ACTION, _A_TRUST, _A_STATE, _A_FAULT, _A_GOAL = range(6)

_RUNNING = "running"
_goal_of = itemgetter(_A_GOAL)

FastHandler = Callable[["StatusFolder", Mapping[str, Any]], None]


def _child(s: StatusFolder, goal: str) -> list[Any] | None:
    i = s.children.get(goal) if goal else None
    return None if i is None else s.fanout[i]


def _add_usage(s: StatusFolder, u: Mapping[str, int] | None) -> None:
    if u:
        acc = s.usage
        acc[0] += u.get("inputTokens", 0)
        acc[1] += u.get("outputTokens", 0)
        acc[2] += u.get("cacheReadTokens", 0)
        acc[3] += u.get("cacheWriteTokens", 0)
        acc[4] += u.get("reasoningTokens", 0)


def _session_started(s: StatusFolder, d: Mapping[str, Any]) -> None:
    text = d.get("text")
    if text:
        s.objective = text
    s.outcome = ""
    s.error = ""


def _user_message(s: StatusFolder, d: Mapping[str, Any]) -> None:
    if not s.objective:
        s.objective = d.get("text", "")
    s.messages += 1
    s.outcome = ""
    s.error = ""


def _turn_completed(s: StatusFolder, d: Mapping[str, Any]) -> None:
    # The most frequent rule of a busy log: helpers inlined.
    s.turns += 1
    u = d.get("usage")
    if u:
        acc = s.usage
        acc[0] += u.get("inputTokens", 0)
        acc[1] += u.get("outputTokens", 0)
        acc[2] += u.get("cacheReadTokens", 0)
        acc[3] += u.get("cacheWriteTokens", 0)
        acc[4] += u.get("reasoningTokens", 0)
    goal = d.get("goal")
    if goal:
        i = s.children.get(goal)
        if i is not None:
            s.fanout[i][_C_TURNS] += 1


def _turn_cancelled(s: StatusFolder, d: Mapping[str, Any]) -> None:
    s.cancelled += 1
    _add_usage(s, d.get("usage"))


def _child_spawned(s: StatusFolder, d: Mapping[str, Any]) -> None:
    cid = d.get("child", "")
    if not cid or cid in s.children:
        return
    s.children[cid] = len(s.fanout)
    s.fanout.append(
        [cid, d.get("goal", ""), d.get("text", ""), _RUNNING, 0, "", "", 0, "recording", 0]
    )


def _child_completed(s: StatusFolder, d: Mapping[str, Any]) -> None:
    c = _child(s, d.get("child", ""))
    if c is None or c[_C_STATE] != _RUNNING:
        return
    c[_C_STATE] = "failed" if d.get("isError") else "done"
    c[_C_RESULT] = d.get("result", "")
    if c[_C_SEAL] == "recording":
        s.unsealed.append(c)
    # A child that folded back has nothing in flight (see the event path).
    s.completed += c[_C_IN_FLIGHT]
    c[_C_IN_FLIGHT] = 0
    cid = c[_C_ID]
    # A C-level scan first: most children own none of the ledger's actions.
    if cid in map(_goal_of, s.actions):
        for a in s.actions:
            if a[_A_GOAL] == cid and a[_A_STATE] == _RUNNING:
                a[_A_STATE] = "done"


def _converged(s: StatusFolder, d: Mapping[str, Any]) -> None:
    if _child(s, d.get("goal", "")) is not None:
        return
    s.outcome = "converged"
    s.error = ""
    s.result = d.get("text", "")


def _stalled(s: StatusFolder, d: Mapping[str, Any]) -> None:
    if _child(s, d.get("goal", "")) is not None:
        return
    s.outcome = "stalled"
    s.error = d.get("error", "")


def _owner(s: StatusFolder, d: Mapping[str, Any]) -> str:
    goal: str = d.get("goal", "")
    return goal if goal and goal in s.children else ""


def _settle(s: StatusFolder, d: Mapping[str, Any], owner: str, state: str) -> bool:
    call = d.get("call", 0)
    action = d.get("action", "")
    trust = d.get("trust", "")
    fault = d.get("fault", "")
    if call:
        # Newest first: an outcome usually follows its admission closely.
        for a in reversed(s.actions):
            if a[_A_CALL] == call and a[_A_GOAL] == owner:
                was_running: bool = a[_A_STATE] == _RUNNING
                if action:
                    a[_A_ACTION] = action
                if trust:
                    a[_A_TRUST] = trust
                a[_A_STATE] = state
                a[_A_FAULT] = fault
                return was_running
    s.actions.append([call, action, trust, state, fault, owner])
    if len(s.actions) > MAX_ACTIONS:
        del s.actions[0]
    return False


def _action_admitted(s: StatusFolder, d: Mapping[str, Any]) -> None:
    s.admitted += 1
    trust = d.get("trust", "")
    if trust:
        s.containment = trust
    owner = ""
    goal = d.get("goal")
    if goal:
        i = s.children.get(goal)
        if i is not None:
            owner = goal
            c = s.fanout[i]
            c[_C_IN_FLIGHT] += 1
            if trust:
                c[_C_TRUST] = trust
    acts = s.actions
    acts.append([d.get("call", 0), d.get("action", ""), trust, _RUNNING, "", owner])
    if len(acts) > MAX_ACTIONS:
        del acts[0]
    if s.pending and not owner:
        _unpend(s, d)


def _unpend(s: StatusFolder, d: Mapping[str, Any]) -> None:
    call = d.get("call", 0)
    s.pending = [x for x in s.pending if x[0] != call]


def _action_approval(s: StatusFolder, d: Mapping[str, Any]) -> None:
    if s.pending and not _owner(s, d):
        _unpend(s, d)


def _action_pending(s: StatusFolder, d: Mapping[str, Any]) -> None:
    raw = d.get("input", "")
    # A decoded row holds the parsed arguments; `PendingEntry.input` is JSON text, as
    # the event's own field is, whichever path folded it.
    text = raw if isinstance(raw, str) else orjson.dumps(raw).decode()
    s.pending.append([d.get("call", 0), d.get("action", ""), text, d.get("turn", 0)])


def _action_completed(s: StatusFolder, d: Mapping[str, Any]) -> None:
    s.completed += 1
    owner = _owner(s, d)
    _settle(s, d, owner, "done")
    if owner:
        c = s.fanout[s.children[owner]]
        if c[_C_IN_FLIGHT]:
            c[_C_IN_FLIGHT] -= 1
    elif "context" in d:
        s.context = measured(s.context, d["context"])


def _action_in_doubt(s: StatusFolder, d: Mapping[str, Any]) -> None:
    owner = _owner(s, d)
    _settle(s, d, owner, "in_doubt")
    if owner:
        c = s.fanout[s.children[owner]]
        if c[_C_IN_FLIGHT]:
            c[_C_IN_FLIGHT] -= 1


def _action_rejected(s: StatusFolder, d: Mapping[str, Any]) -> None:
    s.rejected += 1
    trust = d.get("trust", "")
    if trust:
        s.containment = trust
    owner = _owner(s, d)
    was_running = _settle(s, d, owner, "blocked")
    if owner:
        c = s.fanout[s.children[owner]]
        c[_C_BLOCKED] += 1
        if trust:
            c[_C_TRUST] = trust
        if was_running and c[_C_IN_FLIGHT]:
            c[_C_IN_FLIGHT] -= 1
    elif s.pending:
        _unpend(s, d)


def _egress(s: StatusFolder, d: Mapping[str, Any]) -> None:
    host = d.get("host")
    if not host:
        return
    allowed = bool(d.get("allowed", False))
    if allowed:
        s.egress_allowed += 1
    else:
        s.egress_blocked += 1
    s.egress.append([host, allowed, d.get("reason", "")])
    if len(s.egress) > MAX_EGRESS:
        del s.egress[0]


def _record_sealed(s: StatusFolder, d: Mapping[str, Any]) -> None:
    if s.record == "recording":
        s.record = "sealed"
    if s.unsealed:
        for c in s.unsealed:
            c[_C_SEAL] = "sealed"
        s.sealed_children.extend(s.unsealed)
        s.unsealed = []


def _record_verified(s: StatusFolder, d: Mapping[str, Any]) -> None:
    if s.record == "recording" or not _verification_passed(d.get("error", ""), d.get("record")):
        return
    s.record = "verified"
    if s.sealed_children:
        for c in s.sealed_children:
            c[_C_SEAL] = "verified"
        s.sealed_children = []


def _properties(s: StatusFolder, d: Mapping[str, Any]) -> None:
    props = d.get("properties")
    if props:
        meta = s.metadata
        for k, v in props.items():
            if v is None:
                meta.pop(k, None)
            else:
                meta[k] = v
        s.context = rewindowed(s.context, meta)


def _context_window(s: StatusFolder, d: Mapping[str, Any]) -> None:
    s.context = answered(s.context, s.metadata, d.get("tokens"), d.get("source"), d.get("key"))


def _context_compacted(s: StatusFolder, d: Mapping[str, Any]) -> None:
    s.context = compacted(s.context, d.get("seq", 0), d.get("fromSeq"), d.get("toSeq"))


def _context_uncompacted(s: StatusFolder, d: Mapping[str, Any]) -> None:
    s.context = uncompacted(s.context, d.get("call", 0))


def _lifecycle(s: StatusFolder, d: Mapping[str, Any]) -> None:
    phase = d.get("phase")
    if not phase:
        return
    if phase == "failed":
        s.outcome = str(Outcome.FAILED)
        s.error = d.get("error") or d.get("reason", "")
    elif s.outcome == "failed" and phase in REVIVING_PHASES:
        s.outcome = ""
        s.error = ""
    s.phase = phase


#: The dict-path handler for each kind (the same keys as `projections.HANDLERS`).
STATUS_HANDLERS: dict[str, FastHandler] = {
    str(Kind.SESSION_STARTED): _session_started,
    str(Kind.USER_MESSAGE): _user_message,
    str(Kind.TURN_COMPLETED): _turn_completed,
    str(Kind.TURN_CANCELLED): _turn_cancelled,
    str(Kind.CHILD_SPAWNED): _child_spawned,
    str(Kind.CHILD_COMPLETED): _child_completed,
    str(Kind.CONVERGED): _converged,
    str(Kind.STALLED): _stalled,
    str(Kind.ACTION_ADMITTED): _action_admitted,
    str(Kind.ACTION_COMPLETED): _action_completed,
    str(Kind.ACTION_IN_DOUBT): _action_in_doubt,
    str(Kind.ACTION_REJECTED): _action_rejected,
    str(Kind.ACTION_PENDING): _action_pending,
    str(Kind.ACTION_APPROVAL): _action_approval,
    str(Kind.EGRESS): _egress,
    str(Kind.RECORD_SEALED): _record_sealed,
    str(Kind.RECORD_VERIFIED): _record_verified,
    str(Kind.PROPERTIES): _properties,
    str(Kind.LIFECYCLE): _lifecycle,
    str(Kind.CONTEXT_WINDOW): _context_window,
    str(Kind.CONTEXT_COMPACTED): _context_compacted,
    str(Kind.CONTEXT_UNCOMPACTED): _context_uncompacted,
}
