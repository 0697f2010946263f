"""Tools a model may call: a registry and the built-ins (``clock``, ``calculator``).

A tool is a name, a description, JSON-schema parameters and a Python callable that takes
the decoded arguments and returns text. Tools travel to session processes inside the
agent factory, so their callables must be importable module-level functions.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from datetime import UTC, datetime
from typing import Any

import attrs

from spine import Event, Kind

from .governance import Requirement
from .wire import ToolSpec

__all__ = [
    "CALCULATOR",
    "CLOCK",
    "FINISH",
    "HTTP_GET",
    "RECALL",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolOutput",
    "ToolRegistry",
    "builtin_tools",
    "calculate",
]


class ToolError(Exception):
    """A tool could not do what was asked; its message goes back to the model."""


@attrs.frozen(kw_only=True)
class ToolContext:
    """What a tool that asks for it (``context=True``) gets beside its arguments: a way to
    store events in the turn (``net.egress`` decisions) and the egress allowlist."""

    emit: Callable[[Event], None]
    egress_allow: tuple[str, ...] = ()
    #: Delegate ``(tool_use_id, objective)`` to a child session and wait for its end:
    #: ``(result, is_error)``. None where no session runs the turn.
    delegate: Callable[[str, str], tuple[str, bool]] | None = None
    #: The id of the tool call being answered.
    tool_use_id: str = ""
    #: The call's idempotency key, stable across restarts (the session, the turn and the
    #: call): a tool that reaches a system honouring keys sends it, so a re-run of a call
    #: in doubt does nothing twice.
    idempotency_key: str = ""
    #: The session whose turn calls the tool.
    session_id: str = ""
    #: The text of this session's stored event ``seq`` (None where no log is at hand).
    recall: Callable[[int], str] | None = None
    #: Set a timer in the session ``(tool_use_id, args)``: what was set, as text (raises
    #: `ToolError` for a timer that cannot be set). None where no session runs the turn.
    schedule: Callable[[str, Mapping[str, Any]], str] | None = None
    #: Ask a human a server's question ``(tool_use_id, question)``; the future gets the
    #: answer. None where no session runs the turn.
    ask: Callable[[str, Mapping[str, Any]], Future[Mapping[str, Any]]] | None = None


@attrs.frozen(kw_only=True)
class ToolOutput:
    """What a tool may return instead of text: its text, whether it is an error the
    model should hear as one, and fields stored beside it on the ``tool.result``."""

    text: str
    is_error: bool = False
    extra: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class Tool:
    """A tool: ``fn(args)`` (or ``fn(args, ctx)`` with ``context=True``) returns text or
    a `ToolOutput`. ``requirement`` is what the governance gate checks before every call.
    ``idempotent`` declares that running a call twice under its idempotency key has the
    effect of running it once (a pure function, a read, a call whose system dedupes by
    key): a call cut by a crash is then run again; any other is in doubt
    (``governance.in_doubt``). ``asynchronous``: ``fn`` returns an awaitable, awaited on
    the provider loop (so an interrupt cancels it) instead of run on a thread."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    fn: Callable[..., Any]
    requirement: Requirement = attrs.field(factory=Requirement)
    context: bool = False
    idempotent: bool = False
    asynchronous: bool = False

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)


@attrs.frozen
class ToolRegistry:
    """The tools offered to the model, by name."""

    tools: Mapping[str, Tool] = attrs.field(factory=dict)

    @classmethod
    def of(cls, tools: Iterable[Tool]) -> ToolRegistry:
        return cls({t.name: t for t in tools})

    def with_tool(self, tool: Tool) -> ToolRegistry:
        return ToolRegistry({**self.tools, tool.name: tool})

    def get(self, name: str) -> Tool | None:
        return self.tools.get(name)

    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(t.spec() for t in self.tools.values())

    def __len__(self) -> int:
        return len(self.tools)


def _clock(args: Mapping[str, Any]) -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "sqrt": math.sqrt,
    "exp": math.exp,
    "log": math.log,
    "log10": math.log10,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "floor": math.floor,
    "ceil": math.ceil,
}
_CONSTS = {"pi": math.pi, "e": math.e, "tau": math.tau}
_MAX_EXPR = 500
_MAX_MAGNITUDE = 10**100


def calculate(expression: str) -> int | float:
    """Evaluate arithmetic without ``eval``: numbers, + - * / // % **, parentheses, a few
    math functions and constants. Anything else is a `ToolError` naming it."""
    if not isinstance(expression, str) or not expression.strip():
        raise ToolError("expression must be a non-empty string")
    if len(expression) > _MAX_EXPR:
        raise ToolError(f"expression is longer than {_MAX_EXPR} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ToolError(f"cannot parse {expression!r}: {exc.msg}") from None
    value = _eval(tree.body)
    if not isinstance(value, int | float):
        raise ToolError(f"{expression!r} is not a number")
    return value


def _eval(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.Name) and node.id in _CONSTS:
        return _CONSTS[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and (abs(right) > 1000 or abs(left) > _MAX_MAGNITUDE):
            raise ToolError("exponent too large")
        try:
            value = _BINARY[type(node.op)](left, right)
        except (ZeroDivisionError, OverflowError, ValueError) as exc:
            raise ToolError(str(exc)) from None
        if isinstance(value, complex):
            raise ToolError("the result is not a real number")
        if isinstance(value, int) and abs(value) > _MAX_MAGNITUDE:
            raise ToolError("the result is too large")
        return value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCS
        and not node.keywords
    ):
        args = [_eval(a) for a in node.args]
        try:
            return _FUNCS[node.func.id](*args)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ToolError(f"{node.func.id}: {exc}") from None
    raise ToolError(f"not allowed in an expression: {ast.unparse(node)!r}")


def _calculator(args: Mapping[str, Any]) -> str:
    value = calculate(args.get("expression"))  # type: ignore[arg-type]
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


CLOCK = Tool(
    name="clock",
    description="The current date and time in UTC, ISO 8601.",
    parameters={"type": "object", "properties": {}, "additionalProperties": False},
    fn=_clock,
    idempotent=True,
)

CALCULATOR = Tool(
    name="calculator",
    description=(
        "Evaluate an arithmetic expression: numbers, + - * / // % **, parentheses, "
        "sqrt, exp, log, log10, sin, cos, tan, floor, ceil, abs, round, min, max, pi, e."
    ),
    parameters={
        "type": "object",
        "properties": {"expression": {"type": "string", "description": "e.g. 2 * (3 + 4)"}},
        "required": ["expression"],
        "additionalProperties": False,
    },
    fn=_calculator,
    idempotent=True,
)


def _http_get(args: Mapping[str, Any], ctx: ToolContext) -> str:
    from .egress import EgressDecision, EgressRefused, http_get

    url = args.get("url")
    if not isinstance(url, str):
        raise ToolError("url must be a string")

    def record(d: EgressDecision) -> None:
        ctx.emit(Event(kind=Kind.EGRESS, host=d.host, allowed=d.allowed, reason=d.reason))

    try:
        return http_get(
            url, allow=ctx.egress_allow, record=record, idempotency_key=ctx.idempotency_key
        )
    except EgressRefused as exc:
        raise ToolError(str(exc)) from None
    except (OSError, ValueError) as exc:
        raise ToolError(f"{type(exc).__name__}: {exc}") from None


def _one_string(name: str) -> dict[str, Any]:
    """The JSON schema of a tool that takes one string argument, ``name``."""
    return {
        "type": "object",
        "properties": {name: {"type": "string"}},
        "required": [name],
        "additionalProperties": False,
    }


HTTP_GET = Tool(
    name="http_get",
    description=(
        "Fetch a URL (http or https) and return the status and up to 64 KiB of the body as "
        "text. Only public addresses are reachable unless the session allows others."
    ),
    parameters=_one_string("url"),
    fn=_http_get,
    requirement=Requirement(trust="standard", capabilities=frozenset({"net"}), egress="url"),
    context=True,
    # A GET, sent with the call's Idempotency-Key.
    idempotent=True,
)


def _spawn(args: Mapping[str, Any], ctx: ToolContext) -> str:
    objective = args.get("objective")
    if not isinstance(objective, str) or not objective.strip():
        raise ToolError("objective must be a non-empty string")
    if ctx.delegate is None:
        raise ToolError("spawning needs a session to run the turn")
    result, is_error = ctx.delegate(ctx.tool_use_id, objective)
    if is_error:
        raise ToolError(result)
    return result


SPAWN = Tool(
    name="spawn",
    description=(
        "Delegate a sub-objective to a child session that works on it on its own, and "
        "return its final answer. Several spawns in one response run concurrently."
    ),
    parameters=_one_string("objective"),
    fn=_spawn,
    requirement=Requirement(capabilities=frozenset({"spawn"})),
    context=True,
    # The child is named after the call: a re-run finds the same child and its end.
    idempotent=True,
)


def _schedule(args: Mapping[str, Any], ctx: ToolContext) -> str:
    if ctx.schedule is None:
        raise ToolError("scheduling needs a session to run the turn")
    return ctx.schedule(ctx.tool_use_id, args)


_LIMITS = ("max_turns", "max_tool_calls", "max_tokens", "max_seconds", "max_cost")
#: Capability ``schedule``: the session's own timers, each firing a message to it later.
SCHEDULE = Tool(
    name="schedule",
    description=(
        "Have a message delivered to this conversation later: after_seconds from now, or "
        "on every time a five-field cron expression names (in tz, an IANA time zone). "
        "Use it for reminders and recurring work. With goal true, each firing instead "
        "starts a goal run with text as its objective, limited by budget."
    ),
    parameters={
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "the message to deliver"},
            "after_seconds": {"type": "number", "minimum": 0},
            "cron": {"type": "string"},
            "tz": {"type": "string"},
            "goal": {"type": "boolean"},
            "budget": {
                "type": "object",
                # A goal run's limits: whole numbers but max_cost (the session checks them).
                "properties": {k: {"type": "number", "exclusiveMinimum": 0} for k in _LIMITS},
                "additionalProperties": False,
            },
        },
        "required": ["text"],
        "additionalProperties": False,
    },
    fn=_schedule,
    requirement=Requirement(capabilities=frozenset({"schedule"})),
    context=True,
    # The timer's id and the append's key come from the turn and the call: a call run
    # again after a crash sets the same timer, once.
    idempotent=True,
)


def _finish(args: Mapping[str, Any]) -> str:
    answer = args.get("answer")
    if not isinstance(answer, str) or not answer.strip():
        raise ToolError("answer must be a non-empty string: the final answer to the objective")
    return answer


#: Offered only in a goal run whose session sets ``goal.finish`` = ``tool``: a call that
#: runs (it passes the gate like any tool) ends the turn, and its answer is the run's result.
FINISH = Tool(
    name="finish",
    description=(
        "Call this once the objective is met, with the final answer. The run ends with "
        "that answer; nothing else you say counts as the answer."
    ),
    parameters=_one_string("answer"),
    fn=_finish,
    idempotent=True,
)


#: Characters one recall returns unless asked for fewer.
RECALL_LENGTH = 4000


def _whole_number(args: Mapping[str, Any], key: str, default: int | None = None) -> int:
    v = args.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ToolError(f"{key} must be a whole number")
    return v


def _recall(args: Mapping[str, Any], ctx: ToolContext) -> str:
    seq = _whole_number(args, "seq")
    offset = _whole_number(args, "offset", 0)
    length = max(1, min(_whole_number(args, "length", RECALL_LENGTH), RECALL_LENGTH))
    if ctx.recall is None:
        raise ToolError("recall needs the session's log")
    text = ctx.recall(seq)
    part = text[offset : offset + length]
    end = offset + len(part)
    more = f"; offset={end} reads on" if end < len(text) else ""
    return f"[event {seq}, characters {offset} to {end} of {len(text)}{more}]\n{part}"


#: Offered while the model's view leaves something out (a summary stands for older
#: events, or a tool result was cut): the model reads what it needs back by seq.
RECALL = Tool(
    name="recall",
    description=(
        "Read back an event of this conversation that is no longer shown in full: one a "
        "summary stands for, or a tool result that was cut. seq is the event's number; "
        "offset and length page through a long one."
    ),
    parameters={
        "type": "object",
        "properties": {
            "seq": {"type": "integer"},
            "offset": {"type": "integer"},
            "length": {"type": "integer"},
        },
        "required": ["seq"],
    },
    fn=_recall,
    context=True,
)


def builtin_tools() -> ToolRegistry:
    return ToolRegistry.of([CLOCK, CALCULATOR, HTTP_GET, SPAWN, SCHEDULE])
