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
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from urllib.parse import urljoin, urlsplit

import attrs
import orjson

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

IP = ipaddress.IPv4Address | ipaddress.IPv6Address

# Instance metadata services: a credential away from the cloud account.
_METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254")
)
_SHARED = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


@attrs.frozen
class EgressDecision:
    """``host`` is the literal address the decision is about (what ``net.egress`` stores)."""

    host: str
    allowed: bool
    reason: str


def _embedded_v4(addr: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    if addr.sixtofour is not None:
        return addr.sixtofour
    if addr in _NAT64:
        return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    return None


def classify(addr: IP) -> str:
    """``public`` or the class that refuses the address."""
    if isinstance(addr, ipaddress.IPv6Address):
        inner = _embedded_v4(addr)
        if inner is not None:
            return classify(inner)
        if addr.scope_id:
            return "link_local"
    if addr in _METADATA:
        return "metadata"
    if addr.is_unspecified:
        return "unspecified"
    if addr.is_loopback:
        return "loopback"
    if addr.is_link_local:
        return "link_local"
    if addr.is_multicast:
        return "multicast"
    if isinstance(addr, ipaddress.IPv4Address) and addr in _SHARED:
        return "shared"
    if addr.is_reserved:
        return "reserved"
    if addr.is_private:
        return "private"
    if not addr.is_global:
        return "reserved"
    return "public"


def _allowlisted(host: str, addr: IP, allow: Iterable[str]) -> bool:
    name = host.lower().rstrip(".")
    for item in allow:
        item = item.strip()
        if not item:
            continue
        try:
            if addr in ipaddress.ip_network(item, strict=False):
                return True
        except ValueError:
            if item.lower().rstrip(".") == name:
                return True
    return False


def verdict(host: str, addresses: Sequence[IP], allow: Iterable[str] = ()) -> EgressDecision:
    """Whether ``host`` may be reached at ``addresses[0]``: every address it resolved to
    is checked, so a name with one private address among public ones is refused (the
    decision names the refused address)."""
    allow = tuple(allow)
    if not addresses:
        return EgressDecision(host=host, allowed=False, reason="dns_failure")
    for addr in addresses:
        why = classify(addr)
        if why != "public" and not _allowlisted(host, addr, allow):
            return EgressDecision(host=str(addr), allowed=False, reason=why)
    first = addresses[0]
    if classify(first) != "public":
        return EgressDecision(host=str(first), allowed=True, reason="allowlisted")
    return EgressDecision(host=str(first), allowed=True, reason="public")


def destination(input_json: str, arg: str) -> tuple[str, int] | None:
    """The host and port of the URL in argument ``arg`` of a tool's input, or None when
    the input names no http(s) URL there (the tool itself then refuses the call)."""
    try:
        args = orjson.loads(input_json or "{}")
    except orjson.JSONDecodeError:
        return None
    url = args.get(arg) if isinstance(args, dict) else None
    if not isinstance(url, str):
        return None
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not host:
        return None
    return host, port or (443 if parts.scheme == "https" else 80)


def literal(host: str) -> IP | None:
    """``host`` as an address when it is written as one (no lookup needed), else None."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def precheck(
    host: str, resolved: Sequence[str] | None, allow: Iterable[str] = ()
) -> EgressDecision | None:
    """The guard's verdict on ``host`` before the action runs: from the address itself
    when ``host`` is one, else from the addresses it was looked up to (``resolved``);
    None when it is a name nobody looked up (the guard still checks it when it dials)."""
    addr = literal(host)
    if addr is not None:
        return verdict(host, [addr], allow)
    if resolved is None:
        return None
    addrs: list[IP] = []
    for text in resolved:
        a = literal(text)
        if a is not None:
            addrs.append(a)
    return verdict(host, addrs, allow)


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
) -> str:
    """GET ``url`` as text through the guard; every redirect hop is checked again.
    ``record`` gets each decision (the tool turns them into ``net.egress`` events)."""
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
            conn.request("GET", path, headers={"user-agent": "vertebra-http-get/1"})
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
