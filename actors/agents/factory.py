"""The agent factory: one agent per turn, built from the session's metadata.

The provider comes from the operator's profile the session names (``ore.model.profile``,
`profiles`), else from ``ore.model.provider``, looked up in `providers.PROVIDERS`; a
setting the turn cannot use (a provider no module provides, no model name for a real
server, an unset key variable, the ``models`` extra missing) fails that turn with an
error naming it, never the session.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from projections import MODEL_BASE_URL, MODEL_PROVIDER
from spine import Event, Kind

from ..model_servers import ModelServers
from ..spec import AgentSpec, TurnInput
from .base import Agent, AgentError, TurnOutput
from .loop import ModelAgent, Provider
from .mcp_config import McpConfig, McpConfigError
from .profiles import Profile, resolve
from .providers import PROVIDERS, SCRIPTED, default_servers, unknown_provider
from .scripted import ScriptedProvider
from .tools import ToolRegistry, builtin_tools

__all__ = ["ModelFactory", "RefusedServer", "ScriptedFactory", "with_mcp", "with_model_servers"]


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
        mcp: McpConfig | None = None,
        model_servers: ModelServers | None = None,
    ) -> None:
        self.tools = tools if tools is not None else builtin_tools()
        #: The operator's provider profiles (`actors.agents.profiles`), by name.
        self.profiles = dict(profiles or {})
        self.retries = retries
        self.backoff = backoff
        self.flush_interval = flush_interval
        #: The operator's MCP servers (``DIR/mcp.toml``), among which sessions pick.
        self.mcp = mcp
        #: The model servers a session's metadata may name (None: none; a profile's server
        #: is the operator's and always allowed). The `Host` gives its own.
        self.model_servers = model_servers

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
        refused = self.refused(spec)
        if refused is not None:
            return refused
        mcp = self.mcp_tools(spec)
        return ModelAgent(spec, self.provider(spec), self.tools, self.flush_interval, mcp)

    def refused(self, spec: AgentSpec) -> Agent | None:
        """The turn's refusal when its model server is not one the operator allows (None:
        it is). Checked before every turn, whoever wrote the metadata and whenever: the
        allowance in force now is what counts."""
        if spec.profile is not None or spec.provider not in PROVIDERS:
            return None  # a profile's server is the operator's; no server, no request
        servers = getattr(self, "model_servers", None) or default_servers()
        md = {MODEL_PROVIDER: spec.provider, MODEL_BASE_URL: spec.base_url or ""}
        problem = servers.refusal(md)
        if problem is None:
            return None
        url = spec.base_url or PROVIDERS[spec.provider].default_base_url
        return RefusedServer(url, problem)

    def mcp_tools(self, spec: AgentSpec) -> Any:
        """The tools of the MCP servers the session picked (None: it picked none); a
        name the operator did not configure fails the turn, naming it."""
        if not spec.mcp_servers:
            return None
        config = getattr(self, "mcp", None) or McpConfig()
        try:
            servers = config.pick(spec.mcp_servers)
        except McpConfigError as exc:
            raise AgentError(str(exc)) from None
        from .mcp_client import McpTools

        return McpTools(servers)


class RefusedServer:
    """The agent of a turn whose model server the operator does not allow: it stores the
    refusal as a ``net.egress`` event and fails the turn naming the key; nothing is sent."""

    def __init__(self, url: str, problem: str) -> None:
        self.url = url
        self.problem = problem

    def run(self, turn: TurnInput, out: TurnOutput) -> str:
        try:
            host = urlsplit(self.url).hostname or self.url
        except ValueError:
            host = self.url
        reason = f"{self.url} is not a model server the operator allows"
        out.emit(Event(kind=Kind.EGRESS, host=host, allowed=False, reason=reason))
        raise AgentError(self.problem)


class ScriptedFactory(ModelFactory):
    """A factory that always runs the scripted provider, whatever the metadata names:
    for tests, benchmarks and demos that must stay offline."""

    def provider(self, spec: AgentSpec) -> Provider:
        return ScriptedProvider(spec.model)

    def build(self, spec: AgentSpec, session_id: str) -> Agent:
        # No profile applies: the scripted model runs whatever the metadata names.
        mcp = self.mcp_tools(spec)
        return ModelAgent(spec, self.provider(spec), self.tools, self.flush_interval, mcp)


def with_mcp(factory: Any, config: McpConfig | None) -> Any:
    """``factory`` with the operator's MCP servers, when it is a `ModelFactory` that has
    none of its own (a copy: the caller's stays as it was); else ``factory`` itself."""
    if config is None or not config.servers:
        return factory
    if factory is None:
        return ModelFactory(mcp=config)
    if isinstance(factory, ModelFactory) and getattr(factory, "mcp", None) is None:
        f = copy.copy(factory)
        f.mcp = config
        return f
    return factory


def with_model_servers(factory: Any, servers: ModelServers) -> Any:
    """``factory`` checking model servers against ``servers``, when it is a `ModelFactory`
    that has no allowance of its own (a copy: the caller's stays as it was); None: the
    default factory with that allowance; else ``factory`` itself (its own business)."""
    if factory is None:
        return ModelFactory(model_servers=servers)
    if isinstance(factory, ModelFactory) and getattr(factory, "model_servers", None) is None:
        f = copy.copy(factory)
        f.model_servers = servers
        return f
    return factory
