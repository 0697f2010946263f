"""The egress guard: where a tool may connect, and a ``http_get`` that obeys it.

`verdict` is pure: given a host as asked, the addresses it resolved to and the session's
allowlist, it decides. Every address must pass, and the connection is then made to the
address that was checked (no second lookup, so no DNS-rebinding window); TLS still
verifies the name. Refused by default: every address that is not globally routable
(private, loopback, link-local, multicast, reserved, unspecified, shared, IPv4 embedded
in IPv6 forms of those) and the cloud metadata addresses; the allowlist
(``governance.egress_allow``: CIDRs or host names) lets chosen ones through.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urljoin, urlsplit

from .egress_rules import IP, EgressDecision, classify, destination, literal, precheck, verdict

__all__ = [
    "EgressDecision",
    "classify",
    "destination",
    "http_get",
    "literal",
    "precheck",
    "resolve",
    "verdict",
]


def resolve(host: str, port: int) -> list[IP]:
    """Every address ``host`` resolves to (literal forms such as ``0x7f.1`` included, as
    the system resolver reads them); empty when it does not resolve."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, OSError):
        return []
    out: list[IP] = []
    for info in infos:
        text = str(info[4][0]).split("%")[0]
        try:
            a = ipaddress.ip_address(text)
        except ValueError:
            continue
        if a not in out:
            out.append(a)
    return out


class _Pinned(http.client.HTTPConnection):
    """A connection to the address that was checked, whatever the name resolves to now."""

    def __init__(self, host: str, port: int, addr: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._addr = addr

    def connect(self) -> None:
        self.sock = socket.create_connection((self._addr, self.port), self.timeout)


class _PinnedTLS(http.client.HTTPSConnection):
    def __init__(self, host: str, port: int, addr: str, timeout: float) -> None:
        self._tls = ssl.create_default_context()
        super().__init__(host, port, timeout=timeout, context=self._tls)
        self._addr = addr

    def connect(self) -> None:
        sock = socket.create_connection((self._addr, self.port), self.timeout)
        # The name, not the address, is what the certificate must match.
        self.sock = self._tls.wrap_socket(sock, server_hostname=self.host)


class EgressRefused(Exception):
    """The guard refused a destination (the tool's result names it)."""


def http_get(
    url: str,
    *,
    allow: Iterable[str] = (),
    record: Callable[[EgressDecision], None] = lambda d: None,
    max_bytes: int = 64 * 1024,
    timeout: float = 10.0,
    max_redirects: int = 5,
    resolver: Callable[[str, int], list[Any]] = resolve,
    idempotency_key: str = "",
) -> str:
    """GET ``url`` as text through the guard; every redirect hop is checked again.
    ``record`` gets each decision (the tool turns them into ``net.egress`` events);
    ``idempotency_key``, when given, is sent as ``Idempotency-Key``."""
    headers = {"user-agent": "vertebra-http-get/1"}
    if idempotency_key:
        headers["idempotency-key"] = idempotency_key
    for _hop in range(max_redirects + 1):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"only http and https URLs with a host can be fetched, got {url!r}")
        host = parts.hostname
        port = parts.port or (443 if parts.scheme == "https" else 80)
        d = verdict(host, resolver(host, port), allow)
        record(d)
        if not d.allowed:
            what = host if d.host == host else f"{host} ({d.host})"
            raise EgressRefused(f"egress to {what} refused: {d.reason}")
        cls = _PinnedTLS if parts.scheme == "https" else _Pinned
        conn = cls(host, port, d.host, timeout)
        try:
            path = parts.path or "/"
            if parts.query:
                path += "?" + parts.query
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            if resp.status in (301, 302, 303, 307, 308) and resp.getheader("location"):
                url = urljoin(url, resp.getheader("location") or "")
                continue
            body = resp.read(max_bytes + 1)
        finally:
            conn.close()
        text = body[:max_bytes].decode("utf-8", "replace")
        if len(body) > max_bytes:
            text += f"\n[cut at {max_bytes} bytes]"
        return f"HTTP {resp.status}\n{text}"
    raise ValueError(f"more than {max_redirects} redirects")
