"""The wire formats a turn can speak, by the name ``ore.model.provider`` holds.

One module per format builds its request body, headers and endpoint and names its stream
accumulator and whole-response reader (`WireFormat`); `PROVIDERS` is the one table the
agent factory, the HTTP client and the ``/provider`` command read. Adding a format is a
module and an entry here. ``scripted``, the offline default, is no wire format: the
factory runs it without a server.
"""

from __future__ import annotations

from collections.abc import Iterable

from projections import MODEL_PROVIDER

from ...model_servers import ModelServers
from . import anthropic, openai, responses
from .base import Accumulator, WireFormat, bearer_headers

__all__ = [
    "PROVIDERS",
    "SCRIPTED",
    "Accumulator",
    "WireFormat",
    "bearer_headers",
    "default_servers",
    "known_providers",
    "unknown_provider",
]

#: The offline provider's name: no server, no wire format.
SCRIPTED = "scripted"

PROVIDERS: dict[str, WireFormat] = {
    f.name: f for f in (openai.FORMAT, responses.FORMAT, anthropic.FORMAT)
}


def known_providers() -> tuple[str, ...]:
    """Every name ``ore.model.provider`` may hold, the offline default first."""
    return (SCRIPTED, *PROVIDERS)


def unknown_provider(name: str, key: str = MODEL_PROVIDER) -> str:
    """The error for a provider name no module provides."""
    return f"{key} must be one of {', '.join(known_providers())}, got {name!r}"


def default_servers(urls: Iterable[str] = ()) -> ModelServers:
    """The allowance of ``urls``, knowing each wire format's own default server (where a
    session naming a provider and no base URL would go); `ValueError` names a bad URL."""
    defaults = {f.name: f.default_base_url for f in PROVIDERS.values()}
    return ModelServers(urls=tuple(urls), defaults=defaults)
