"""The session decider's vocabulary: its state, the commands it takes, the decision it
returns and the effects a decision asks the shell to carry out. All pure data."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from spine import Event, Usage

from ...agents.governance import Requirement
from ...interceptors import Ingress, NoticeItem
from ...model_servers import ModelServers
from ...policy import BusyPolicy
from ...spec import AgentSpec, TurnInput
from ...terse import terse_module
from .goal_commands import Resume as Resume
from .goal_commands import Spawn as Spawn
from .goal_commands import Submit as Submit
from .seal_commands import Sealed as Sealed
from .seal_commands import SealStream as SealStream
from .seal_commands import Verified as Verified
from .seal_commands import VerifyStream as VerifyStream
from .spend import TenantShare
from .state import SessionState
from .timer_commands import CancelTimer as CancelTimer
from .timer_commands import FireDue as FireDue
from .timer_commands import SetTimer as SetTimer

#: Kind of the live item that carries streamed model text.
ASSISTANT_DELTA = "assistant.delta"


@attrs.frozen(kw_only=True)
class Running:
    """The turn whose worker runs now: what it has streamed so far."""

    turn: int
    text: str = ""
    usage: Usage | None = None
    #: How much of ``text`` is already stored as ``assistant.message`` events (text said
    #: before a round's tool calls is stored ahead of them).
    said: int = 0


@attrs.frozen(kw_only=True)
class Session:
    """The decider's state: the folded stream plus what only this incarnation knows."""

    stored: SessionState
    busy_policy: BusyPolicy = BusyPolicy.ENQUEUE
    running: Running | None = None
    stopping: bool = False
    #: What the operator gave this incarnation: its price table (`spend.check_prices`)
    #: and the model servers the session may name (`actors.model_servers`).
    prices: Mapping[str, Any] | None = None
    model_servers: ModelServers = attrs.field(factory=ModelServers)

    @property
    def session_id(self) -> str:
        return self.stored.session_id


# -- commands ----------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Open:
    """A new incarnation starts: create the stream if asked, close what a crash left open."""

    incarnation: int = 0
    create: bool = False
    metadata: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class Receive:
    """Ingress as it arrived (user message, interrupt, metadata change, switch), before
    the interceptor chain. ``stored`` is what an earlier delivery of the same key stored,
    as ``(seq, kind)`` rows (the shell looks the key up in the log), empty if nothing."""

    request_id: str
    ingress: Ingress
    stored: tuple[tuple[int, str], ...] = ()
    #: The events of that delivery: is this a retry, or another request reusing its key?
    prior: tuple[Event, ...] = ()


@attrs.frozen(kw_only=True)
class Intercepted:
    """What the interceptor chain made of a `Receive` (``ingress`` None: consumed):
    ``changes`` the metadata changes it made through its session view, ``emitted`` the
    events and notices it published, in order, ``notices`` the result's (after the chain)."""

    request_id: str
    key: str
    ingress: Ingress | None
    changes: Mapping[str, str | None] = attrs.field(factory=dict)
    emitted: tuple[Event | NoticeItem, ...] = ()
    notices: tuple[NoticeItem, ...] = ()


@attrs.frozen(kw_only=True)
class Close:
    request_id: str


@attrs.frozen(kw_only=True)
class CloseStored:
    """Close a stream that has no process (the Runner is its writer): what a crash left
    open is closed, the goal run in flight stalls, then ``closed`` -- as `Close` does."""


@attrs.frozen(kw_only=True)
class FailStored:
    """Record the failure of a stream that has no process (it crashed past its restart
    budget; the Runner is its writer): what the crash left open is closed, then ``failed``."""

    reason: str


@attrs.frozen(kw_only=True)
class ReviveStored:
    """An operator's decision to bring a failed session back, recorded by the Runner (a
    failed session has no process) as ``recovered`` naming ``reason``."""

    request_id: str
    reason: str = ""


@attrs.frozen(kw_only=True)
class Progress:
    """From the turn's worker: streamed text, tool events to store, usage so far."""

    turn: int
    text: str = ""
    events: tuple[Event, ...] = ()
    usage: Usage | None = None


@attrs.frozen(kw_only=True)
class Finished:
    """The turn's worker ended (its last text rides along)."""

    turn: int
    stop_reason: str
    text: str = ""
    error: str = ""
    usage: Usage | None = None
    #: The providers' own usage reports, one per model call (turn.completed's providerUsage).
    provider_usage: tuple[Mapping[str, Any], ...] = ()
    #: Events the worker still held (an action's end): stored after the last text.
    events: tuple[Event, ...] = ()


@attrs.frozen(kw_only=True)
class Govern:
    """From the turn's worker: may this action run? ``action`` is ``model`` or the tool's
    name; ``need`` is what the tool declares it needs. Answered with `AnswerWorker`."""

    turn: int
    action: str
    tool_use_id: str = ""
    input: str = ""
    need: Requirement = attrs.field(factory=Requirement)
    #: The addresses the worker resolved ``need.egress``'s host name to (None: not looked up).
    resolved: tuple[str, ...] | None = None
    #: Unix time the session got it (stamped by the shell: a goal's wall-time budget).
    now: float = 0.0
    #: What the tenant's other sessions spent in the current periods (read by the shell
    #: when the tenant's spending is capped; the caps are checked against it).
    others: TenantShare = attrs.field(factory=TenantShare)
    #: A server's question to a human during the call (MCP elicitation): see `questions`.
    question: Mapping[str, Any] | None = None
    #: In a replay: the human decision (approved, note) the replayed turn's equal call got,
    #: served instead of asking again (`replaying.served_decision`; heeded only under
    #: ``replay.*`` metadata, which only the operator writes, and where no tool runs).
    recorded: tuple[bool, str] | None = None


@attrs.frozen(kw_only=True)
class Decide:
    """A human's approval or rejection of a pending action."""

    request_id: str
    key: str
    call: int
    approve: bool
    note: str = ""
    #: Raise the session's cost budget by this much (a pause for budget waits on it).
    raise_by: float = 0.0
    #: An accepted question's answer (an elicitation's content).
    content: Mapping[str, Any] | None = None
    #: An in-doubt call's result, given by hand (`resolve`; "" for a verdict).
    result: str = ""
    is_error: bool = False


@attrs.frozen(kw_only=True)
class StartFailed:
    """The agent for a started turn could not be built (the factory raised)."""

    turn: int
    error: str


@attrs.frozen
class Settle:
    """Nothing arrived: start the next turn if one is due."""


@attrs.frozen(kw_only=True)
class Poisoned:
    """The Runner dropped a keyed ingress that crashed this session twice."""

    key: str
    detail: str


Command = (
    Open
    | Receive
    | Intercepted
    | Close
    | CloseStored
    | FailStored
    | ReviveStored
    | SealStream
    | Sealed
    | VerifyStream
    | Verified
    | Progress
    | Finished
    | Govern
    | Decide
    | SetTimer
    | CancelTimer
    | FireDue
    | Submit
    | Resume
    | Spawn
    | StartFailed
    | Settle
    | Poisoned
)


# -- effects -----------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class RunInterceptors:
    """Run the chain over ``ingress`` and decide `Intercepted` with what it returns."""

    request_id: str
    ingress: Ingress


@attrs.frozen(kw_only=True)
class StartTurn:
    """Build the agent with the factory and run it on a worker thread."""

    turn: int
    spec: AgentSpec
    input: TurnInput


@attrs.frozen(kw_only=True)
class CancelTurn:
    turn: int


@attrs.frozen(kw_only=True)
class AnswerWorker:
    """Tell the running turn's worker the gate's verdict on one action."""

    turn: int
    action: str
    tool_use_id: str
    verdict: str
    call: int
    fault: str = ""
    #: The call's idempotency key (admitted tool calls), handed to the tool.
    key: str = ""
    #: The result a human gave by hand (fault ``resolved``), stored already.
    result: str = ""
    is_error: bool = False
    #: Steers delivered with this admission (a model call's): the worker adds them to the
    #: conversation, as user messages, before the call.
    steers: tuple[str, ...] = ()
    #: A question's answer (``action`` accept, decline or cancel, and ``content``).
    answer: Mapping[str, Any] | None = None

    @classmethod
    def to(
        cls, cmd: Govern, verdict: str, call: int, fault: str = "", key: str = ""
    ) -> AnswerWorker:
        """The answer to the worker's question ``cmd``."""
        return cls(
            turn=cmd.turn,
            action=cmd.action,
            tool_use_id=cmd.tool_use_id,
            verdict=verdict,
            call=call,
            fault=fault,
            key=key,
        )


@attrs.frozen(kw_only=True)
class CreateChild:
    """Ask the Runner to create the child session ``child`` (its metadata carries the
    objective, so it opens its goal run as it is created); then answer the worker."""

    turn: int
    tool_use_id: str
    child: str
    metadata: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class CancelChildren:
    """Interrupt the running children: each stalls with reason cancelled."""

    children: tuple[str, ...]


@attrs.frozen
class EndSubscriptions:
    """Tell every subscriber the session closed (a final batch with ``closed``)."""


@attrs.frozen(kw_only=True)
class StopSelf:
    """Ask the Runner to stop this incarnation."""

    reason: str


@attrs.frozen(kw_only=True)
class ComputeSeal:
    request_id: str


@attrs.frozen(kw_only=True)
class ComputeVerification:
    request_id: str


Effect = (
    RunInterceptors
    | StartTurn
    | CancelTurn
    | AnswerWorker
    | CreateChild
    | CancelChildren
    | EndSubscriptions
    | StopSelf
    | ComputeSeal
    | ComputeVerification
)


@attrs.frozen(kw_only=True)
class Live:
    """An ephemeral item (notice, text delta) placed after stored seq ``after_seq``."""

    after_seq: int
    kind: str
    severity: str
    text: str

    def as_tuple(self) -> tuple[int, str, str, str]:
        return (self.after_seq, self.kind, self.severity, self.text)


@attrs.frozen(kw_only=True)
class Decision:
    """What a command decided: events to append (with the ingress's idempotency key), the
    reply, live items, effects, and the decider's next state. The state's ``stored`` part
    is not advanced here: the shell folds the events it actually appended; an append the
    log reports as a duplicate key applies only the reply (an earlier delivery stored the
    events)."""

    state: Session
    events: tuple[Event, ...] = ()
    key: str | None = None
    reply: Any = None
    live: tuple[Live, ...] = ()
    effects: tuple[Effect, ...] = ()


# Thespian formats every message it moves; keep that cheap (see `actors.terse`).
terse_module(globals())
