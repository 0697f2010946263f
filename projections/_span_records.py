"""Span records (`SpanRecord`, with its `SpanEvent`s and `SpanLink`s) and what builds them:
ids hashed from the session and seq, token counts as GenAI attributes, the span under
construction.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import attrs
import orjson

from spine import Usage

from ._span_names import (
    GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
    GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    GEN_AI_USAGE_INPUT_TOKENS,
    GEN_AI_USAGE_OUTPUT_TOKENS,
    GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
    UNSET,
)

Attributes = tuple[tuple[str, Any], ...]


@attrs.frozen(kw_only=True)
class SpanEvent:
    """Something that happened during a span (an approval asked for and given)."""

    name: str
    time: datetime | None
    attributes: Attributes = ()


@attrs.frozen(kw_only=True)
class SpanLink:
    """A pointer to a span of another trace (a child's turn to its parent's spawn)."""

    trace_id: str
    span_id: str
    attributes: Attributes = ()


@attrs.frozen(kw_only=True)
class SpanRecord:
    """One finished span: ids as lowercase hex (32 and 16 digits), times from the log."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: str
    start: datetime | None
    end: datetime | None
    attributes: Attributes = ()
    events: tuple[SpanEvent, ...] = ()
    links: tuple[SpanLink, ...] = ()
    status: str = UNSET
    status_message: str = ""

    def attribute(self, name: str, default: Any = None) -> Any:
        for key, value in self.attributes:
            if key == name:
                return value
        return default


def _hex(session_id: str, what: str, seq: int, digits: int) -> str:
    digest = hashlib.sha256(f"{session_id}\x00{what}\x00{seq}".encode()).hexdigest()[:digits]
    # An id of all zeros is invalid in OTLP; a hash makes it one in 2**64, but be exact.
    return digest if digest.strip("0") else "1".rjust(digits, "0")


def trace_id_for(session_id: str, seq: int) -> str:
    """The trace of the turn (or spawn outside a turn) opened at ``seq``."""
    return _hex(session_id, "trace", seq, 32)


def span_id_for(session_id: str, seq: int) -> str:
    """The span opened by the event at ``seq``."""
    return _hex(session_id, "span", seq, 16)


def usage_attributes(usage: Usage | None) -> Attributes:
    """The GenAI token counts of ``usage`` (input includes the cached part)."""
    u = usage or Usage()
    return (
        (GEN_AI_USAGE_INPUT_TOKENS, u.input_tokens),
        (GEN_AI_USAGE_OUTPUT_TOKENS, u.output_tokens),
        (GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, u.cache_read_tokens),
        (GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, u.cache_write_tokens),
        (GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, u.reasoning_tokens),
    )


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _sub(report: Mapping[str, Any], key: str, inner: str) -> int:
    part = report.get(key)
    return _int(part.get(inner)) if isinstance(part, Mapping) else 0


def provider_usage(report: Any) -> Usage | None:
    """One model call's raw usage report (OpenAI chat, Responses or Anthropic shape) in the
    seed's terms; ``None`` if it is none of them."""
    if not isinstance(report, Mapping):
        return None
    if "prompt_tokens" in report or "completion_tokens" in report:
        return Usage(
            input_tokens=_int(report.get("prompt_tokens")),
            output_tokens=_int(report.get("completion_tokens")),
            cache_read_tokens=_sub(report, "prompt_tokens_details", "cached_tokens"),
            reasoning_tokens=_sub(report, "completion_tokens_details", "reasoning_tokens"),
        )
    if "input_tokens" in report or "output_tokens" in report:
        read = _int(report.get("cache_read_input_tokens"))
        write = _int(report.get("cache_creation_input_tokens"))
        if read or write or "cache_read_input_tokens" in report:
            # Anthropic counts cached input apart from input_tokens; ours includes it.
            return Usage(
                input_tokens=_int(report.get("input_tokens")) + read + write,
                output_tokens=_int(report.get("output_tokens")),
                cache_read_tokens=read,
                cache_write_tokens=write,
            )
        return Usage(
            input_tokens=_int(report.get("input_tokens")),
            output_tokens=_int(report.get("output_tokens")),
            cache_read_tokens=_sub(report, "input_tokens_details", "cached_tokens"),
            reasoning_tokens=_sub(report, "output_tokens_details", "reasoning_tokens"),
        )
    return None


@attrs.define
class _Open:
    """A span being built; frozen into a `SpanRecord` when it ends."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: str
    start: datetime | None
    attributes: dict[str, Any]
    events: list[SpanEvent] = attrs.Factory(list)
    links: tuple[SpanLink, ...] = ()
    status: str = UNSET
    status_message: str = ""
    output: list[str] = attrs.Factory(list)
    tool_calls: int = 0

    def close(self, end: datetime | None) -> SpanRecord:
        return SpanRecord(
            trace_id=self.trace_id,
            span_id=self.span_id,
            parent_span_id=self.parent_span_id,
            name=self.name,
            kind=self.kind,
            start=self.start,
            end=end,
            attributes=tuple(self.attributes.items()),
            events=tuple(self.events),
            links=self.links,
            status=self.status,
            status_message=self.status_message,
        )


def _messages(role: str, texts: Iterable[str]) -> str:
    parts = [{"type": "text", "content": t} for t in texts]
    return orjson.dumps([{"role": role, "parts": parts}]).decode()
