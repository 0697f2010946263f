"""The agent factory: one agent per turn, built from the session's metadata.

The provider comes from the operator's profile the session names (``ore.model.profile``,
`profiles`), else from ``ore.model.provider``, looked up in `providers.PROVIDERS`; a
setting the turn cannot use (a provider no module provides, no model name for a real
server, an unset key variable, the ``models`` extra missing) fails that turn with an
error naming it, never the session.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..spec import AgentSpec
from .base import Agent, AgentError
from .loop import ModelAgent, Provider
from .profiles import Profile, resolve
from .providers import PROVIDERS, SCRIPTED, unknown_provider
from .scripted import ScriptedProvider
from .tools import ToolRegistry, builtin_tools

__all__ = ["ModelFactory", "ScriptedFactory"]


class ModelFactory:
    """The default factory: the provider the metadata names, under the tool loop, with
    ``tools`` (the built-ins ``clock`` and ``calculator`` unless given).

    ``retries`` and ``backoff`` shape the HTTP providers' retries before the first byte.
    Instances travel to session processes, so they must pickle (tools as module-level
    functions).
    """

    def __init__(
        self,
        tools: ToolRegistry | None = None,
        *,
        retries: int = 3,
        backoff: float = 0.5,
        flush_interval: float = 0.02,
        profiles: Mapping[str, Profile] | None = None,
    ) -> None:
        self.tools = tools if tools is not None else builtin_tools()
        #: The operator's provider profiles (`actors.agents.profiles`), by name.
        self.profiles = dict(profiles or {})
        self.retries = retries
        self.backoff = backoff
        self.flush_interval = flush_interval

    def provider(self, spec: AgentSpec) -> Provider:
        if spec.provider == SCRIPTED:
            return ScriptedProvider(spec.model)
        if spec.provider not in PROVIDERS:
            raise AgentError(unknown_provider(spec.provider))
        from .http import HttpProvider, ProviderError

        if spec.model == "scripted":
            raise AgentError(
                f"the {spec.provider} provider needs a model name: /model NAME "
                "(sets ore.model.name)"
            )
        key = None
        if spec.api_key_env:
            key = os.environ.get(spec.api_key_env)
            if not key:
                raise AgentError(
                    f"the environment variable {spec.api_key_env} (ore.model.api_key_env) "
                    "is not set in the daemon's environment"
                )
        try:
            return HttpProvider(
                spec.provider,
                base_url=spec.base_url,
                api_key=key,
                timeout=spec.timeout,
                retries=self.retries,
                backoff=self.backoff,
            )
        except ProviderError as exc:
            raise AgentError(str(exc)) from None

    def build(self, spec: AgentSpec, session_id: str) -> Agent:
        spec = resolve(spec, self.profiles)
        return ModelAgent(spec, self.provider(spec), self.tools, self.flush_interval)


class ScriptedFactory(ModelFactory):
    """A factory that always runs the scripted provider, whatever the metadata names:
    for tests, benchmarks and demos that must stay offline."""

    def provider(self, spec: AgentSpec) -> Provider:
        return ScriptedProvider(spec.model)

    def build(self, spec: AgentSpec, session_id: str) -> Agent:
        return ModelAgent(spec, self.provider(spec), self.tools, self.flush_interval)
