"""The model servers a session may name: the operator's allowance (pure).

A session's model requests go where its metadata says (``ore.model.base_url``, or the
vendor's own API for ``ore.model.provider``), unless it chose one of the operator's
provider profiles, whose server is the operator's by definition. Any other destination
must be one the operator listed (``vertebra serve --allow-model-url URL``,
``Host(model_servers=[URL])``): a session's token or slash command cannot make the daemon
send requests to a port the operator never named (another local service, a cloud
metadata address), and a stream written before the allowance changed cannot either,
since the model client checks again before every turn's first request.

URLs compare as servers: scheme and host in lower case, the port spelled out, the path
without its trailing slash; no query, no fragment, no credentials.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

import attrs

from projections import LEGACY_PREFIX, MODEL_BASE_URL, MODEL_PROFILE, MODEL_PROVIDER

__all__ = ["ModelServers", "server_url"]

#: The offline provider, which reaches no server.
_SCRIPTED = "scripted"


def server_url(url: str) -> str:
    """``url`` in the form servers are compared in; `ValueError` names what is wrong."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{url!r} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"a model server must be an http or https URL with a host, got {url!r}")
    if parts.username is not None or parts.query or parts.fragment:
        raise ValueError(f"a model server's URL has no credentials, query or fragment: {url!r}")
    port = port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}:{port}{parts.path.rstrip('/')}"


def _servers(urls: Iterable[str]) -> tuple[str, ...]:
    # Checked where the operator gives them: `ValueError` names a bad one.
    return tuple(dict.fromkeys(server_url(u) for u in urls))


def _pairs(defaults: Mapping[str, str] | Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    items = defaults.items() if isinstance(defaults, Mapping) else defaults
    return tuple(sorted((str(k), str(v)) for k, v in items))


def _get(metadata: Mapping[str, str], key: str) -> str | None:
    legacy = LEGACY_PREFIX + key.removeprefix("ore.model.")
    return metadata.get(key) or metadata.get(legacy) or None


@attrs.frozen(kw_only=True)
class ModelServers:
    """The servers sessions may name (``urls``, compared as `server_url`), and each wire
    format's own default server (``defaults``: provider name to URL), which a session
    naming a provider and no base URL would reach."""

    urls: tuple[str, ...] = attrs.field(default=(), converter=_servers)
    defaults: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_pairs)

    def with_urls(self, urls: Iterable[str]) -> ModelServers:
        """This allowance and ``urls`` besides."""
        return attrs.evolve(self, urls=(*self.urls, *urls))

    def allows(self, url: str) -> bool:
        try:
            return server_url(url) in self.urls
        except ValueError:
            return False

    def destination(self, metadata: Mapping[str, str]) -> tuple[str, str] | None:
        """Where model requests of a session with ``metadata`` go, as ``(key, url)``: the
        key that names the destination, and the URL. None: no server of the session's
        choosing (the scripted model, a provider profile, a provider no module knows)."""
        if _get(metadata, MODEL_PROFILE):
            return None
        provider = _get(metadata, MODEL_PROVIDER) or _SCRIPTED
        if provider == _SCRIPTED:
            return None
        url = _get(metadata, MODEL_BASE_URL)
        if url:
            return MODEL_BASE_URL, url
        default = dict(self.defaults).get(provider)
        return (MODEL_PROVIDER, default) if default else None

    def refusal(self, metadata: Mapping[str, str]) -> str | None:
        """Why a session with ``metadata`` may not reach its model server (None: it may)."""
        dest = self.destination(metadata)
        if dest is None or self.allows(dest[1]):
            return None
        return self.problem(*dest)

    def problem(self, key: str, url: str) -> str:
        """The refusal of ``url``, named by ``key``, as a session or a turn is told it."""
        where = "its server" if key.endswith("base_url") else "its vendor's server"
        allowed = ", ".join(self.urls) or "none"
        return (
            f"{key}: {where} {url} is not a model server the operator allows (allowed: "
            f"{allowed}); the operator allows one with vertebra serve --allow-model-url URL "
            f"or Host(model_servers=[URL]), or offers it as a provider profile "
            f"({MODEL_PROFILE})"
        )
