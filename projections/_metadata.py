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

#: The model's name.
MODEL_NAME = "model.name"
#: The model's thinking (reasoning effort) level, e.g. ``low`` or ``high``.
MODEL_THINKING_LEVEL = "model.thinking_level"
#: Sampling temperature as decimal text.
MODEL_TEMPERATURE = "model.temperature"
#: Output token cap as decimal text.
MODEL_MAX_OUTPUT_TOKENS = "model.max_output_tokens"


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

    A value that does not parse (a temperature that is not a finite number, a token cap
    that is not a positive integer) is reported in ``invalid`` and treated as unset, so a
    bad stored value never stops a session from running.
    """

    name: str | None = None
    thinking_level: str | None = None
    temperature: float | None = None
    max_output_tokens: int | None = None
    invalid: tuple[str, ...] = ()


def model_settings(metadata: Mapping[str, str]) -> ModelSettings:
    """Read the model keys out of ``metadata``."""
    invalid: list[str] = []
    temperature: float | None = None
    raw = metadata.get(MODEL_TEMPERATURE)
    if raw is not None:
        try:
            temperature = float(raw)
        except ValueError:
            temperature = None
        if temperature is None or not math.isfinite(temperature) or temperature < 0:
            temperature = None
            invalid.append(MODEL_TEMPERATURE)
    max_tokens: int | None = None
    raw = metadata.get(MODEL_MAX_OUTPUT_TOKENS)
    if raw is not None:
        try:
            max_tokens = int(raw)
        except ValueError:
            max_tokens = None
        if max_tokens is None or max_tokens <= 0:
            max_tokens = None
            invalid.append(MODEL_MAX_OUTPUT_TOKENS)
    return ModelSettings(
        name=metadata.get(MODEL_NAME) or None,
        thinking_level=metadata.get(MODEL_THINKING_LEVEL) or None,
        temperature=temperature,
        max_output_tokens=max_tokens,
        invalid=tuple(invalid),
    )
