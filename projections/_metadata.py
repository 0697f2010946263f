"""Session metadata: the key/value properties a session carries, folded from its events.

Metadata changes are `Kind.PROPERTIES` events, so a replay reproduces the exact model
configuration every turn ran with. Slash commands write the model keys below; the agent
factory reads them through `model_settings`. Any other key is free-form.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import attrs

from spine import Event, Kind

from ._errors import ProjectionError

#: The seed's metadata keys: slash commands write them, the agent factory reads them.
#: The model's name.
MODEL_NAME = "ore.model.name"
#: The model's thinking (reasoning effort) level: one of `THINKING_LEVELS`.
MODEL_THINKING_LEVEL = "ore.model.thinking_level"
#: Sampling temperature as decimal text, 0 to 2.
MODEL_TEMPERATURE = "ore.model.temperature"
#: Output token cap as decimal text, a positive integer.
MODEL_MAX_OUTPUT_TOKENS = "ore.model.max_output_tokens"
#: Streams written before the seed's keys were adopted spell them without ``ore.``; they
#: are still read (the seed's spelling wins when both are set).
LEGACY_PREFIX = "model."

THINKING_LEVELS = ("off", "low", "medium", "high")


class SettingsError(ProjectionError, ValueError):
    """A model setting cannot be used; the message names the key and the value."""


def model_value(metadata: Mapping[str, str], key: str) -> tuple[str, str | None]:
    """The key that holds ``key``'s value (the seed's, else the old spelling) and the value."""
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
        x = math.nan
    if not 0.0 <= x <= 2.0:
        raise SettingsError(f"{key} must be a number from 0 to 2, got {value!r}")
    return x


def parse_max_tokens(value: str, key: str = MODEL_MAX_OUTPUT_TOKENS) -> int:
    text = value.strip()
    if not text.isdigit() or int(text) <= 0:
        raise SettingsError(f"{key} must be a positive integer, got {value!r}")
    return int(text)


def parse_thinking(value: str, key: str = MODEL_THINKING_LEVEL) -> str:
    if value not in THINKING_LEVELS:
        raise SettingsError(f"{key} must be one of {', '.join(THINKING_LEVELS)}, got {value!r}")
    return value


#: The parser of every model key whose value has a shape (slash commands validate with it).
PARSERS = {
    MODEL_TEMPERATURE: parse_temperature,
    MODEL_MAX_OUTPUT_TOKENS: parse_max_tokens,
    MODEL_THINKING_LEVEL: parse_thinking,
}


def apply_properties(
    metadata: Mapping[str, str], changes: Mapping[str, str | None]
) -> dict[str, str]:
    """``metadata`` with ``changes`` applied: a value sets its key, ``None`` deletes it."""
    out = dict(metadata)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def reduce_metadata(metadata: Mapping[str, str], ev: Event) -> dict[str, str]:
    """Fold one event into ``metadata``; only properties events change it."""
    if ev.kind != Kind.PROPERTIES or not ev.properties:
        return dict(metadata)
    return apply_properties(metadata, ev.properties)


def metadata_from(events: Iterable[Event]) -> dict[str, str]:
    """The metadata a session has after ``events`` (replay of its properties events)."""
    out: dict[str, str] = {}
    for ev in events:
        if ev.kind == Kind.PROPERTIES and ev.properties:
            for key, value in ev.properties.items():
                if value is None:
                    out.pop(key, None)
                else:
                    out[key] = value
    return out


@attrs.frozen(kw_only=True)
class ModelSettings:
    """The model configuration the metadata asks for; ``None`` means the factory's default.

    ``invalid`` names the keys whose values do not parse (they read as unset); ``problems``
    says what is wrong with each, in the same order.
    """

    name: str | None = None
    thinking_level: str | None = None
    temperature: float | None = None
    max_output_tokens: int | None = None
    invalid: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()

    def check(self) -> ModelSettings:
        """These settings, or `SettingsError` naming the first value that did not parse."""
        if self.problems:
            raise SettingsError(self.problems[0])
        return self


def model_settings(metadata: Mapping[str, str]) -> ModelSettings:
    """Read the model keys out of ``metadata`` (the seed's ``ore.model.*`` keys, else the
    old ``model.*`` spelling). The one parser of model settings: the session's decisions
    and the agent factory read them through it. Never raises: see `ModelSettings.check`."""
    values: dict[str, object] = {}
    invalid: list[str] = []
    problems: list[str] = []
    for field, key in (
        ("thinking_level", MODEL_THINKING_LEVEL),
        ("temperature", MODEL_TEMPERATURE),
        ("max_output_tokens", MODEL_MAX_OUTPUT_TOKENS),
    ):
        used, raw = model_value(metadata, key)
        if not raw:
            continue
        try:
            values[field] = PARSERS[key](raw, used)
        except SettingsError as exc:
            invalid.append(used)
            problems.append(str(exc))
    return ModelSettings(
        name=model_value(metadata, MODEL_NAME)[1] or None,
        invalid=tuple(invalid),
        problems=tuple(problems),
        **values,  # type: ignore[arg-type]
    )
