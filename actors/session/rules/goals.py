"""Decisions about goal runs (pure): opening one, what the gate's goal rules read, the
next turn a run drives on its own, and how a run ends (converged or stalled).

A goal run lives on the session's stream: ``session.started`` (with ``goal`` = the
session's id, the objective as ``text`` and the budget in ``extra``) and a
``user.message`` with the objective open it; turns follow with no one sending anything
until a turn ends with an answer (``session.converged``, the answer as ``text``) or the
run stalls (``session.stalled``, the reason as ``error``). Everything a run needs to go on
is folded from the stream (`state.GoalRun`), so a restarted session continues it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

import attrs

from projections import MODEL_NAME
from spine import Event, Kind

from ... import messages as m
from ...agents.governance import Ask, GoalBudget, GoalCost, Policy, PolicyError, Spent
from .commands import (
    CancelChildren,
    CreateChild,
    Decision,
    Effect,
    Resume,
    Running,
    Session,
    Spawn,
    Submit,
)
from .refusals import failed, refusal
from .state import (
    BUDGET_KEYS,
    FINISH_MODES,
    FINISH_REMINDER,
    GOAL_DEPTH,
    GOAL_FINISH,
    GOAL_OBJECTIVE,
    GOAL_PARENT,
    MAX_FAILURES,
    GoalRun,
    SessionState,
    depth_of,
)
from .tenantcaps import open_usage, spent_of
from .views import ingress_seq

#: Stop reasons of a turn that ended with an answer (``finish``: the finish tool ended it).
ANSWER_STOPS = frozenset({"end_turn", "stop", "stop_sequence", "max_tokens", "finish"})

#: The stall reason of a run cut off by an interrupt or a close.
CANCELLED = "cancelled"

#: What a run that ends with the ``finish`` tool is told after a turn that answered
#: without calling it (a user message, so the next turn has something to go on).
REMINDER = (
    "The objective is not finished yet: when it is met, call the finish tool with the final answer."
)


def finish_mode(metadata: Mapping[str, str]) -> str:
    """How a goal run ends (``goal.finish``): ``answer`` (the default) or ``tool``."""
    return metadata.get(GOAL_FINISH) or FINISH_MODES[0]


def finish_problem(metadata: Mapping[str, str]) -> str:
    """What is wrong with the session's ``goal.finish`` ("" if nothing)."""
    mode = finish_mode(metadata)
    if mode in FINISH_MODES:
        return ""
    return f"{GOAL_FINISH} must be one of {', '.join(FINISH_MODES)}, got {mode!r}"


def budget_problem(budget: Mapping[str, object]) -> str:
    """What is wrong with a goal budget ("" if nothing): ``max_cost`` is money, a positive
    number; every other budget counts whole things, a positive integer."""
    for k, v in budget.items():
        if k not in BUDGET_KEYS:
            return f"unknown budget {k!r} (known: {', '.join(BUDGET_KEYS)})"
        if k == "max_cost":
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v <= 1e12:
                return f"budget max_cost must be a positive number, got {v!r}"
        elif not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            return f"budget {k} must be a positive integer, got {v!r}"
    return ""


def submit(s: Session, cmd: Submit) -> Decision:
    if cmd.stored:
        # A retry of a stored submit is answered as the first delivery was, even while
        # the run it opened is still going (which would refuse a new one).
        ack = m.Ack(
            request_id=cmd.request_id,
            session_id=s.session_id,
            key=cmd.key,
            seq=ingress_seq(cmd.stored),
            duplicate=True,
        )
        return Decision(state=s, reply=ack)
    refused = refusal(s, cmd.request_id)
    if refused is not None:
        return Decision(state=s, reply=refused)
    if s.stored.running_goal is not None:
        text = f"session {s.session_id} already runs a goal; wait for it or interrupt it"
        return Decision(state=s, reply=failed(s, cmd.request_id, "InvalidRequest", text))
    if not isinstance(cmd.objective, str) or not cmd.objective.strip():
        text = "a goal's objective must be a non-empty string"
        return Decision(state=s, reply=failed(s, cmd.request_id, "InvalidRequest", text))
    problem = budget_problem(cmd.budget) or finish_problem(s.stored.metadata)
    if problem:
        return Decision(state=s, reply=failed(s, cmd.request_id, "InvalidRequest", problem))
    when = datetime.fromtimestamp(cmd.now, UTC) if cmd.now else None
    extra = {"budget": dict(cmd.budget)} if cmd.budget else None
    events = (
        Event(
            kind=Kind.SESSION_STARTED,
            time=when,
            goal=s.session_id,
            text=cmd.objective,
            extra=extra,
        ),
        Event(kind=Kind.USER_MESSAGE, goal=s.session_id, text=cmd.objective),
    )
    ack = m.Ack(
        request_id=cmd.request_id,
        session_id=s.session_id,
        key=cmd.key,
        seq=s.stored.last_seq + len(events),
    )
    return Decision(state=s, events=events, key=cmd.key, reply=ack)


def resume(s: Session, cmd: Resume) -> Decision:
    ack = m.Ack(request_id=cmd.request_id, session_id=s.session_id, key=cmd.key)
    if s.stored.running_goal is None:
        note = ("info", "no goal run in flight")
        return Decision(state=s, reply=attrs.evolve(ack, consumed=True, notices=(note,)))
    # The run goes on by itself once the session is up: the shell settles after every
    # request, which starts the next turn when one is due.
    return Decision(state=s, reply=attrs.evolve(ack, seq=s.stored.last_seq))


def goal_budget(st: SessionState, run: Running, now: float) -> GoalBudget | None:
    """The goal run's own budget and what the run has used since it started, for the
    gate's goal rules (None when no run with a budget is in flight)."""
    g = st.running_goal
    if g is None or not g.budget:
        return None
    turn = open_usage(st, run)
    used = st.usage + turn if turn is not None else st.usage
    # The open turn's cost is priced as the session's own budget prices it.
    spend = st.spend.charged(turn, st.metadata.get(MODEL_NAME, ""))
    spent = Spent(
        tokens=used.input_tokens + used.output_tokens - g.base_tokens,
        tool_calls=st.tool_calls - g.base_tool_calls,
        turns=run.turn - g.base_turns,
        cost=spend.cost - g.base_cost if spend.priced else None,
        raised=g.raised,
    )
    elapsed = now - g.started_at if g.started_at and now else None
    return GoalBudget(limits=dict(g.budget), spent=spent, elapsed=elapsed)


def paused_on(st: SessionState, run: Running, now: float) -> str:
    """The goal run a budget pause of a model call names when the run's own ``max_cost``
    is what it waits on (so a raise grows that budget), else ""."""
    g, budget = st.running_goal, goal_budget(st, run, now)
    try:
        policy = Policy.from_metadata(st.metadata)
    except PolicyError:
        return ""
    ask = Ask(policy=policy, action="model", spent=spent_of(st, run, "model"), goal=budget)
    return g.id if g is not None and GoalCost().check(ask) is not None else ""


def stalled(g: GoalRun, reason: str) -> Event:
    return Event(kind=Kind.STALLED, goal=g.id, error=reason)


def ended(after: SessionState, stop_reason: str, answer: str) -> list[Event]:
    """How the run goes on after a turn ended (``after``: the state with the turn's end
    folded in): converged, stalled, or nothing (another turn follows)."""
    g = after.running_goal
    if g is None or stop_reason == "cancelled":
        return []
    if g.answer:
        # The finish tool ran: its answer is the result, whatever the turn said after.
        return [Event(kind=Kind.CONVERGED, goal=g.id, text=g.answer)]
    if g.exhausted:
        return [stalled(g, f"budget exceeded: {g.exhausted}")]
    if g.failures >= MAX_FAILURES:
        return [stalled(g, f"repeated failures ({g.failures} turns): {g.last_error}")]
    if g.failures:
        return []
    if stop_reason in ANSWER_STOPS:
        mode = finish_mode(after.metadata)
        if mode not in FINISH_MODES:
            return [stalled(g, finish_problem(after.metadata))]
        if mode == "tool":
            return finish_reminder(g)
        if not answer:
            answer = next((t for role, t, _ in reversed(after.history) if role == "assistant"), "")
        return [Event(kind=Kind.CONVERGED, goal=g.id, text=answer)]
    # The model call itself was refused (a fault as the stop reason).
    return [stalled(g, f"governance refused the model call: {stop_reason}")]


def finish_reminder(g: GoalRun) -> list[Event]:
    """A turn answered without calling ``finish``: remind the model, unless it has been
    reminded `MAX_FAILURES` times already (then the run stalls instead of looping)."""
    if g.reminders >= MAX_FAILURES:
        why = f"the model answered {g.reminders + 1} times without calling finish"
        return [stalled(g, why)]
    return [
        Event(
            kind=Kind.USER_MESSAGE,
            goal=g.id,
            text=REMINDER,
            extra={FINISH_REMINDER: True},
        )
    ]


def cancelled(st: SessionState) -> list[Event]:
    """The stall of the run in flight when it is interrupted or closed."""
    g = st.running_goal
    return [] if g is None else [stalled(g, CANCELLED)]


# -- fan-out -----------------------------------------------------------------------------


def child_id(parent: str, tool_use_id: str) -> str:
    """The child a spawn call creates: named after the parent and the call, so a turn that
    resumes after a crash and asks again finds the same child instead of a second one."""
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in tool_use_id)
    return f"{parent}-{safe}"


def spawn(s: Session, cmd: Spawn) -> Decision:
    run = s.running
    if run is None or run.turn != cmd.turn:
        return Decision(state=s)  # a worker of a turn already closed
    st = s.stored
    child = child_id(s.session_id, cmd.tool_use_id)
    md = {k: v for k, v in st.metadata.items() if not k.startswith("goal.")}
    if GOAL_FINISH in st.metadata:
        md[GOAL_FINISH] = st.metadata[GOAL_FINISH]  # a child ends its run as its parent does
    md.update(
        {
            GOAL_OBJECTIVE: cmd.objective,
            GOAL_PARENT: s.session_id,
            GOAL_DEPTH: str(depth_of(st.metadata) + 1),
        }
    )
    events: tuple[Event, ...] = ()
    if child not in st.children:
        events = (
            Event(
                kind=Kind.CHILD_SPAWNED,
                turn=run.turn,
                goal=s.session_id,
                child=child,
                text=cmd.objective,
            ),
        )
    effect = CreateChild(turn=cmd.turn, tool_use_id=cmd.tool_use_id, child=child, metadata=md)
    return Decision(state=s, events=events, effects=(effect,))


def opening(session_id: str, metadata: Mapping[str, str]) -> tuple[list[Event], list[Event]]:
    """The events a new session opens with (before and after its metadata): a spawned
    child (``goal.objective`` set) opens its goal run at once."""
    objective = metadata.get(GOAL_OBJECTIVE, "")
    if not objective:
        return [Event(kind=Kind.SESSION_STARTED, text=metadata.get("objective", ""))], []
    return (
        [Event(kind=Kind.SESSION_STARTED, goal=session_id, text=objective)],
        [Event(kind=Kind.USER_MESSAGE, goal=session_id, text=objective)],
    )


def cancel_children(st: SessionState) -> tuple[list[Event], tuple[Effect, ...]]:
    """The running children fold back as cancelled, and are told to stop."""
    running = tuple(c for c, live in st.children.items() if live)
    if not running:
        return [], ()
    events = [
        Event(
            kind=Kind.CHILD_COMPLETED,
            goal=st.session_id,
            child=c,
            result=CANCELLED,
            is_error=True,
        )
        for c in running
    ]
    return events, (CancelChildren(children=running),)
