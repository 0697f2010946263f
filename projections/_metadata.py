"""Session metadata: the key/value properties a session carries, folded from its events.

Metadata changes are `Kind.PROPERTIES` events, so a replay reproduces the exact model
configuration every turn ran with. Slash commands write the model keys below; the agent
factory reads them through `model_settings`. Any other key is free-form.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

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
#: Which wire format a turn speaks, by name (``scripted``, ``openai``, ...). Stored as
#: given: the agent factory knows the formats, and fails a turn that names none of them.
MODEL_PROVIDER = "ore.model.provider"
#: The model server's base URL (``http://127.0.0.1:11434/v1``).
MODEL_BASE_URL = "ore.model.base_url"
#: The NAME of the environment variable that holds the API key (never the key itself).
MODEL_API_KEY_ENV = "ore.model.api_key_env"
#: Whether to ask an OpenAI-compatible server for a usage chunk (``stream_options``);
#: some servers refuse the option.
MODEL_INCLUDE_USAGE = "ore.model.include_usage"
#: Idle seconds allowed between two chunks of a model stream.
MODEL_TIMEOUT = "ore.model.timeout"
#: The system prompt.
MODEL_SYSTEM = "ore.model.system"
#: How many model -> tools -> model rounds one turn may take.
MODEL_MAX_TOOL_ROUNDS = "ore.model.max_tool_rounds"
#: The operator's provider profile the session uses, by name: the profile names the wire
#: format, the server, the key's variable and the models a session may pick.
MODEL_PROFILE = "ore.model.profile"
#: Streams written before the seed's keys were adopted spell them without ``ore.``; they
#: are still read (the seed's spelling wins when both are set).
LEGACY_PREFIX = "model."

THINKING_LEVELS = ("off", "low", "medium", "high")

_TRUE = ("true", "on", "yes", "1")
_FALSE = ("false", "off", "no", "0")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# Prefixes of credentials that providers and clouds issue; a value starting with one of
# them is a key pasted where its variable's name belongs.
_KEY_PREFIXES = ("sk-", "sk_", "pk-", "AKIA", "ASIA", "AIza", "xai-", "gsk_", "ghp_", "hf_")


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


def parse_provider(value: str, key: str = MODEL_PROVIDER) -> str:
    # Not checked against a list of names: which formats exist is the agents' registry's
    # business (a new one is a module there), and a turn naming none fails by itself.
    return value


def parse_base_url(value: str, key: str = MODEL_BASE_URL) -> str:
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SettingsError(f"{key} must be an http:// or https:// URL with a host, got {value!r}")
    return value.strip().rstrip("/")


def looks_like_secret(value: str) -> bool:
    """Whether ``value`` looks like a credential rather than a variable's name."""
    if value.startswith(_KEY_PREFIXES):
        return True
    # Variable names are words joined by underscores; a long run of letters and digits
    # with no separator is what generated keys look like.
    longest = max((len(w) for w in value.split("_")), default=0)
    return longest >= 24 and any(ch.isdigit() for ch in value)


def parse_api_key_env(value: str, key: str = MODEL_API_KEY_ENV) -> str:
    if looks_like_secret(value):
        raise SettingsError(
            f"{key} takes the NAME of an environment variable that holds the key, and the "
            "value given looks like a key itself; it was not stored"
        )
    if not _ENV_NAME.fullmatch(value):
        raise SettingsError(f"{key} must be an environment variable's name, got {value!r}")
    return value


def parse_bool(value: str, key: str = MODEL_INCLUDE_USAGE) -> bool:
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise SettingsError(f"{key} must be true or false, got {value!r}")


def parse_timeout(value: str, key: str = MODEL_TIMEOUT) -> float:
    try:
        x = float(value)
    except ValueError:
        x = math.nan
    if not 0.0 < x <= 86400.0:
        raise SettingsError(f"{key} must be a number of seconds above 0, got {value!r}")
    return x


def parse_rounds(value: str, key: str = MODEL_MAX_TOOL_ROUNDS) -> int:
    text = value.strip()
    if not text.isdigit() or not 1 <= int(text) <= 1000:
        raise SettingsError(f"{key} must be an integer from 1 to 1000, got {value!r}")
    return int(text)


def secret_problem(changes: Mapping[str, object]) -> str | None:
    """Why ``changes`` must not be stored (a credential where a name belongs), or ``None``.

    Metadata is an event, kept for ever and replayed everywhere: a key written into it
    would leak into every copy of the log. So a value that looks like a key is refused
    before anything is stored, on every path that writes metadata.
    """
    for key, value in changes.items():
        if not isinstance(key, str) or not isinstance(value, str):
            continue
        name = key.removeprefix("ore.model.").removeprefix(LEGACY_PREFIX)
        if name == "api_key_env":
            try:
                parse_api_key_env(value, key)
            except SettingsError as exc:
                if looks_like_secret(value):
                    return str(exc)
        elif name in ("api_key", "apikey", "key", "token", "secret") and value:
            return (
                f"{key} would store a credential in the log; put the key in an environment "
                f"variable and store its NAME in {MODEL_API_KEY_ENV}"
            )
    return None


#: The parser of every model key whose value has a shape (slash commands validate with it).
PARSERS = {
    MODEL_TEMPERATURE: parse_temperature,
    MODEL_MAX_OUTPUT_TOKENS: parse_max_tokens,
    MODEL_THINKING_LEVEL: parse_thinking,
    MODEL_PROVIDER: parse_provider,
    MODEL_BASE_URL: parse_base_url,
    MODEL_API_KEY_ENV: parse_api_key_env,
    MODEL_INCLUDE_USAGE: parse_bool,
    MODEL_TIMEOUT: parse_timeout,
    MODEL_MAX_TOOL_ROUNDS: parse_rounds,
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
    profile: str | None = None
    thinking_level: str | None = None
    temperature: float | None = None
    max_output_tokens: int | None = None
    provider: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    include_usage: bool | None = None
    timeout: float | None = None
    system: str | None = None
    max_tool_rounds: int | None = None
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
        ("provider", MODEL_PROVIDER),
        ("base_url", MODEL_BASE_URL),
        ("api_key_env", MODEL_API_KEY_ENV),
        ("include_usage", MODEL_INCLUDE_USAGE),
        ("timeout", MODEL_TIMEOUT),
        ("max_tool_rounds", MODEL_MAX_TOOL_ROUNDS),
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
        profile=metadata.get(MODEL_PROFILE) or None,
        system=model_value(metadata, MODEL_SYSTEM)[1] or None,
        invalid=tuple(invalid),
        problems=tuple(problems),
        **values,  # type: ignore[arg-type]
    )
