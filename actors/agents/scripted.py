"""The scripted provider: a deterministic model for the demo, tests and benchmarks.

It speaks through the same `Provider` protocol and the same tool loop as a real server,
so everything built on turns (tools, governance, egress, spawn) runs offline. The user's
text drives it:

- ``!tool NAME JSON``: ask for tool NAME with JSON arguments (several ``!tool`` lines ask
  for several calls in one response); once the results are in, say what they returned;
- ``!loop NAME JSON``: ask for the tool again after every result (to exercise the
  tool-round limit);
- ``!slow SECONDS TEXT``: stream TEXT a word at a time, SECONDS apart;
- ``!fail MESSAGE``: fail the model call with MESSAGE;
- ``!hang``: say "thinking", then never answer (until cancelled);
- anything else: echo it back, prefixed with the model's name.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from spine import Usage

from .base import AgentError
from .wire import (
    Message,
    ModelRequest,
    Stopped,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallDone,
    UsageSeen,
)

__all__ = ["ScriptedProvider"]

# A scripted call has no provider report to keep beside its usage.
_NO_RAW: dict[str, object] = {}


def _arguments(raw: str) -> str:
    try:
        json.loads(raw)
    except ValueError:
        return json.dumps({"text": raw})
    return raw


class ScriptedProvider:
    """A `Provider` whose answers are written in the user's message."""

    #: An answer that needs no waiting may be taken without a thread (`ModelAgent.instant`).
    instant = True

    def __init__(self, model: str = "scripted") -> None:
        self.model = model

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        msgs = request.messages
        at = next((i for i in range(len(msgs) - 1, -1, -1) if msgs[i].role == "user"), -1)
        text = msgs[at].text if at >= 0 else ""
        rounds = sum(1 for m in msgs[at + 1 :] if m.role == "assistant")
        words_in = len(text.split())
        # Results since the user's message: the tools have answered.
        results = _answered(msgs)
        if results and not text.startswith("!loop"):
            reply = "; ".join(f"{r.tool_name} returned {r.text}" for r in results)
            yield TextDelta(reply)
            yield UsageSeen(Usage(input_tokens=words_in, output_tokens=3), _NO_RAW)
            yield Stopped("end_turn")
            return
        if text.startswith("!fail"):
            raise AgentError(text[len("!fail") :].strip() or "scripted failure")
        if text.startswith("!hang"):
            yield TextDelta("thinking")
            await asyncio.Event().wait()
        if text.startswith(("!tool", "!loop")):
            said = sum(1 for m in msgs if m.role == "user")
            calls = _tool_calls(text, f"toolu_{said}_{rounds}_")
            for call in calls:
                yield ToolCallDone(call)
            yield UsageSeen(Usage(input_tokens=words_in, output_tokens=len(calls)), _NO_RAW)
            yield Stopped("tool_use")
            return
        delay, text = _paced(text)
        words = f"[{request.model}] {text}".split(" ")
        for i, word in enumerate(words):
            yield TextDelta(word if i == 0 else " " + word)
            yield UsageSeen(Usage(input_tokens=words_in, output_tokens=i + 1), _NO_RAW)
            if delay:
                await asyncio.sleep(delay)
        yield Stopped("end_turn")


def _answered(msgs: tuple[Message, ...]) -> list[Message]:
    """The tool results since the last user message, in order."""
    results = []
    for m in reversed(msgs):
        if m.role == "user":
            break
        if m.role == "tool":
            results.append(m)
    results.reverse()
    return results


def _tool_calls(text: str, id_prefix: str) -> list[ToolCall]:
    """The calls the ``!tool`` and ``!loop`` lines of ``text`` ask for, in order."""
    calls: list[ToolCall] = []
    for line in text.splitlines():
        if not line.startswith(("!tool", "!loop")):
            continue
        parts = line.split(maxsplit=2)
        name = parts[1] if len(parts) > 1 else "echo"
        args = _arguments(parts[2]) if len(parts) > 2 else "{}"
        # Unique in the session, as a real server's ids are.
        calls.append(ToolCall(id=f"{id_prefix}{len(calls) + 1}", name=name, arguments=args))
    return calls


def _paced(text: str) -> tuple[float, str]:
    """The seconds between words a ``!slow`` message asks for (0: none), and its text."""
    if not text.startswith("!slow"):
        return 0.0, text
    parts = text.split(maxsplit=2)
    try:
        delay = float(parts[1])
    except (IndexError, ValueError):
        delay = 0.05
    return delay, parts[2] if len(parts) > 2 else "slow"
