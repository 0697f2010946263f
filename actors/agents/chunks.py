"""What every stream accumulator shares (pure): the error a server reports inside a
stream, checked reads of decoded fields, each format's usage read into `spine.Usage`, and
a finished tool call settled."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from spine import Usage

from .wire import ToolCall

__all__ = ["ProviderStreamError", "anthropic_usage", "openai_usage", "responses_usage"]


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
