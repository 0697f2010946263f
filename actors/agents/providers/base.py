"""What the HTTP client needs to speak one wire format (pure)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs

from ..wire import ModelRequest, StreamEvent

__all__ = ["Accumulator", "WireFormat", "bearer_headers"]


class Accumulator(Protocol):
    """Decoded stream chunks in, stream events out; one per model call. An accumulator
    may keep ``thinking`` (signed reasoning the next call must send back)."""

    def feed(self, chunk: Mapping[str, Any], /) -> list[StreamEvent]: ...

    def finish(self) -> list[StreamEvent]: ...


@attrs.frozen(kw_only=True)
class WireFormat:
    """One wire format, the value ``ore.model.provider`` names.

    ``whole`` reads a whole (non-streamed) response as the stream chunks it stands for,
    ``None`` when the body is not this format's response: a server may answer a
    streaming request with one JSON body (a proxy that buffers, a server that ignores
    ``stream``), and the same accumulator then settles it.
    """

    name: str
    default_base_url: str
    #: Appended to the base URL: ``/chat/completions``.
    path: str
    body: Callable[[ModelRequest], dict[str, Any]]
    headers: Callable[[str | None], dict[str, str]]
    accumulator: Callable[[], Accumulator]
    whole: Callable[[Mapping[str, Any]], list[dict[str, Any]] | None]

    def url(self, base_url: str | None) -> str:
        return (base_url or self.default_base_url).rstrip("/") + self.path


def bearer_headers(api_key: str | None) -> dict[str, str]:
    """The headers of an event-stream request with an OAuth-style bearer key."""
    h = {"content-type": "application/json", "accept": "text/event-stream"}
    if api_key:
        h["authorization"] = f"Bearer {api_key}"
    return h
