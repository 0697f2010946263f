"""The model's view of a session (pure): which part of the conversation a model call
carries, how many tokens that is estimated at, when the older part is due to be
summarised, and the summariser's own bounded input.

`model_view` is a function of the `TurnInput` alone, and the decider builds that from
the folded log (`actors.session.rules.views.context_of`): the same log always gives the
same request, live or replayed. No tokenizer: characters times the ratio the provider's
own count of the previous request gave (folded from its ``action.completed``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs
import orjson

from ..spec import ContextView, TurnInput
from .formats import conversation, resume_point
from .wire import Message, ToolCall, ToolSpec

__all__ = [
    "SUMMARY_SYSTEM",
    "Plan",
    "chars_of",
    "chunks",
    "due",
    "elide",
    "estimate",
    "is_overflow",
    "leaves_out",
    "model_view",
    "plan",
    "ratio",
    "summary_budget",
    "tool_limit",
    "tools_chars",
]

#: Tokens per character before a provider has counted one of the session's requests: a
#: high guess (English runs near 0.25), so that an uncalibrated estimate errs early.
DEFAULT_RATIO = 1 / 3
#: Characters a message costs beyond its text (role, separators, ids).
MESSAGE_OVERHEAD = 16
#: The share of the window one tool result may take in the view; a larger one is cut to
#: its head and a stub naming its seq and size.
TOOL_SHARE = 0.25
#: The share of the window the summariser's input may take, and its summary's.
SUMMARY_INPUT_SHARE = 0.5
SUMMARY_OUTPUT_SHARE = 0.125

SUMMARY_SYSTEM = (
    "You condense a conversation between a user and an assistant so that the assistant "
    "can continue it without the original. Keep every fact, decision, name, number, "
    "file, open task and promise; drop pleasantries. Write plain prose, no preamble."
)

#: How servers say that a request is over the model's context (OpenAI, vLLM, Anthropic,
#: llama.cpp, Ollama).
OVERFLOW_MARKERS = (
    "context_length_exceeded",
    "exceed_context_size_error",
    "maximum context length",
    "prompt is too long",
    "exceeds the context window",
    "context window",
)


def ratio(ctx: ContextView) -> float:
    """Tokens per character, from the calibration (bounded: one odd count must not make
    the estimate absurd)."""
    chars, tokens = ctx.calibration
    if chars <= 0 or tokens <= 0:
        return DEFAULT_RATIO
    return min(1.5, max(0.05, tokens / chars))


def chars_of(system: str | None, msgs: Sequence[Message]) -> int:
    """The characters a request carries (what the estimate and the calibration count)."""
    n = len(system or "")
    for m in msgs:
        n += len(m.text) + MESSAGE_OVERHEAD
        for c in m.tool_calls:
            n += len(c.name) + len(c.arguments) + len(c.id) + MESSAGE_OVERHEAD
    return n


def tools_chars(specs: Sequence[ToolSpec]) -> int:
    """The characters the tools offered add to every request."""
    return sum(
        len(s.name) + len(s.description) + len(orjson.dumps(s.parameters, default=dict))
        for s in specs
    )


def estimate(ctx: ContextView, chars: int) -> int:
    return math.ceil(chars * ratio(ctx))


def due(ctx: ContextView, chars: int, reserve: int = 0) -> bool:
    """Whether a request of ``chars`` (plus ``reserve`` output tokens) passes the
    compaction threshold."""
    return ctx.window > 0 and estimate(ctx, chars) + reserve > ctx.compact_at * ctx.window


def tool_limit(ctx: ContextView) -> int:
    """The most characters of one tool result the view carries (0: no limit)."""
    if ctx.window <= 0:
        return 0
    return max(256, int(ctx.window * TOOL_SHARE / ratio(ctx)))


def elide(text: str, limit: int, seq: int = 0) -> str:
    """``text`` cut to ``limit`` characters: its head and a stub saying what is left out."""
    if limit <= 0 or len(text) <= limit:
        return text
    where = f"event seq {seq}" if seq else "this turn"
    stub = f"\n[... {len(text) - limit // 2} of {len(text)} characters elided ({where}) ...]"
    return text[: limit // 2] + stub


#: Tool results cut for the view, kept for the next call: the same large results sit in
#: the history turn after turn, and cutting one means parsing it (0.2 ms for 200 KB).
_ELIDED: dict[tuple[str, int, int], str] = {}
_ELIDED_LIMIT = 1024


def _elided(role: str, text: str, seq: int, limit: int) -> tuple[str, str]:
    if role != "tool.result" or limit <= 0 or len(text) <= limit:
        return role, text
    key = (text, limit, seq)
    cut = _ELIDED.get(key)
    if cut is None:
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError:
            return role, text
        obj["result"] = elide(str(obj.get("result", "")), limit, seq)
        if len(_ELIDED) >= _ELIDED_LIMIT:
            _ELIDED.clear()
        cut = _ELIDED[key] = orjson.dumps(obj).decode()
    return role, cut


def visible(turn: TurnInput) -> tuple[tuple[str, str], ...]:
    """The history entries the model sees: those after the summary in force, large tool
    results cut."""
    ctx = turn.context
    if ctx is None:
        return turn.history
    last = ctx.covered[1] if ctx.summary or ctx.covered[1] else 0
    limit = tool_limit(ctx)
    seqs = ctx.seqs if len(ctx.seqs) == len(turn.history) else (0,) * len(turn.history)
    return tuple(
        _elided(role, text, at, limit)
        for (role, text), at in zip(turn.history, seqs, strict=True)
        if at > last or not at
    )


def leaves_out(turn: TurnInput) -> bool:
    """Whether the view leaves part of the log out (a summary in force, a tool result
    cut): then the ``recall`` tool is offered."""
    ctx = turn.context
    if ctx is None:
        return False
    if ctx.summary or ctx.covered[1]:
        return True
    limit = tool_limit(ctx)
    return limit > 0 and any(
        role == "tool.result" and len(text) > limit for role, text in turn.history
    )


def system_of(turn: TurnInput, system: str | None) -> str | None:
    """The system prompt ``system``, with the summary in force after it."""
    ctx = turn.context
    if ctx is None or not (ctx.summary or ctx.covered[1]):
        return system
    first, last = ctx.covered
    summary = ctx.summary or "(no summary could be written; that part is left out)"
    note = f"Summary of the earlier conversation (events {first} to {last}):\n{summary}"
    return f"{system}\n\n{note}" if system else note


def model_view(
    turn: TurnInput, system: str | None
) -> tuple[str | None, tuple[Message, ...], tuple[ToolCall, ...]]:
    """What a turn's first model call carries: the system prompt (``system``, the
    spec's, with the summary in force), the messages, and for a resumed turn the tool
    calls still to answer."""
    entries = visible(turn)
    if turn.resume:
        msgs, todo = resume_point(entries)
        return system_of(turn, system), msgs, todo
    return system_of(turn, system), conversation(entries, turn.text), ()


@attrs.frozen
class Plan:
    """A compaction to run: the entries of seqs ``first`` .. ``last`` folded into the
    summary in force (``previous``)."""

    first: int
    last: int
    previous: str
    entries: tuple[tuple[str, str], ...]


def plan(turn: TurnInput, keep: int) -> Plan | None:
    """The span to summarise keeping the last ``keep`` user turns verbatim, or None when
    nothing older is left. It ends before a user message, so a tool call and its result
    are never split."""
    ctx = turn.context
    if ctx is None or len(ctx.seqs) != len(turn.history):
        return None
    last = ctx.covered[1]
    rows = [(e, at) for e, at in zip(turn.history, ctx.seqs, strict=True) if at > last]
    users = [i for i, ((role, _), _) in enumerate(rows) if role == "user"]
    cut = len(rows) if keep <= 0 else (users[-keep] if len(users) >= keep else 0)
    if cut <= 0:
        return None
    span = rows[:cut]
    first = ctx.covered[0] if ctx.covered[1] else span[0][1]
    return Plan(
        first=first, last=span[-1][1], previous=ctx.summary, entries=tuple(e for e, _ in span)
    )


def summary_budget(ctx: ContextView) -> tuple[int, int]:
    """(characters of input, tokens of output) one summariser call may use: together well
    inside the window, so the summariser never overflows itself."""
    window = ctx.window if ctx.window > 0 else 8192
    out_tokens = max(64, int(window * SUMMARY_OUTPUT_SHARE))
    return int(window * SUMMARY_INPUT_SHARE / ratio(ctx)), out_tokens


def _line(role: str, body: str) -> str:
    if role in ("user", "assistant"):
        return f"{role.capitalize()}: {body}"
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        obj = {}
    if role == "tool.call":
        return f"Tool call {obj.get('name', '')}({obj.get('input') or ''})"
    return f"Tool result ({obj.get('name', '')}): {obj.get('result', '')}"


def chunks(entries: Sequence[tuple[str, str]], budget: int) -> list[str]:
    """The entries as transcript text in pieces of at most ``budget`` characters (an entry
    larger than a piece is cut)."""
    budget = max(256, budget)
    out: list[str] = []
    cur: list[str] = []
    size = 0
    for role, body in entries:
        line = elide(_line(role, body), budget)
        if cur and size + len(line) + 1 > budget:
            out.append("\n".join(cur))
            cur, size = [], 0
        cur.append(line)
        size += len(line) + 1
    if cur:
        out.append("\n".join(cur))
    return out


def summary_request_text(previous: str, chunk: str, first: int, last: int) -> str:
    head = f"Summary so far:\n{previous}\n\n" if previous else ""
    return (
        f"{head}Conversation to add (events {first} to {last}):\n{chunk}\n\n"
        "Write the updated summary of everything above."
    )


def is_overflow(exc: BaseException) -> bool:
    """Whether a failed model call is the server saying the request is over the window."""
    text = str(exc).lower()
    return any(m in text for m in OVERFLOW_MARKERS)
