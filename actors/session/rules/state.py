"""The session's state as a fold of its own stream, `evolve`: no Thespian, I/O or clock."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import orjson

from spine import Event, Kind, Usage, terminal_after

from . import conversation
from . import intents as ledger
from .context import CONTEXT_HANDLERS, ContextState
from .intents import Intent
from .replace import replace
from .timespend import TIMESPEND_FOLD, Spend, Timer, model_call_ended, turn_used

#: Version of `SessionState`'s shape and module (pickles name it); others are ignored.
SNAPSHOT_VERSION = 14


@attrs.frozen(kw_only=True)
class OpenTurn:
    """A turn that started and has not completed or been cancelled."""

    turn: int
    text: str = ""
    usage: Usage = attrs.field(factory=Usage)


@attrs.frozen(kw_only=True)
class PendingAction:
    """A governed action waiting for a human: what it would run, in which turn."""

    call: int
    turn: int
    action: str
    tool_use_id: str = ""
    input: str = ""
    #: The idempotency key of the in-doubt call this question is about ("" for an approval).
    key: str = ""
    #: A server's question asked during a running call (``extra.elicitation``), else None.
    question: Mapping[str, Any] | None = None


#: Goal budget keys, as `Submit` takes them and ``session.started`` stores them (``extra``).
BUDGET_KEYS = ("max_turns", "max_tokens", "max_tool_calls", "max_seconds", "max_cost")

#: Consecutive failed turns after which a goal run stalls.
MAX_FAILURES = 3


@attrs.frozen(kw_only=True)
class GoalRun:
    """The session's goal run, opened by a ``session.started`` that names a goal. Its
    budget counts from its start (``base_*``: the session's use then; ``raised``: what
    humans added to ``max_cost``); ``outcome``: "" in flight, else converged or stalled."""

    id: str
    objective: str = ""
    budget: Mapping[str, float] = attrs.field(factory=dict)
    base_turns: int = 0
    base_tokens: int = 0
    base_tool_calls: int = 0
    base_cost: float = 0.0
    raised: float = 0.0
    #: Unix time the run opened (the ``session.started`` event's time), 0 if unknown.
    started_at: float = 0.0
    #: Turns in a row that ended in an error (reset by a clean one).
    failures: int = 0
    last_error: str = ""
    #: Why a budget ran out (set by an ``action.rejected`` with fault budget_exceeded).
    exhausted: str = ""
    #: The final answer the ``finish`` tool was called with (``goal.finish`` = ``tool``).
    answer: str = ""
    #: Reminders to call ``finish`` stored so far (turns that answered without it).
    reminders: int = 0
    outcome: str = ""

    @property
    def active(self) -> bool:
        return self.outcome == ""


def action_key(action: str, tool_use_id: str) -> str:
    """Names one governed action within its turn (a model call has no tool use id)."""
    return f"{action}\x00{tool_use_id}"


@attrs.frozen(kw_only=True)
class SessionState:
    """Everything a session needs to serve, rebuilt by folding its stream."""

    session_id: str
    last_seq: int = 0
    metadata: Mapping[str, str] = attrs.field(factory=dict)
    turns: int = 0
    open_turn: OpenTurn | None = None
    # Stored user messages with no turn started yet, oldest first: (seq, text).
    pending: tuple[tuple[int, str], ...] = ()
    #: Recent conversation, oldest first: (role, text, seq of the event that said it).
    history: tuple[tuple[str, str, int], ...] = ()
    #: "" while the session serves, else "closed" or "failed" (`spine.terminal_after`).
    terminal: str = ""
    usage: Usage = attrs.field(factory=Usage)
    #: Governed tool calls admitted over the session (the ``max_tool_calls`` budget).
    tool_calls: int = 0
    #: The open turn's governed actions: `action_key` -> (call, status), status one of
    #: admitted, rejected, pending, completed. A resumed turn is answered from here.
    turn_actions: Mapping[str, tuple[int, str]] = attrs.field(factory=dict)
    #: Actions waiting for approval, by call.
    pending_actions: Mapping[int, PendingAction] = attrs.field(factory=dict)
    #: Approval decisions taken, by call: True approved, False rejected.
    decided: Mapping[int, bool] = attrs.field(factory=dict)
    #: The latest goal run (None: the session never ran one).
    goal: GoalRun | None = None
    #: Children this session spawned, in spawn order: id -> still running.
    children: Mapping[str, bool] = attrs.field(factory=dict)
    #: The effect ledger's tool calls admitted and not yet ended, by call (`intents`).
    intents: Mapping[int, Intent] = attrs.field(factory=dict)
    #: Compactions, the window a server answered, the estimate's calibration.
    context: ContextState = attrs.field(factory=ContextState)
    #: Steers stored for the running turn, not yet delivered or dropped: (seq, text).
    steers: tuple[tuple[int, str], ...] = ()
    #: The turn tree (`conversation`): turn -> the turn it follows; the active leaf; the
    #: entries of paths the session moved away from, by turn.
    nodes: Mapping[int, int] = attrs.field(factory=dict)
    leaf: int = 0
    stash: Mapping[int, tuple[tuple[str, str, int], ...]] = attrs.field(factory=dict)
    #: Timers set and not ended, by id (`timerbook`); what it spent (`spend`).
    timers: Mapping[str, Timer] = attrs.field(factory=dict)
    spend: Spend = attrs.field(factory=Spend)

    @property
    def running_goal(self) -> GoalRun | None:
        """The goal run in flight, if any."""
        g = self.goal
        return g if g is not None and g.active else None

    @property
    def closed(self) -> bool:
        return self.terminal == "closed"

    @property
    def failed(self) -> bool:
        return self.terminal == "failed"

    @property
    def busy(self) -> bool:
        """A turn is open or a stored message waits for one."""
        return self.open_turn is not None or bool(self.pending)


# Each handler returns the fields an event changes; `evolve` applies them with the new
# last seq in one step (a fold runs on every append: one copy per event, not two).
Changes = dict[str, Any]


def _meta(state: SessionState, ev: Event, seq: int) -> Changes:
    md = dict(state.metadata)
    for k, v in ev.properties.items():
        if v is None:
            md.pop(k, None)
        else:
            md[k] = v
    return {"metadata": md}


def _user(state: SessionState, ev: Event, seq: int) -> Changes:
    changes = conversation.user_message(state, ev, seq)
    g = state.running_goal
    if g is not None and ev.extra.get(FINISH_REMINDER):
        changes["goal"] = attrs.evolve(g, reminders=g.reminders + 1)
    return changes


def _turn_started(state: SessionState, ev: Event, seq: int) -> Changes:
    return {
        "turns": max(state.turns, ev.turn),
        "open_turn": OpenTurn(turn=ev.turn),
        "pending": state.pending[1:],
        "history": conversation.heard(state.history, state.pending),
        "turn_actions": {},
    }


def _assistant(state: SessionState, ev: Event, seq: int) -> Changes:
    return {"history": _push(state.history, ("assistant", ev.text, seq))}


def _tool_call(state: SessionState, ev: Event, seq: int) -> Changes:
    # The conversation a model gets is rebuilt from these, so a restarted session sends
    # the same calls and results it had before.
    body = orjson.dumps({"id": ev.tool_use_id, "name": ev.tool, "input": ev.input}).decode()
    return {"history": _push(state.history, ("tool.call", body, seq))}


def _tool_result(state: SessionState, ev: Event, seq: int) -> Changes:
    body = orjson.dumps(
        {"id": ev.tool_use_id, "name": ev.tool, "result": ev.result, "isError": ev.is_error}
    ).decode()
    changes: Changes = {"history": _push(state.history, ("tool.result", body, seq))}
    g = state.running_goal
    finish = ev.tool == "finish" and not ev.is_error and state.metadata.get(GOAL_FINISH) == "tool"
    if g is not None and finish:
        changes["goal"] = attrs.evolve(g, answer=ev.result)
    return changes


def _turn_ended(state: SessionState, ev: Event, seq: int) -> Changes:
    used = turn_used(state.open_turn, ev)
    usage = state.usage + used if used is not None else state.usage
    hist = state.history
    if ev.text:
        # Partial text of a cut-off or failed turn was said all the same.
        hist = _push(hist, ("assistant", ev.text, seq))
    spend = state.spend.turn_ended(ev, state.metadata.get("ore.model.name", ""), used)
    changes: Changes = {"open_turn": None, "usage": usage, "history": hist, "spend": spend}
    if state.turn_actions:
        changes["turn_actions"] = {}
    if state.pending_actions:
        changes["pending_actions"] = {
            c: p for c, p in state.pending_actions.items() if p.turn != ev.turn
        }
    changes.update(ledger.turn_closed(state.intents, ev.turn))
    return changes


def _started(state: SessionState, ev: Event, seq: int) -> Changes:
    if not ev.goal:
        return {}  # the session's creation, not a goal run
    b = ev.extra.get("budget") or {}
    budget = {k: (float if k == "max_cost" else int)(v) for k, v in b.items() if k in BUDGET_KEYS}
    u = state.usage
    goal = GoalRun(
        id=ev.goal,
        objective=ev.text,
        budget=budget,
        base_turns=state.turns,
        base_tokens=u.input_tokens + u.output_tokens,
        base_tool_calls=state.tool_calls,
        base_cost=state.spend.cost,
        started_at=ev.time.timestamp() if ev.time is not None else 0.0,
    )
    return {"goal": goal}


def _completed(state: SessionState, ev: Event, seq: int) -> Changes:
    changes = _turn_ended(state, ev, seq)
    g = state.running_goal
    if g is not None:
        if ev.error or ev.stop_reason in FAILED_STOPS:
            why = ev.error or ev.stop_reason
            changes["goal"] = attrs.evolve(g, failures=g.failures + 1, last_error=why)
        elif g.failures:
            changes["goal"] = attrs.evolve(g, failures=0, last_error="")
    return changes


def _outcome(outcome: str) -> Callable[[SessionState, Event, int], Changes]:
    def handler(state: SessionState, ev: Event, seq: int) -> Changes:
        g = state.goal
        if g is None or ev.goal != g.id or not g.active:
            return {}
        return {"goal": attrs.evolve(g, outcome=outcome)}

    return handler


#: Stop reasons of a turn that got nowhere (a goal run counts them as failures).
FAILED_STOPS = frozenset({"error", "timeout", "transient", "max_tool_rounds"})


def _child_spawned(state: SessionState, ev: Event, seq: int) -> Changes:
    if ev.child in state.children:
        return {}
    return {"children": {**state.children, ev.child: True}}


def _child_completed(state: SessionState, ev: Event, seq: int) -> Changes:
    if not state.children.get(ev.child):
        return {}
    return {"children": {**state.children, ev.child: False}}


def depth_of(md: Mapping[str, str]) -> int:
    """The session's delegation depth (``goal.depth``, 0 for a root session)."""
    raw = md.get(GOAL_DEPTH, "0")
    return int(raw) if raw.isdigit() else 0


#: Metadata a spawned child is created with: its objective, its parent, its depth.
GOAL_OBJECTIVE = "goal.objective"
GOAL_PARENT = "goal.parent"
GOAL_DEPTH = "goal.depth"
#: How a goal run ends: ``answer`` (default: the model's answer when it stops without tool
#: calls) or ``tool`` (only a call of the ``finish`` tool, its argument the answer).
GOAL_FINISH = "goal.finish"
FINISH_MODES = ("answer", "tool")
#: Marks (in ``extra``) the user message that reminds the model to call ``finish``.
FINISH_REMINDER = "finishReminder"


def _action(status: str) -> Callable[[SessionState, Event, int], Changes]:
    def handler(state: SessionState, ev: Event, seq: int) -> Changes:
        key = action_key(ev.action, ev.tool_use_id)
        changes: Changes = {"turn_actions": {**state.turn_actions, key: (ev.call, status)}}
        if ev.call in state.pending_actions and status != "pending":
            changes["pending_actions"] = {
                c: p for c, p in state.pending_actions.items() if c != ev.call
            }
        if status == "pending":
            changes["pending_actions"] = {
                **state.pending_actions,
                ev.call: PendingAction(
                    call=ev.call,
                    turn=ev.turn,
                    action=ev.action,
                    tool_use_id=ev.tool_use_id,
                    input=ev.input,
                    key=str(ev.extra.get(ledger.KEY) or "") if ev.extra else "",
                    question=ev.extra.get(ledger.QUESTION) if ev.extra else None,
                ),
            }
        if status == "admitted" and ev.action != "model":
            changes["tool_calls"] = state.tool_calls + 1
        changes.update(_LEDGER.get(status, _ended)(state, ev, seq))
        if status == "completed" and ev.action == "model":
            changes.update(model_call_ended(state, ev))
        g = state.running_goal
        if status == "rejected" and ev.fault == "budget_exceeded" and g is not None:
            changes["goal"] = attrs.evolve(g, exhausted=ev.error or "budget exceeded")
        return changes

    return handler


def _ended(state: SessionState, ev: Event, seq: int) -> Changes:
    return ledger.ended(state.intents, ev.call) if status_ends(ev.kind) else {}


def status_ends(kind: str) -> bool:
    return kind in (Kind.ACTION_COMPLETED, Kind.ACTION_REJECTED)


_LEDGER: dict[str, Callable[[SessionState, Event, int], Changes]] = {
    "admitted": lambda st, ev, seq: ledger.admitted(st, ev, "ready"),
    "started": ledger.started,
    "in_doubt": ledger.in_doubt,
}


def _approval(state: SessionState, ev: Event, seq: int) -> Changes:
    changes: Changes = {"decided": {**state.decided, ev.call: ev.allowed}}
    p = state.pending_actions.get(ev.call)
    if p is not None and p.question is not None:  # answered: nothing else settles it
        changes["pending_actions"] = {
            c: x for c, x in state.pending_actions.items() if c != ev.call
        }
    return changes


def _lifecycle(state: SessionState, ev: Event, seq: int) -> Changes:
    terminal = terminal_after(state.terminal, ev.phase)
    return {} if terminal == state.terminal else {"terminal": terminal}


_HANDLERS: dict[str, Callable[[SessionState, Event, int], Changes]] = {
    **TIMESPEND_FOLD,
    Kind.PROPERTIES: _meta,
    Kind.USER_MESSAGE: _user,
    Kind.TURN_STARTED: _turn_started,
    Kind.ASSISTANT: _assistant,
    Kind.TOOL_CALL: _tool_call,
    Kind.TOOL_RESULT: _tool_result,
    Kind.SESSION_STARTED: _started,
    Kind.CHILD_SPAWNED: _child_spawned,
    Kind.CHILD_COMPLETED: _child_completed,
    Kind.CONVERGED: _outcome("converged"),
    Kind.STALLED: _outcome("stalled"),
    Kind.TURN_COMPLETED: _completed,
    Kind.TURN_CANCELLED: _turn_ended,
    Kind.LIFECYCLE: _lifecycle,
    Kind.ACTION_ADMITTED: _action("admitted"),
    Kind.ACTION_REJECTED: _action("rejected"),
    Kind.ACTION_PENDING: _action("pending"),
    Kind.ACTION_COMPLETED: _action("completed"),
    Kind.ACTION_STARTED: _action("started"),
    Kind.ACTION_IN_DOUBT: _action("in_doubt"),
    Kind.ACTION_APPROVAL: _approval,
    **CONTEXT_HANDLERS,
    Kind.STEER_DELIVERED: conversation.steer_delivered,
    Kind.STEER_DROPPED: conversation.steer_dropped,
    Kind.BRANCH_SWITCHED: conversation.branch_switched,
}
#: The kinds whose fold can queue work (a pending message, a goal run): no other makes a turn due.
QUEUEING_KINDS = frozenset({Kind.USER_MESSAGE, Kind.SESSION_STARTED, Kind.STEER_DROPPED})


_push = conversation.push


def evolve(state: SessionState, ev: Event, seq: int | None = None) -> SessionState:
    """Fold one stored event into the session's state. ``seq`` is the event's seq when the
    event object does not carry it (an event as appended, before the log numbered it)."""
    at = ev.seq if seq is None else seq
    handler = _HANDLERS.get(ev.kind)
    if handler is None or (ev.goal and ev.goal != state.session_id):
        # A child's events mirrored onto this stream (attributed by goal) are its, not ours.
        return replace(state, last_seq=at)
    return replace(state, last_seq=at, **handler(state, ev, at))


def fold(
    state: SessionState, events: Iterable[Event], first_seq: int | None = None
) -> SessionState:
    """Fold ``events`` in order; with ``first_seq`` they are taken to be stored at
    ``first_seq``, ``first_seq + 1``, ... (whatever seq the objects carry)."""
    for i, ev in enumerate(events):
        state = evolve(state, ev, None if first_seq is None else first_seq + i)
    return state


def metadata_diff(
    current: Mapping[str, str], changes: Mapping[str, str | None]
) -> dict[str, str | None]:
    """The changes that actually change something (a no-op write stores nothing)."""
    return {k: v for k, v in changes.items() if current.get(k) != v}
