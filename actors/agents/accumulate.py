"""Stream accumulators (pure): wire chunks in, `StreamEvent`s out.

One per format: OpenAI chat completions (`ChatAccumulator`, here: the protocol of vLLM,
llama.cpp's server, Ollama and hosted APIs), Anthropic Messages (`AnthropicAccumulator`,
in `anthropic_stream`) and the OpenAI Responses API (`ResponsesAccumulator`, in
`responses_stream`), all three importable from here with the SSE decoder (`sse`) and the
usage readers (`chunks`). Each takes decoded JSON objects one at a time (`feed`) and
yields text and reasoning deltas as they come; tool calls, usage and the stop reason are
settled by `finish`; usage is reported as soon as it is seen.

Real servers send shapes the official SDKs mishandle, so the chat rules are explicit:

- tool-call slots are keyed by ``index``; a different non-empty id at an occupied index
  opens a new call (Ollama sends index 0 for every call);
- a delta without ``index`` continues the last call while its id matches (or is absent);
- ``id``, ``name`` and ``type`` are set once and never concatenated (older llama.cpp
  repeats them on every delta);
- arguments are concatenated and parsed at the end; unparseable arguments become a call
  with ``error`` set, never an exception here;
- ``reasoning`` and ``reasoning_content`` are both read;
- chunks with ``choices: []`` or without ``choices``, ``prompt_progress`` and ``timings``
  chunks are tolerated; the last usage seen wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from .anthropic_stream import AnthropicAccumulator
from .chunks import (
    ProviderStreamError,
    _get,
    _settle_call,
    anthropic_usage,
    openai_usage,
    responses_usage,
)
from .responses_stream import ResponsesAccumulator
from .sse import SseDecoder
from .wire import (
    ReasoningDelta,
    Stopped,
    StreamEvent,
    TextDelta,
    ToolCallDone,
    UsageSeen,
    stop_reason,
)

__all__ = [
    "AnthropicAccumulator",
    "ChatAccumulator",
    "ProviderStreamError",
    "ResponsesAccumulator",
    "SseDecoder",
    "anthropic_usage",
    "openai_usage",
    "responses_usage",
]


class _Slot:
    __slots__ = ("arguments", "id", "name", "order")

    def __init__(self, order: int) -> None:
        self.order = order
        self.id = ""
        self.name = ""
        self.arguments: list[str] = []


class ChatAccumulator:
    """OpenAI chat-completions chunks (``chat.completion.chunk``) to stream events."""

    def __init__(self) -> None:
        self._by_index: dict[int, _Slot] = {}
        self._calls: list[_Slot] = []
        self._last: _Slot | None = None
        self._usage: Mapping[str, Any] | None = None
        self._finish: str | None = None

    def feed(self, chunk: Mapping[str, Any]) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        if not isinstance(chunk, Mapping):
            return out
        if "error" in chunk or "usage" in chunk:
            self._rare(chunk, out)
        choices = chunk.get("choices")
        if not choices or type(choices) is not list:
            return out
        for choice in choices:
            # One completion per request; other choices are not ours.
            if type(choice) is not dict or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if delta:
                text = delta.get("content")
                if text and type(text) is str:
                    out.append(TextDelta(text))
                if len(delta) > ("content" in delta) + ("role" in delta):
                    self._more(delta, out)
            finish = choice.get("finish_reason")
            if finish and type(finish) is str:
                self._finish = finish
        return out

    def _rare(self, chunk: Mapping[str, Any], out: list[StreamEvent]) -> None:
        err = chunk.get("error")
        if err:
            message = _get(err, "message") or err
            raise ProviderStreamError(f"the server reported an error: {message}")
        usage = chunk.get("usage")
        if isinstance(usage, Mapping) and usage:
            # Reported as it arrives, so a call cut off later still counts what it used.
            self._usage = usage
            out.append(UsageSeen(openai_usage(usage), usage))

    def _more(self, delta: Mapping[str, Any], out: list[StreamEvent]) -> None:
        # Anything beyond role and content: reasoning, tool calls.
        for key in ("reasoning_content", "reasoning"):
            r = delta.get(key)
            if isinstance(r, str) and r:
                out.append(ReasoningDelta(r))
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for tc in calls:
                if isinstance(tc, Mapping):
                    self._tool_delta(tc)

    def _tool_delta(self, tc: Mapping[str, Any]) -> None:
        raw_index = tc.get("index")
        index = (
            raw_index if isinstance(raw_index, int) and not isinstance(raw_index, bool) else None
        )
        call_id = tc.get("id") if isinstance(tc.get("id"), str) else ""
        slot: _Slot | None
        if index is None:
            slot = self._last
            if slot is not None and call_id and slot.id and call_id != slot.id:
                slot = None
        else:
            slot = self._by_index.get(index)
            if slot is not None and call_id and slot.id and call_id != slot.id:
                slot = None  # a new call reusing the index (Ollama)
        if slot is None:
            slot = _Slot(len(self._calls))
            self._calls.append(slot)
            if index is not None:
                self._by_index[index] = slot
        self._last = slot
        if call_id and not slot.id:
            slot.id = call_id
        fn = tc.get("function")
        if isinstance(fn, Mapping):
            name = fn.get("name")
            if isinstance(name, str) and name and not slot.name:
                slot.name = name
            args = fn.get("arguments")
            if isinstance(args, str):
                slot.arguments.append(args)
            elif isinstance(args, Mapping):
                # Some servers send the arguments as an object, whole.
                slot.arguments = [orjson.dumps(args).decode()]

    def finish(self) -> list[StreamEvent]:
        """The calls, the usage and the stop reason, once the stream has ended."""
        out: list[StreamEvent] = []
        for slot in self._calls:
            out.append(
                ToolCallDone(_settle_call(slot.order, slot.id, slot.name, "".join(slot.arguments)))
            )
        finish = self._finish
        if self._calls and finish in (None, "stop"):
            finish = "tool_calls"  # servers that stop "normally" after a call
        out.append(Stopped(stop_reason(finish)))
        return out
