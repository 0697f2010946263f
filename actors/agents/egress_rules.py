"""The egress guard's rules: where a tool may connect, decided from addresses alone.

Pure (no lookups, no sockets), so the session's gate can decide with them before anyone is
asked: `verdict` takes a host as asked, the addresses it resolved to and the session's
allowlist; `precheck` decides before the action runs. The dialling half is `egress`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

import attrs
import orjson

__all__ = ["IP", "EgressDecision", "classify", "destination", "literal", "precheck", "verdict"]

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
