"""Decisions about governed actions (pure): the gate's verdict on each model call and tool
call of a running turn, a human's approval or rejection of a waiting one, and what a
cancelled turn does to the actions it left waiting.

A ``call`` id is the seq of the first event that records the action, so it is unique in
the session and the same after any restart (it comes from the stream, not a counter).
"""

from __future__ import annotations

from typing import Any

import attrs

from spine import Event, Kind

from ... import messages as m
from ...agents.egress_rules import EgressDecision, destination, precheck
from ...agents.governance import Ask, Fault, Policy, PolicyError, Ruling, Verdict, rule
from ...spec import AgentSpec, SettingsError, TurnInput, replay_of
from . import questions
from .commands import AnswerWorker, Decide, Decision, Govern, Running, Session, StartTurn
from .conversation import delivered
from .goals import goal_budget, paused_on
from .intents import ARGS, KEY, RETRY, args_hash, effect_key, started_event
from .recovery import unfinished
from .refusals import failed
from .replaying import served_decision
from .spend import GOAL_PAUSE
from .state import PendingAction, SessionState, action_key
from .tenantcaps import over_cap, spent_of
from .views import context_of, history_before


def governed(s: Session, cmd: Govern) -> Decision:
    """The gate's answer to a worker's question, or a server's question put to a human."""
    return questions.asked(s, cmd) if cmd.question is not None else govern(s, cmd)


def govern(s: Session, cmd: Govern) -> Decision:
    run = s.running
    if run is None or run.turn != cmd.turn:
        return Decision(state=s)  # a worker of a turn already closed
    st = s.stored
    again = _asked_again(s, cmd)
    if again is not None:
        return again
    verdict, fault, err, trust, refused = _judged(st, run, cmd)
    over = over_cap(st, run, cmd.others, cmd.now) if verdict == Verdict.ADMIT else None
    if over is not None and cmd.action == "model":
        verdict, fault, err = over.verdict, over.fault, over.why
    call = st.last_seq + 1
    base: dict[str, Any] = {
        "turn": run.turn,
        "action": cmd.action,
        "call": call,
        "trust": trust,
        "tool": cmd.action if cmd.action != "model" else "",
        "tool_use_id": cmd.tool_use_id,
    }
    if verdict == Verdict.ADMIT and cmd.action == "model":
        return _model_admitted(s, cmd, base, call)
    if verdict == Verdict.PENDING and fault == Fault.BUDGET_EXCEEDED:
        # The budget would be passed: the session pauses, its turn intact, and asks.
        ev = Event(kind=Kind.ACTION_PENDING, fault=fault, error=err, input=cmd.input, **base)
        extra = {"period": over.period} if over is not None else {}
        goal = paused_on(st, run, cmd.now) if over is None else ""
        why = Event(kind=Kind.PAUSED, reason="budget", call=call, turn=run.turn, error=err)
        return Decision(state=s, events=(ev, attrs.evolve(why, extra=extra, goal=goal)))
    if verdict == Verdict.ADMIT:
        # The admission and the intent in one append: the tool runs once it is durable.
        key = effect_key(st.session_id, run.turn, call)
        admitted = Event(kind=Kind.ACTION_ADMITTED, extra={KEY: key}, **base)
        intent = started_event(base, key, cmd.need.idempotent)
        effect = AnswerWorker.to(cmd, verdict, call, "", key)
        return Decision(state=s, events=(admitted, intent), effects=(effect,))
    if verdict == Verdict.PENDING:
        key = effect_key(st.session_id, run.turn, call)
        served = served_decision(s, cmd, base, key)  # a replay: the human decided then
        ev = Event(kind=Kind.ACTION_PENDING, input=cmd.input, **base)
        return served or Decision(state=s, events=(ev,))
    return _refused(s, cmd, base, (verdict, fault, err), refused)


def _refused(
    s: Session,
    cmd: Govern,
    base: dict[str, Any],
    ruling: tuple[Verdict, Fault | None, str],
    refused: EgressDecision | None,
) -> Decision:
    verdict, fault, err = ruling
    fault_text = str(fault) if fault is not None else "policy_error"
    ev = Event(kind=Kind.ACTION_REJECTED, fault=fault_text, error=err, **base)
    events: tuple[Event, ...] = (ev,)
    if refused is not None:
        # The guard's decision, as the tool would have stored it (the egress ledger).
        dial = Event(
            kind=Kind.EGRESS,
            turn=base["turn"],
            host=refused.host,
            allowed=False,
            reason=refused.reason,
        )
        events = (ev, dial)
    answer = AnswerWorker.to(cmd, verdict, base["call"], fault_text)
    return Decision(state=s, events=events, effects=(answer,))


def _model_admitted(s: Session, cmd: Govern, base: dict[str, Any], call: int) -> Decision:
    st, turn = s.stored, base["turn"]
    ev = Event(kind=Kind.ACTION_ADMITTED, **base)
    answer = AnswerWorker.to(cmd, Verdict.ADMIT, call)
    if not st.steers:
        return Decision(state=s, events=(ev,), effects=(answer,))
    # The turn's safe point: a model call after the tool batch before it has all its
    # results (the worker asks only then). Waiting steers land here, in order.
    landed = delivered(turn, call, st.steers)
    answer = attrs.evolve(answer, steers=tuple(text for _, text in st.steers))
    return Decision(state=s, events=(ev, *landed), effects=(answer,))


def _judged(
    st: SessionState, run: Running, cmd: Govern
) -> tuple[Verdict, Fault | None, str, str, EgressDecision | None]:
    """The rules' verdict on ``cmd`` with its fault and error, the trust it was judged
    under, and the guard's refusal when that is what refused it."""
    try:
        policy = Policy.from_metadata(st.metadata)
    except PolicyError as exc:
        # A policy that cannot be read admits nothing.
        return Verdict.REJECT, None, str(exc), "", None
    refused = _egress_refused(cmd, policy)
    if cmd.action != "model" and action_key("model", "") not in st.turn_actions:
        # A tool answered before its turn's first model call (a turn resumed after a
        # restart) is first held to the turn's budgets, as that model call would be.
        spent = _turn_budgets(st, run, policy, cmd.now)
        if spent is not None:
            return spent.verdict, spent.fault, spent.error, policy.trust, None
    ask = Ask(
        policy=policy,
        action=cmd.action,
        need=cmd.need,
        spent=spent_of(st, run, cmd.action),
        egress_refused=refused is not None,
        goal=goal_budget(st, run, cmd.now),
    )
    r = rule(ask)
    if r.fault == Fault.EGRESS_REFUSED and refused is not None:
        why = f"egress to {refused.host} refused: {refused.reason}"
        return r.verdict, r.fault, why, policy.trust, refused
    return r.verdict, r.fault, r.error, policy.trust, None


def _turn_budgets(st: SessionState, run: Running, policy: Policy, now: float) -> Ruling | None:
    """The refusal a model call would get now from the budgets (turns, tokens, cost, the
    goal's wall time), or None: what any effect of a resumed turn is held to first."""
    ask = Ask(
        policy=policy,
        action="model",
        spent=spent_of(st, run, "model"),
        goal=goal_budget(st, run, now),
    )
    r = rule(ask)
    return r if r.verdict == Verdict.REJECT else None


def _egress_refused(cmd: Govern, policy: Policy) -> EgressDecision | None:
    """The guard's refusal of the action's destination, or None (allowed, none named,
    or a name that was not looked up: the tool's own guard checks it when it dials)."""
    if not cmd.need.egress:
        return None
    dest = destination(cmd.input, cmd.need.egress)
    if dest is None:
        return None
    d = precheck(dest[0], cmd.resolved, policy.egress_allow)
    return d if d is not None and not d.allowed else None


def _asked_again(s: Session, cmd: Govern) -> Decision | None:
    """The answer to an action the stream already holds a verdict for, or None."""
    st = s.stored
    # A tool call is asked about again when its turn resumes after a restart; a model
    # call never is (each is a new one).
    known = (
        None
        if cmd.action == "model"
        else st.turn_actions.get(action_key(cmd.action, cmd.tool_use_id))
    )
    if known is None:
        return None
    # Asked again (a resumed turn): answer from the stream.
    call, status = known
    intent = st.intents.get(call)
    runs = intent is not None and (
        (status == "admitted" and intent.status == "ready")
        or (status == "in_doubt" and intent.status == RETRY)
    )
    if runs and intent is not None:
        if intent.args and intent.args != args_hash(cmd.input):
            # An approval admits the arguments it was shown, nothing else.
            fault = Fault.APPROVAL_MISMATCH
            return Decision(state=s, effects=(AnswerWorker.to(cmd, Verdict.REJECT, call, fault),))
        base = _base(st, cmd, call)
        spent = _spent_since(st, s, cmd)
        if spent is not None:
            # Approved or to be retried, but a budget ran out meanwhile: it ends refused.
            why = str(spent.fault or "policy_error")
            ev = Event(kind=Kind.ACTION_REJECTED, fault=why, error=spent.error, **base)
            effect = AnswerWorker.to(cmd, Verdict.REJECT, call, why)
            return Decision(state=s, events=(ev,), effects=(effect,))
        ev = started_event(base, intent.key, cmd.need.idempotent)
        effect = AnswerWorker.to(cmd, Verdict.ADMIT, call, "", intent.key)
        return Decision(state=s, events=(ev,), effects=(effect,))
    if status == "admitted":
        # Admitted before the ledger (no key): as it always was.
        return Decision(state=s, effects=(AnswerWorker.to(cmd, Verdict.ADMIT, call),))
    if status in ("started", "in_doubt", "completed"):
        # It ran (or may have): never again, whatever asks.
        return Decision(
            state=s, effects=(AnswerWorker.to(cmd, Verdict.REJECT, call, Fault.IN_DOUBT),)
        )
    if status == "rejected":
        why = Fault.APPROVAL_REJECTED if st.decided.get(call) is False else ""
        return Decision(state=s, effects=(AnswerWorker.to(cmd, Verdict.REJECT, call, why),))
    return Decision(state=s)  # still waiting for a human


def _spent_since(st: SessionState, s: Session, cmd: Govern) -> Ruling | None:
    run = s.running
    if run is None:
        return None
    try:
        policy = Policy.from_metadata(st.metadata)
    except PolicyError as exc:
        return Ruling(Verdict.REJECT, None, str(exc))
    return _turn_budgets(st, run, policy, cmd.now)


def _base(st: SessionState, cmd: Govern, call: int) -> dict[str, Any]:
    try:
        trust = Policy.from_metadata(st.metadata).trust
    except PolicyError:
        trust = ""
    return {
        "turn": cmd.turn,
        "action": cmd.action,
        "call": call,
        "trust": trust,
        "tool": cmd.action,
        "tool_use_id": cmd.tool_use_id,
    }


def decide_action(s: Session, cmd: Decide) -> Decision:
    st = s.stored
    ack = m.Ack(request_id=cmd.request_id, session_id=s.session_id, key=cmd.key)
    before = st.decided.get(cmd.call)
    if before is not None:
        if before == cmd.approve:
            return Decision(state=s, reply=attrs.evolve(ack, duplicate=True))
        was = "approved" if before else "rejected"
        text = f"action {cmd.call} was already {was}"
        return Decision(state=s, reply=failed(s, cmd.request_id, "InvalidRequest", text))
    if not 0.0 <= cmd.raise_by < float("inf"):
        text = f"a budget raise must be a non-negative amount, got {cmd.raise_by!r}"
        return Decision(state=s, reply=failed(s, cmd.request_id, "InvalidRequest", text))
    pending = st.pending_actions.get(cmd.call)
    if pending is None or pending.question is not None or cmd.content is not None:
        return _question(s, cmd, pending)
    key = pending.key or effect_key(st.session_id, pending.turn, cmd.call)
    events = _decided(st, pending, cmd, key)
    run = s.running
    live = run is not None and run.turn == pending.turn
    if live and cmd.approve and pending.action != "model":
        # The worker waits for this answer and runs the call at once: its intent too.
        events = (*events, attrs.evolve(events[-1], kind=Kind.ACTION_STARTED, extra={KEY: key}))
    ack = attrs.evolve(ack, seq=st.last_seq + len(events))
    verdict = Verdict.ADMIT if cmd.approve else Verdict.REJECT
    answer = AnswerWorker(
        turn=pending.turn,
        action=pending.action,
        tool_use_id=pending.tool_use_id,
        verdict=verdict,
        call=cmd.call,
        fault="" if cmd.approve else Fault.APPROVAL_REJECTED,
        key=key if cmd.approve else "",
    )
    if live:
        return Decision(state=s, events=events, key=cmd.key, reply=ack, effects=(answer,))
    ot = st.open_turn
    if ot is None or ot.turn != pending.turn or s.stopping or st.terminal:
        return Decision(state=s, events=events, key=cmd.key, reply=ack)
    # The turn waited through a restart: run it on from where it paused.
    turn = resumed(st, ot.turn)
    return Decision(
        state=attrs.evolve(s, running=Running(turn=ot.turn)),
        events=events,
        key=cmd.key,
        reply=ack,
        effects=(turn,),
    )


def _question(s: Session, cmd: Decide, pending: PendingAction | None) -> Decision:
    """An answer to a server's question, or the refusal of one that is none."""
    if pending is None:
        text = f"no action {cmd.call} waits for approval in session {s.session_id}"
        return Decision(state=s, reply=failed(s, cmd.request_id, "InvalidRequest", text))
    if pending.question is None:
        text = f"action {cmd.call} is an approval, not a question: it takes no content"
        return Decision(state=s, reply=failed(s, cmd.request_id, "InvalidRequest", text))
    return questions.answered(s, cmd, pending)


def _decided(st: SessionState, pending: PendingAction, cmd: Decide, key: str) -> tuple[Event, ...]:
    """The human's decision on a waiting action and the verdict it gives, as events: an
    approval admits this call with these arguments, under ``key``, once (after raising the
    cost budget when it says so)."""
    try:
        trust = Policy.from_metadata(st.metadata).trust
    except PolicyError:
        trust = ""
    base: dict[str, Any] = {
        "turn": pending.turn,
        "action": pending.action,
        "call": cmd.call,
        "trust": trust,
        "tool": pending.action if pending.action != "model" else "",
        "tool_use_id": pending.tool_use_id,
    }
    period, g = st.spend.paused_for.get(cmd.call, ""), st.running_goal
    on_goal = period == GOAL_PAUSE and g is not None
    # What the raise grows: the goal run's money budget, a tenant's cap, or the session's.
    extra = {"amount": cmd.raise_by, **({"period": period} if period and not on_goal else {})}
    goal = g.id if on_goal and g else ""
    raised = (
        (Event(kind=Kind.BUDGET_RAISED, call=cmd.call, goal=goal, extra=extra),)
        if cmd.approve and cmd.raise_by > 0
        else ()
    )
    # A goal run whose money budget a human would not raise ends stalled on that budget.
    stop = {"fault": Fault.BUDGET_EXCEEDED, "error": "goal cost budget: not raised"}
    return (
        *raised,
        Event(kind=Kind.ACTION_APPROVAL, allowed=cmd.approve, reason=cmd.note, **base),
        Event(kind=Kind.ACTION_ADMITTED, extra={KEY: key, ARGS: args_hash(pending.input)}, **base)
        if cmd.approve
        else Event(kind=Kind.ACTION_REJECTED, **(stop if on_goal else _REFUSED), **base),
    )


_REFUSED = {"fault": Fault.APPROVAL_REJECTED}


def resumed(st: SessionState, turn: int) -> StartTurn:
    """The effect that runs on ``turn``, left open by a restart, from where it paused."""

    try:
        spec = AgentSpec.from_metadata(st.metadata)
        allow = Policy.from_metadata(st.metadata).egress_allow
        context = context_of(st, spec)
    except (SettingsError, PolicyError):
        spec, allow, context = AgentSpec(), (), None
    turn_input = TurnInput(
        session_id=st.session_id,
        turn=turn,
        text="",
        history=history_before(st),
        spec=spec,
        resume=True,
        egress_allow=allow,
        context=context,
        replay=replay_of(st.metadata),
    )
    return StartTurn(turn=turn, spec=spec, input=turn_input)


def paused(s: Session) -> Running | None:
    """The running turn, or the turn left open waiting for an approval after a restart
    (no worker runs it, but an interrupt or a close must still end it)."""
    if s.running is not None:
        return s.running
    st = s.stored
    ot = st.open_turn
    if ot is not None and any(p.turn == ot.turn for p in st.pending_actions.values()):
        return Running(turn=ot.turn)
    return None


def withdrawn(st: SessionState, turn: int) -> list[Event]:
    """As ``turn`` is cut off: rejections for its actions still waiting for a human, and
    ends (fault ``cancelled``) for those admitted that never reported one."""
    ended = unfinished(st, Fault.CANCELLED) if st.open_turn is not None else []
    return ended + [
        Event(
            kind=Kind.ACTION_REJECTED,
            turn=p.turn,
            action=p.action,
            call=p.call,
            tool=p.action,
            tool_use_id=p.tool_use_id,
            fault=Fault.CANCELLED,
        )
        for p in st.pending_actions.values()
        if p.turn == turn
    ]
