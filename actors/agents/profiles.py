"""Provider profiles: the model servers the operator offers, each paired with its key.

A profile names a wire format, the server's base URL, the environment variable that holds
its key, the models a session may pick and the idle timeout. The operator writes them in a
TOML file (``DATA/providers.toml``, or ``vertebra serve --providers FILE``)::

    [profiles.openai]
    provider = "openai"
    base_url = "https://api.openai.com/v1"
    api_key_env = "OPENAI_API_KEY"
    models = ["gpt-4o-mini", "gpt-4o"]   # empty or absent: any model
    default_model = "gpt-4o-mini"
    timeout = 60

A session picks one by name (``ore.model.profile``) and a model it lists
(``ore.model.name``); it never names a key variable or a server that holds a key, so a
secret is only ever sent to the server the operator paired it with.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from typing import Any

import attrs

from projections import SettingsError, parse_api_key_env, parse_base_url, parse_timeout

from ..spec import AgentSpec
from .base import AgentError
from .providers import PROVIDERS, unknown_provider

__all__ = ["PROFILES_FILE", "Profile", "ProfileError", "load_profiles", "parse_profiles", "resolve"]

#: The profiles file in the data directory, read at the daemon's start when present.
PROFILES_FILE = "providers.toml"

_FIELDS = ("provider", "base_url", "api_key_env", "models", "default_model", "timeout")


class ProfileError(ValueError):
    """The profiles file cannot be used; the message names the profile and the field."""


@attrs.frozen(kw_only=True)
class Profile:
    name: str
    provider: str
    base_url: str | None = None
    api_key_env: str | None = None
    #: The models a session may pick (empty: any).
    models: tuple[str, ...] = ()
    default_model: str | None = None
    timeout: float | None = None

    def model_for(self, asked: str | None) -> str:
        """The model a turn runs: ``asked`` if the profile allows it, else its default."""
        model = asked or self.default_model
        if not model:
            raise AgentError(
                f"provider profile {self.name!r} has no default model: /model NAME "
                f"(one of {', '.join(self.models) or 'any'})"
            )
        if self.models and model not in self.models:
            raise AgentError(
                f"provider profile {self.name!r} does not allow model {model!r}; "
                f"it allows {', '.join(self.models)}"
            )
        return model


def _profile(name: str, raw: Any) -> Profile:
    where = f"provider profile {name!r}"
    if not isinstance(raw, dict):
        raise ProfileError(f"{where} must be a table")
    extra = sorted(set(raw) - set(_FIELDS))
    if extra:
        raise ProfileError(f"{where} has unknown fields {', '.join(extra)}")
    provider = raw.get("provider")
    if provider not in PROVIDERS:
        raise ProfileError(f"{where}: {unknown_provider(str(provider), 'provider')}")
    models = raw.get("models", [])
    if not isinstance(models, list) or not all(isinstance(m, str) and m for m in models):
        raise ProfileError(f"{where}: models must be a list of model names")
    default = raw.get("default_model")
    if default is not None and (not isinstance(default, str) or (models and default not in models)):
        raise ProfileError(f"{where}: default_model must be one of its models")
    try:
        url = raw.get("base_url")
        env = raw.get("api_key_env")
        timeout = raw.get("timeout")
        return Profile(
            name=name,
            provider=provider,
            base_url=parse_base_url(str(url), "base_url") if url is not None else None,
            api_key_env=parse_api_key_env(str(env), "api_key_env") if env is not None else None,
            models=tuple(models),
            default_model=default,
            timeout=parse_timeout(str(timeout), "timeout") if timeout is not None else None,
        )
    except SettingsError as exc:
        raise ProfileError(f"{where}: {exc}") from None


def parse_profiles(text: str) -> dict[str, Profile]:
    """The profiles a TOML text defines (`ProfileError` names what is wrong)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"the provider profiles are not TOML: {exc}") from None
    extra = sorted(set(data) - {"profiles"})
    if extra:
        raise ProfileError(f"the provider profiles file has unknown tables {', '.join(extra)}")
    table = data.get("profiles", {})
    if not isinstance(table, dict):
        raise ProfileError("[profiles] must be a table of profiles")
    return {name: _profile(name, raw) for name, raw in table.items()}


def load_profiles(path: str) -> dict[str, Profile]:
    """The profiles in the file at ``path``; a missing file defines none."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ProfileError(f"cannot read the provider profiles {path}: {exc}") from None
    return parse_profiles(text)


def resolve(spec: AgentSpec, profiles: Mapping[str, Profile]) -> AgentSpec:
    """``spec`` with its profile applied: the profile's wire format, server and key
    variable replace whatever the metadata says, and the model is one it allows. A spec
    with no profile is returned as it is."""
    if spec.profile is None:
        return spec
    p = profiles.get(spec.profile)
    if p is None:
        known = ", ".join(sorted(profiles)) or "none are defined"
        raise AgentError(
            f"ore.model.profile names no provider profile of this daemon: {spec.profile!r} "
            f"(its profiles: {known})"
        )
    asked = None if spec.model == "scripted" else spec.model
    return attrs.evolve(
        spec,
        provider=p.provider,
        base_url=p.base_url,
        api_key_env=p.api_key_env,
        model=p.model_for(asked),
        timeout=spec.timeout if p.timeout is None else p.timeout,
    )
