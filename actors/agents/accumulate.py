"""Stream accumulators (pure): wire chunks in, `StreamEvent`s out.

One per format: OpenAI chat completions (`ChatAccumulator`, the protocol of vLLM,
llama.cpp's server, Ollama and hosted APIs), Anthropic Messages (`AnthropicAccumulator`)
and the OpenAI Responses API (`ResponsesAccumulator`). Each takes decoded JSON objects
one at a time (`feed`) and yields text and reasoning deltas as they come; tool calls,
usage and the stop reason are settled by `finish`; usage is reported as soon as it is seen.

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

from spine import Usage

from .wire import (
    ReasoningDelta,
    Stopped,
    StreamEvent,
    TextDelta,
    ToolCall,
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


class ProviderStreamError(Exception):
    """The server reported an error inside the stream (an ``error`` event or chunk)."""


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, Mapping) else None


def openai_usage(raw: Mapping[str, Any]) -> Usage:
    """Chat-completions usage: ``prompt_tokens`` already includes the cached ones."""
    return Usage(
        input_tokens=_int(raw.get("prompt_tokens")),
        output_tokens=_int(raw.get("completion_tokens")),
        cache_read_tokens=_int(_get(raw.get("prompt_tokens_details"), "cached_tokens")),
        reasoning_tokens=_int(_get(raw.get("completion_tokens_details"), "reasoning_tokens")),
    )


def responses_usage(raw: Mapping[str, Any]) -> Usage:
    """Responses API usage: ``input_tokens`` already includes the cached ones."""
    return Usage(
        input_tokens=_int(raw.get("input_tokens")),
        output_tokens=_int(raw.get("output_tokens")),
        cache_read_tokens=_int(_get(raw.get("input_tokens_details"), "cached_tokens")),
        reasoning_tokens=_int(_get(raw.get("output_tokens_details"), "reasoning_tokens")),
    )


def anthropic_usage(raw: Mapping[str, Any]) -> Usage:
    """Anthropic reports cache reads and writes beside ``input_tokens``, not inside it:
    they are added back so that input always counts every token processed."""
    read = _int(raw.get("cache_read_input_tokens"))
    write = _int(raw.get("cache_creation_input_tokens"))
    return Usage(
        input_tokens=_int(raw.get("input_tokens")) + read + write,
        output_tokens=_int(raw.get("output_tokens")),
        cache_read_tokens=read,
        cache_write_tokens=write,
    )


def _settle_call(index: int, call_id: str, name: str, arguments: str) -> ToolCall:
    """A finished call: arguments parsed once, a fault recorded instead of raised."""
    cid = call_id or f"call_{index}"
    if not name:
        return ToolCall(id=cid, name="", arguments=_as_json(arguments), error="no tool name")
    text = arguments.strip() or "{}"
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        return ToolCall(
            id=cid,
            name=name,
            arguments=_as_json(arguments),
            error=f"the arguments are not valid JSON ({exc}): {arguments[:200]!r}",
        )
    return ToolCall(id=cid, name=name, arguments=text)


def _as_json(raw: str) -> str:
    # Stored tool input must be JSON; arguments that are not are kept as a JSON string.
    return orjson.dumps(raw).decode()


class SseDecoder:
    """Server-sent events from a byte stream: ``(event, data)`` per dispatched event.

    Lines end in LF, CR or CRLF; comment lines (``:``) are heartbeats and skipped;
    several ``data`` lines join with newlines, as the SSE grammar says.
    """

    def __init__(self) -> None:
        self._buf = b""
        self._event = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[tuple[str, str]]:
        buf = self._buf + chunk
        tail = b""
        if b"\r" in buf:
            if buf.endswith(b"\r"):
                # Perhaps the first half of a CRLF: keep it until the next read.
                buf, tail = buf[:-1], b"\r"
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        self._buf = lines.pop() + tail
        out: list[tuple[str, str]] = []
        for line in lines:
            self._line(line.decode("utf-8", "replace"), out)
        return out

    def close(self) -> list[tuple[str, str]]:
        """Dispatch what an unterminated last event holds."""
        out: list[tuple[str, str]] = []
        if self._buf.strip(b"\r"):
            self._line(self._buf.strip(b"\r").decode("utf-8", "replace"), out)
        self._buf = b""
        self._line("", out)
        return out

    def _line(self, line: str, out: list[tuple[str, str]]) -> None:
        if line.startswith("data: "):
            self._data.append(line[6:])
            return
        if not line:
            if self._data:
                out.append((self._event or "message", "\n".join(self._data)))
            self._event = ""
            self._data = []
            return
        if line.startswith(":"):
            return
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value


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


class AnthropicAccumulator:
    """Anthropic Messages stream events to stream events."""

    def __init__(self) -> None:
        self._blocks: dict[int, dict[str, Any]] = {}
        self._order: list[int] = []
        self._usage: dict[str, Any] = {}
        self._stop: str | None = None
        self.thinking: list[tuple[str, str]] = []

    def feed(self, event: Mapping[str, Any]) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        if not isinstance(event, Mapping):
            return out
        kind = event.get("type")
        if kind == "error":
            err = event.get("error")
            what = f"{_get(err, 'type') or ''} {_get(err, 'message') or err}".strip()
            raise ProviderStreamError(f"the server reported an error: {what}")
        if kind == "message_start":
            if self._merge_usage(_get(event.get("message"), "usage")):
                out.append(UsageSeen(anthropic_usage(self._usage), dict(self._usage)))
        elif kind == "content_block_start":
            index = event.get("index")
            block = event.get("content_block")
            if isinstance(index, int) and isinstance(block, Mapping):
                self._blocks[index] = {
                    "type": block.get("type"),
                    "id": block.get("id") or "",
                    "name": block.get("name") or "",
                    "json": [],
                    "thinking": [],
                    "signature": block.get("signature") or "",
                }
                self._order.append(index)
                text = block.get("text")
                if block.get("type") == "text" and isinstance(text, str) and text:
                    out.append(TextDelta(text))
        elif kind == "content_block_delta":
            delta = event.get("delta")
            b = self._blocks.get(event.get("index"))  # type: ignore[arg-type]
            if isinstance(delta, Mapping):
                dt = delta.get("type")
                if dt == "text_delta" and isinstance(delta.get("text"), str):
                    if delta["text"]:
                        out.append(TextDelta(delta["text"]))
                elif dt == "thinking_delta" and isinstance(delta.get("thinking"), str):
                    if b is not None:
                        b["thinking"].append(delta["thinking"])
                    if delta["thinking"]:
                        out.append(ReasoningDelta(delta["thinking"]))
                elif dt == "input_json_delta" and b is not None:
                    part = delta.get("partial_json")
                    if isinstance(part, str):
                        b["json"].append(part)
                elif dt == "signature_delta" and b is not None:
                    sig = delta.get("signature")
                    if isinstance(sig, str):
                        b["signature"] += sig
        elif kind == "message_delta":
            stop = _get(event.get("delta"), "stop_reason")
            if isinstance(stop, str) and stop:
                self._stop = stop
            # Cumulative: each report restates the totals so far.
            if self._merge_usage(event.get("usage")):
                out.append(UsageSeen(anthropic_usage(self._usage), dict(self._usage)))
        return out

    def _merge_usage(self, usage: Any) -> bool:
        if not isinstance(usage, Mapping) or not usage:
            return False
        for k, v in usage.items():
            if v is not None:
                self._usage[k] = v
        return True

    def finish(self) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        for index in self._order:
            b = self._blocks[index]
            if b["type"] == "tool_use":
                args = "".join(b["json"])
                out.append(ToolCallDone(_settle_call(index, b["id"], b["name"], args)))
            elif b["type"] == "thinking":
                self.thinking.append(("".join(b["thinking"]), b["signature"]))
        out.append(Stopped(stop_reason(self._stop)))
        return out


class ResponsesAccumulator:
    """OpenAI Responses API stream events to stream events."""

    def __init__(self) -> None:
        self._calls: dict[str, dict[str, Any]] = {}
        self._order: list[str] = []
        self._usage: Mapping[str, Any] | None = None
        self._status: str | None = None
        self._incomplete: str | None = None

    def _call(self, key: str) -> dict[str, Any]:
        c = self._calls.get(key)
        if c is None:
            c = self._calls[key] = {"call_id": "", "name": "", "args": [], "done": None}
            self._order.append(key)
        return c

    def feed(self, event: Mapping[str, Any]) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        if not isinstance(event, Mapping):
            return out
        kind = event.get("type")
        if kind == "response.output_text.delta":
            d = event.get("delta")
            if isinstance(d, str) and d:
                out.append(TextDelta(d))
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            d = event.get("delta")
            if isinstance(d, str) and d:
                out.append(ReasoningDelta(d))
        elif kind in ("response.output_item.added", "response.output_item.done"):
            item = event.get("item")
            if isinstance(item, Mapping) and item.get("type") == "function_call":
                c = self._call(str(item.get("id") or event.get("output_index")))
                c["call_id"] = c["call_id"] or item.get("call_id") or ""
                c["name"] = c["name"] or item.get("name") or ""
                if kind == "response.output_item.done" and isinstance(item.get("arguments"), str):
                    c["done"] = item["arguments"]
        elif kind == "response.function_call_arguments.delta":
            d = event.get("delta")
            if isinstance(d, str):
                self._call(str(event.get("item_id") or event.get("output_index")))["args"].append(d)
        elif kind == "response.function_call_arguments.done":
            a = event.get("arguments")
            if isinstance(a, str):
                self._call(str(event.get("item_id") or event.get("output_index")))["done"] = a
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            resp = event.get("response")
            if isinstance(resp, Mapping):
                if isinstance(resp.get("usage"), Mapping):
                    self._usage = resp["usage"]
                    out.append(UsageSeen(responses_usage(resp["usage"]), resp["usage"]))
                self._status = resp.get("status") or kind.split(".")[-1]
                reason = _get(resp.get("incomplete_details"), "reason")
                self._incomplete = reason if isinstance(reason, str) else None
                if kind == "response.failed":
                    err = resp.get("error")
                    raise ProviderStreamError(
                        f"the response failed: {_get(err, 'message') or err or 'no reason given'}"
                    )
        elif kind == "error":
            raise ProviderStreamError(
                f"the server reported an error: {event.get('message') or event.get('code')}"
            )
        return out

    def finish(self) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        for i, key in enumerate(self._order):
            c = self._calls[key]
            args = c["done"] if c["done"] is not None else "".join(c["args"])
            out.append(ToolCallDone(_settle_call(i, c["call_id"], c["name"], args)))
        if self._order:
            reason = "tool_use"
        elif self._status == "incomplete":
            reason = stop_reason(self._incomplete or "max_output_tokens")
        else:
            reason = "end_turn"
        out.append(Stopped(reason))
        return out
