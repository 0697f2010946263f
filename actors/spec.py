"""The model configuration of one turn, parsed once from session metadata (pure).

A turn's agent is built from this spec, so replaying the stream (metadata changes are
events) reproduces every turn's exact model configuration.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

#: The seed's metadata keys: slash commands write them, the factory reads them.
MODEL_NAME = "ore.model.name"
MODEL_THINKING_LEVEL = "ore.model.thinking_level"
MODEL_TEMPERATURE = "ore.model.temperature"
MODEL_MAX_OUTPUT_TOKENS = "ore.model.max_output_tokens"
#: Streams written before the seed's keys were adopted spell them without ``ore.``; they are
#: still read (the seed's spelling wins when both are set).
LEGACY_PREFIX = "model."

THINKING_LEVELS = ("off", "low", "medium", "high")


class SettingsError(ValueError):
    """A model setting in the session's metadata cannot be used; names the key and value."""


def _setting(metadata: Mapping[str, str], key: str) -> tuple[str, str | None]:
    value = metadata.get(key)
    if value is None:
        legacy = LEGACY_PREFIX + key.removeprefix("ore.model.")
        if legacy in metadata:
            return legacy, metadata[legacy]
    return key, value


def parse_temperature(value: str, key: str = MODEL_TEMPERATURE) -> float:
    try:
        x = float(value)
    except ValueError:
        raise SettingsError(f"{key} must be a number from 0 to 2, got {value!r}") from None
    if not 0.0 <= x <= 2.0:
        raise SettingsError(f"{key} must be a number from 0 to 2, got {value!r}")
    return x


def parse_max_tokens(value: str, key: str = MODEL_MAX_OUTPUT_TOKENS) -> int:
    if not value.strip().isdigit() or int(value) <= 0:
        raise SettingsError(f"{key} must be a positive integer, got {value!r}")
    return int(value)


def parse_thinking(value: str, key: str = MODEL_THINKING_LEVEL) -> str:
    if value not in THINKING_LEVELS:
        raise SettingsError(f"{key} must be one of {', '.join(THINKING_LEVELS)}, got {value!r}")
    return value


#: Parsers of the keys whose values have a shape; slash commands validate with them too.
PARSERS = {
    MODEL_TEMPERATURE: parse_temperature,
    MODEL_MAX_OUTPUT_TOKENS: parse_max_tokens,
    MODEL_THINKING_LEVEL: parse_thinking,
}


@attrs.frozen(kw_only=True)
class AgentSpec:
    """The model configuration of one turn, parsed once from session metadata."""

    model: str = "scripted"
    thinking_level: str = "off"
    temperature: float | None = None
    max_output_tokens: int | None = None

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, str]) -> AgentSpec:
        """The spec the metadata describes; `SettingsError` names a value that cannot be
        used (the turn then ends with that error, the session serves on)."""
        _, name = _setting(metadata, MODEL_NAME)
        tk, thinking = _setting(metadata, MODEL_THINKING_LEVEL)
        pk, temp = _setting(metadata, MODEL_TEMPERATURE)
        mk, max_tokens = _setting(metadata, MODEL_MAX_OUTPUT_TOKENS)
        return cls(
            model=name or "scripted",
            thinking_level=parse_thinking(thinking, tk) if thinking else "off",
            temperature=parse_temperature(temp, pk) if temp else None,
            max_output_tokens=parse_max_tokens(max_tokens, mk) if max_tokens else None,
        )


@attrs.frozen(kw_only=True)
class TurnInput:
    """What an agent gets: the message that opened the turn and the conversation so far."""

    session_id: str
    turn: int
    text: str
    history: tuple[tuple[str, str], ...] = ()
    spec: AgentSpec = AgentSpec()
