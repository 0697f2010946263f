"""The operator's MCP servers: ``DIR/mcp.toml``, read once when the daemon starts (pure
parsing; `load` reads the file).

The operator's file is the only place a server comes from: a session only picks among
the configured names (``mcp.servers``), so no session can make the daemon launch a
command or reach a URL of its own choosing. What a server says about its tools
(``readOnlyHint`` and the like) is a hint from an untrusted party; what the gate enforces
(approval, trust, the in-doubt policy) is written here::

    [servers.notes]                 # a stdio server the daemon launches
    command = "python3"
    args = ["-m", "notes_server"]
    env = ["NOTES_TOKEN"]           # names passed on from the daemon's environment
    timeout = 30                    # seconds a call may take (default 60)
    approval = false                # every call needs a human (default false)
    trust = "sandboxed"             # the least trust a session needs (default sandboxed)
    in_doubt = "ask"                # a call a crash cut off: ask (the session's
                                    # governance.in_doubt) | retry (the server dedupes
                                    # by the key in _meta: sent again with the same key)

    [servers.notes.tools.delete_note]
    approval = true                 # per tool, over the server's defaults

    [servers.search]                # a Streamable HTTP server
    url = "https://search.example.com/mcp"
    headers = { Authorization = "SEARCH_AUTH" }   # header -> environment variable
    egress_allow = []               # destinations the egress guard lets through
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import attrs

from .governance import Requirement
from .governance_policy import TRUST_LEVELS

__all__ = [
    "CONFIG_FILE",
    "IN_DOUBT",
    "McpConfig",
    "McpConfigError",
    "ServerConfig",
    "ToolPolicy",
    "check_environment",
    "load",
    "parse",
]

CONFIG_FILE = "mcp.toml"
#: What a call cut off by a crash becomes: ``ask``, in doubt as the session's
#: ``governance.in_doubt`` says; ``retry``, run again under the same idempotency key (the
#: operator vouches that the server dedupes by the key it gets in ``_meta``).
IN_DOUBT = ("ask", "retry")
#: Server names become the prefix of their tools' names (``server.tool``).
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SERVER_KEYS = frozenset(
    {"command", "args", "env", "cwd", "url", "headers", "egress_allow", "timeout", "tools"}
)
_POLICY_KEYS = frozenset({"approval", "trust", "in_doubt"})


class McpConfigError(ValueError):
    """``mcp.toml`` cannot be used; the message names the server and the field."""


@attrs.frozen(kw_only=True)
class ToolPolicy:
    """What the operator decides for a tool: the gate's requirement and the in-doubt
    policy."""

    approval: bool = False
    trust: str = "sandboxed"
    in_doubt: str = "ask"

    def requirement(self) -> Requirement:
        return Requirement(
            trust=self.trust,
            capabilities=frozenset({"mcp"}),
            approval=self.approval,
            idempotent=self.in_doubt == "retry",
        )


@attrs.frozen(kw_only=True)
class ServerConfig:
    """One configured server: stdio (``command``) or Streamable HTTP (``url``)."""

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    cwd: str | None = None
    url: str = ""
    #: Header name -> the environment variable holding its value (read at connect time,
    #: so no secret is in the configuration or the log).
    headers: Mapping[str, str] = attrs.field(factory=dict)
    egress_allow: tuple[str, ...] = ()
    timeout: float = 60.0
    defaults: ToolPolicy = ToolPolicy()
    tools: Mapping[str, ToolPolicy] = attrs.field(factory=dict)

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"

    def policy(self, tool: str) -> ToolPolicy:
        return self.tools.get(tool, self.defaults)


@attrs.frozen
class McpConfig:
    """The configured servers by name."""

    servers: Mapping[str, ServerConfig] = attrs.field(factory=dict)

    def pick(self, names: tuple[str, ...]) -> tuple[ServerConfig, ...]:
        """The servers a session asked for, in its order; `McpConfigError` names one that
        is not configured."""
        out = []
        for n in names:
            s = self.servers.get(n)
            if s is None:
                known = ", ".join(sorted(self.servers)) or "none are configured"
                raise McpConfigError(
                    f"mcp.servers names {n!r}, which the operator's {CONFIG_FILE} does not "
                    f"configure (configured: {known})"
                )
            out.append(s)
        return tuple(out)


def load(data_dir: str) -> McpConfig | None:
    """The configuration in ``data_dir/mcp.toml``; None when there is no such file."""
    path = os.path.join(data_dir, CONFIG_FILE)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise McpConfigError(f"{CONFIG_FILE}: cannot be read: {exc}") from None
    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise McpConfigError(f"{CONFIG_FILE}: not valid TOML: {exc}") from None
    return parse(doc)


def check_environment(config: McpConfig, environ: Mapping[str, str]) -> None:
    """`McpConfigError` naming the first variable a server needs that is not set."""
    for s in config.servers.values():
        needed = [(n, "env") for n in s.env]
        needed += [(n, f"headers.{h}") for h, n in s.headers.items()]
        for name, field in needed:
            if name not in environ:
                raise _fail(s.name, field, f"names {name}, which the daemon's environment lacks")


def parse(doc: Mapping[str, Any]) -> McpConfig:
    unknown = set(doc) - {"servers"}
    if unknown:
        raise McpConfigError(f"{CONFIG_FILE}: unknown top-level key {sorted(unknown)[0]!r}")
    servers = doc.get("servers", {})
    if not isinstance(servers, dict):
        raise McpConfigError(f"{CONFIG_FILE}: servers must be a table of servers")
    return McpConfig({name: _server(name, body) for name, body in servers.items()})


def _fail(server: str, field: str, problem: str) -> McpConfigError:
    return McpConfigError(f"{CONFIG_FILE}: server {server!r}: {field} {problem}")


def _strings(
    server: str, field: str, value: Any, pattern: re.Pattern[str] | None = None
) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(server, field, "must be a list of strings")
    for v in value:
        if pattern is not None and not pattern.match(v):
            raise _fail(server, field, f"has {v!r}, which is not an environment variable name")
    return tuple(value)


def _server(name: str, body: Any) -> ServerConfig:
    if not _NAME.match(name):
        raise McpConfigError(
            f"{CONFIG_FILE}: server name {name!r} must be 1-40 letters, digits, - or _"
        )
    if not isinstance(body, dict):
        raise _fail(name, "its entry", "must be a table")
    unknown = set(body) - _SERVER_KEYS - _POLICY_KEYS
    if unknown:
        raise _fail(name, repr(sorted(unknown)[0]), "is not a known field")
    command, url = body.get("command", ""), body.get("url", "")
    if bool(command) == bool(url):
        raise _fail(name, "command/url", "must give exactly one: command (stdio) or url (HTTP)")
    if not isinstance(command, str) or not isinstance(url, str):
        raise _fail(name, "command" if command else "url", "must be a string")
    if url:
        _check_url(name, url)
    defaults = _policy(name, "", body, ToolPolicy())
    tools = body.get("tools", {})
    if not isinstance(tools, dict):
        raise _fail(name, "tools", "must be a table of tools")
    return ServerConfig(
        name=name,
        command=command,
        args=_strings(name, "args", body.get("args", [])),
        env=_strings(name, "env", body.get("env", []), _ENV),
        cwd=_cwd(name, body.get("cwd")),
        url=url,
        headers=_headers(name, body.get("headers", {})),
        egress_allow=_strings(name, "egress_allow", body.get("egress_allow", [])),
        timeout=_timeout(name, body.get("timeout", 60.0)),
        defaults=defaults,
        tools={t: _policy(name, f"tools.{t}.", p, defaults) for t, p in tools.items()},
    )


def _check_url(name: str, url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _fail(name, "url", f"must be an http or https URL with a host, got {url!r}")
    if parts.username or parts.password:
        raise _fail(name, "url", "must not carry credentials: use headers from the environment")


def _cwd(name: str, cwd: Any) -> str | None:
    if cwd is not None and (not isinstance(cwd, str) or not cwd):
        raise _fail(name, "cwd", "must be a non-empty string")
    return cwd


def _headers(name: str, headers: Any) -> dict[str, str]:
    if not isinstance(headers, dict):
        raise _fail(name, "headers", "must be a table of header = ENVIRONMENT_VARIABLE")
    for h, env in headers.items():
        if not isinstance(env, str) or not _ENV.match(env):
            raise _fail(name, f"headers.{h}", "must name an environment variable")
    return dict(headers)


def _timeout(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 86400:
        raise _fail(name, "timeout", "must be a number of seconds above 0 and at most 86400")
    return float(value)


def _policy(name: str, prefix: str, body: Any, base: ToolPolicy) -> ToolPolicy:
    if not isinstance(body, dict):
        raise _fail(name, prefix.rstrip(".") or "its entry", "must be a table")
    if prefix:
        unknown = set(body) - _POLICY_KEYS
        if unknown:
            raise _fail(name, f"{prefix}{sorted(unknown)[0]}", "is not a known field")
    approval = body.get("approval", base.approval)
    if not isinstance(approval, bool):
        raise _fail(name, f"{prefix}approval", "must be true or false")
    trust = body.get("trust", base.trust)
    if trust not in TRUST_LEVELS:
        raise _fail(name, f"{prefix}trust", f"must be one of {', '.join(TRUST_LEVELS)}")
    in_doubt = body.get("in_doubt", base.in_doubt)
    if in_doubt not in IN_DOUBT:
        raise _fail(name, f"{prefix}in_doubt", f"must be one of {', '.join(IN_DOUBT)}")
    return ToolPolicy(approval=approval, trust=trust, in_doubt=in_doubt)
