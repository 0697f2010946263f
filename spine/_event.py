"""The event model: `Event`, `Kind` and `Usage`, with the seed's fields and vocabulary."""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import attrs
import orjson

from ._errors import InvalidArgumentError
from ._frozen import EMPTY, FrozenDict, frozen_dict


class Kind(enum.StrEnum):
    """Every event kind the runtime writes.

    `Event.kind` is a plain string, so kinds from a newer writer survive a round trip;
    members of this enum compare equal to their string values.
    """

    # The seed's conversation arc.
    SESSION_STARTED = "session.started"
    TURN_STARTED = "turn.started"
    ASSISTANT = "assistant.message"
    TOOL_CALL = "tool.call"
    TOOL_RESULT = "tool.result"
    TURN_COMPLETED = "turn.completed"
    CHILD_SPAWNED = "child.spawned"
    CHILD_COMPLETED = "child.completed"
    CONVERGED = "session.converged"
    STALLED = "session.stalled"
    ACTION_ADMITTED = "action.admitted"
    ACTION_COMPLETED = "action.completed"
    ACTION_REJECTED = "action.rejected"
    RECORD_SEALED = "record.sealed"
    RECORD_VERIFIED = "record.verified"
    EGRESS = "net.egress"

    # The session vocabulary (ingress and lifecycle).
    USER_MESSAGE = "user.message"
    INTERRUPT = "user.interrupt"
    SESSION_SWITCH = "session.switch"
    PROPERTIES = "session.properties"
    LIFECYCLE = "session.lifecycle"
    TURN_CANCELLED = "turn.cancelled"
    #: A governed action waits for a human's approval (``call``, ``action``, ``tool``,
    #: ``toolUseID``, ``input``); the seed's projection ignores it as an unknown kind.
    ACTION_PENDING = "action.pending"
    #: A human's decision on a pending action: ``allowed``, and the note as ``reason``.
    ACTION_APPROVAL = "action.approval"
    #: The effect ledger's intent: a tool call is about to run (``call``, ``tool``,
    #: ``toolUseID``; ``extra`` holds its ``idempotencyKey`` and ``idempotent``).
    ACTION_STARTED = "action.started"
    #: Recovery found a started call without an outcome: whether its effect happened is
    #: unknown. ``reason`` says what cut it, ``extra.resolution`` what happens next
    #: (``retry``, ``fail`` or ``ask``).
    ACTION_IN_DOUBT = "action.in_doubt"
    #: A summary of a span of the conversation (``fromSeq`` .. ``toSeq``, the summary as
    #: ``text``): the model sees it in place of that span; the span's events stay stored.
    CONTEXT_COMPACTED = "context.compacted"
    #: Takes back the compaction stored at ``call`` (its seq; 0: the one in force): the
    #: earlier view returns.
    CONTEXT_UNCOMPACTED = "context.uncompacted"
    #: Asks the next turn to start by summarising the older conversation (``/compact``).
    CONTEXT_COMPACT = "context.compact"
    #: The model's context window as a server answered it (``extra``: tokens, source, key).
    CONTEXT_WINDOW = "context.window"
    #: A steer (a ``user.message`` with ``steer``) reached the running ``turn`` at a safe
    #: point: before the model call ``call``, after the tool batch before it was answered.
    STEER_DELIVERED = "steer.delivered"
    #: A steer whose turn ended before a safe point: ``reason``, and ``handed`` (``next``:
    #: it is the next turn's message; ``refused``).
    STEER_DROPPED = "steer.dropped"
    #: The conversation's active path now runs through the turn ``activates`` names.
    BRANCH_SWITCHED = "branch.switched"
    #: A fork's first event: its parent, the seq it forked at and the parent's Merkle
    #: root up to it (``extra``); the parent's prefix is read by reference.
    SESSION_FORKED = "session.forked"
    #: Timers in the session's own log: set (``extra``: timer, text, due, cron, tz,
    #: policy, grace), cancelled (timer), fired (timer, due, late, missed, next, skipped).
    TIMER_SET = "timer.set"
    TIMER_CANCELLED = "timer.cancelled"
    TIMER_FIRED = "timer.fired"
    #: The operator's price table in force from here on (``extra``: version, models).
    PRICES = "budget.prices"
    #: A human raised the session's cost budget (``extra``: amount) or stopped it.
    BUDGET_RAISED = "budget.raised"
    #: The session waits for a human (``reason`` budget, ``call`` the waiting action).
    PAUSED = "session.paused"
    # Notices are pushed live to sinks and never stored.
    NOTICE = "notice"


#: Kinds that never reach the log.
EPHEMERAL_KINDS: frozenset[str] = frozenset({Kind.NOTICE})


class Phase(enum.StrEnum):
    """Lifecycle phases carried by `Kind.LIFECYCLE` events."""

    OPENED = "opened"
    DONE = "done"
    RECOVERED = "recovered"
    RESTARTED = "restarted"
    PASSIVATED = "passivated"
    FAILED = "failed"
    CLOSED = "closed"
    #: An ingress crashed the session twice and was dropped; the session serves on.
    POISONED = "poisoned"


class Severity(enum.StrEnum):
    """How a conduit renders a notice."""

    SUCCESS = "success"
    INFO = "info"
    WARN = "warn"
    ERROR = "error"


@attrs.frozen(kw_only=True)
class Usage:
    """Token cost of one turn. ``input_tokens`` includes the cached subset."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
        )

    def is_zero(self) -> bool:
        return not (
            self.input_tokens
            or self.output_tokens
            or self.cache_read_tokens
            or self.cache_write_tokens
            or self.reasoning_tokens
        )


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# The standard library's parser, for what orjson refuses but the JSON grammar allows
# (orjson releases before 3.10 refuse integers beyond 64 bits). NaN and Infinity are
# Python extensions, not JSON, so they are refused here too.
_wide_decoder = json.JSONDecoder(parse_constant=_refuse_constant)


def check_json(value: str) -> str:
    """``value`` itself if it is one JSON text, else `InvalidArgumentError` naming why.

    Nothing is normalised: whitespace, key order and number spellings (``1.0``, ``1e3``,
    integers of any size) are the writer's, like the seed's ``json.RawMessage``.
    """
    try:
        orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        try:
            _wide_decoder.decode(value)
            # Lone surrogates parse but have no UTF-8 form, so they could not be stored.
            value.encode()
        except ValueError:
            raise InvalidArgumentError(f"input is not valid JSON: {exc}") from None
    return value


def _raw_json(value: str) -> str:
    # A tool's arguments as the writer gave them: kept byte for byte, checked to be JSON.
    if not value:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"input must be JSON text, got {type(value).__name__}")
    return check_json(str(value))


def _usage_or_none(value: Usage | None) -> Usage | None:
    # The stored shape omits a zero usage, so the model does not tell it apart from none:
    # an event then equals its own round trip.
    if value is None or value.is_zero():
        return None
    return value


def _freeze_mapping(value: Mapping[str, Any] | None) -> FrozenDict:
    # A read-only copy, frozen all the way down: an event never changes once built.
    if type(value) is FrozenDict:
        return value
    return EMPTY if not value else frozen_dict(value)


# No weakref slot: it would keep `build_event` below from using its layout-twin builder.
@attrs.frozen(kw_only=True, weakref_slot=False)
class Event:
    """One record on a session's stream; fields not used by its kind stay empty.

    ``seq`` is assigned by the log on append (0 until then). ``time`` is stamped by the log
    when the writer leaves it unset. ``input`` is the tool's arguments as raw JSON text, kept
    byte for byte as the writer gave it (checked to be JSON, never re-encoded).
    ``properties`` maps metadata keys to new values (``None`` deletes a key). ``record``
    describes a seal or a verification (record.* kinds). ``extra``
    keeps fields written by a newer version so that nothing is dropped on a round trip.
    These three are read-only (`FrozenDict`, nested dicts and lists frozen too): an event
    is immutable all the way down, and still equal to one built from plain dicts.
    """

    kind: str
    seq: int = 0
    time: datetime | None = None
    actor: str = ""
    goal: str = ""
    child: str = ""
    turn: int = 0
    text: str = ""
    tool: str = ""
    tool_use_id: str = ""
    input: str = attrs.field(default="", converter=_raw_json)
    result: str = ""
    is_error: bool = False
    stop_reason: str = ""
    usage: Usage | None = attrs.field(default=None, converter=_usage_or_none)
    error: str = ""
    action: str = ""
    call: int = 0
    trust: str = ""
    fault: str = ""
    host: str = ""
    allowed: bool = False
    reason: str = ""
    # Session vocabulary.
    phase: str = ""
    session: str = ""
    severity: str = ""
    properties: Mapping[str, str | None] = attrs.field(default=EMPTY, converter=_freeze_mapping)
    # The sealed-record description (record.sealed / record.verified): range, root, key id,
    # signature, outcome. Plain JSON values.
    record: Mapping[str, Any] = attrs.field(default=EMPTY, converter=_freeze_mapping)
    extra: Mapping[str, Any] = attrs.field(default=EMPTY, converter=_freeze_mapping)


def _make_builder() -> Callable[..., Event]:
    """A constructor for already-validated fields that skips the frozen ``__setattr__``.

    Replay is bounded by building events: attrs' frozen ``__init__`` stores each of ~30
    fields through ``object.__setattr__`` (about 2.5 us an event). The decoder has already
    checked and normalised every value, so it fills a mutable twin with the same slots by
    plain attribute stores and then gives the object its real class, about 0.6 us. If this
    interpreter refuses the class switch, the builder is simply ``Event`` itself.
    """
    fields = attrs.fields(Event)
    twin = type("_EventTwin", (), {"__slots__": tuple(f.name for f in fields)})
    params = []
    body = ["    e = _new(_Twin)"]
    ns: dict[str, Any] = {"_new": object.__new__, "_Twin": twin, "_Event": Event}
    for f in fields:
        if f.name == "kind":
            params.append("kind")
            body.append("    e.kind = kind")
        else:
            ns[f"_d_{f.name}"] = f.default
            params.append(f"{f.name}=_d_{f.name}")
            body.append(f"    e.{f.name} = {f.name}")
    body.append("    _setattr(e, '__class__', _Event)")
    body.append("    return e")
    ns["_setattr"] = object.__setattr__
    src = f"def build(*, {', '.join(params)}):\n" + "\n".join(body) + "\n"
    exec(src, ns)
    build: Callable[..., Event] = ns["build"]
    try:
        props = FrozenDict({"k": "v"})
        probe = build(kind="probe", text="t", properties=props)
        if probe != Event(kind="probe", text="t", properties=props) or probe.record is not EMPTY:
            return Event
    except TypeError:
        return Event
    return build


#: Build an `Event` from fields that are already valid and normalised (the decoder's
#: output): ``input`` checked JSON text, ``usage`` non-zero or ``None``, mappings as
#: `FrozenDict` (or left out). Anything else must go through `Event` itself.
build_event: Callable[..., Event] = _make_builder()

#: The mutable twin `build_event` fills before giving it the `Event` class, for decoders
#: that generate their own straight-line builders; None where the switch is refused.
EVENT_TWIN: type | None = None if build_event is Event else build_event.__globals__["_Twin"]
