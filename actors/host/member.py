"""A member host of a convention: an actor system that runs the sessions a leader places.

A member runs no Runner and no projections. It joins the leader's Thespian convention
with capabilities naming it (`actors.runner.rules.cluster.HOST`), its capacity and its data
directory; the leader's Runner creates session actors (and one heartbeat agent) on it
through Thespian's capability-based placement. Every listener binds the one address
given: Thespian's transport takes pickles without authentication, so the convention
network must be private.
"""

from __future__ import annotations

import ipaddress
import os
from typing import Any

from spine import load_backend

from .._runtime.system import bind_only, free_port, log_defs, orphan_guard
from ..errors import InvalidRequest
from ..placement import CAPACITY, DATA, HOST

__all__ = ["MemberHost", "parse_endpoint", "widen_transmits"]

#: Transmits a process of a convention keeps in flight at once (Thespian's default is 20).
PENDING_TRANSMITS = 512


def widen_transmits() -> None:
    """Let each actor process of this host keep many more transmits in flight.

    Thespian holds a message to an unreachable host (a partition) in flight until its
    connection attempt gives up, minutes later, and queues everything else behind a
    per-process limit of 20 such transmits: a Runner that sent a few messages towards a
    partitioned member could then reach no one else, and its heartbeats to live members
    would stall too. Set before the actor system starts: its processes are forked from
    this one and inherit the module's value.
    """
    from thespian.system.transport import asyncTransportBase

    asyncTransportBase.MAX_PENDING_TRANSMITS = max(
        asyncTransportBase.MAX_PENDING_TRANSMITS, PENDING_TRANSMITS
    )


def parse_endpoint(text: str) -> tuple[str, int]:
    """``ADDR:PORT`` (an IPv4 address and a port) as a tuple; `InvalidRequest` names the
    problem otherwise."""
    addr, sep, port = text.rpartition(":")
    if not sep or not addr:
        raise InvalidRequest(f"expected ADDR:PORT, got {text!r}")
    try:
        ipaddress.IPv4Address(addr)
    except ValueError:
        raise InvalidRequest(f"not an IPv4 address: {addr!r} (in {text!r})") from None
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidRequest(f"not a port (1 to 65535): {port!r} (in {text!r})")
    return addr, int(port)


def check_address(text: str) -> str:
    """An IPv4 address to bind; the wildcard address is refused."""
    try:
        addr = ipaddress.IPv4Address(text)
    except ValueError:
        raise InvalidRequest(f"not an IPv4 address to bind: {text!r}") from None
    if addr.is_unspecified:
        raise InvalidRequest("bind one address, not the wildcard address 0.0.0.0")
    return str(addr)


class MemberHost:
    """The actor system of a member host, joined to ``leader`` (``ADDR:PORT``).

    ``spine`` is the log the leader's sessions use (a URL); given, its backend is loaded
    before the actor system starts (see `spine.load_backend`).
    """

    def __init__(
        self,
        data_dir: str,
        *,
        leader: str,
        name: str,
        capacity: int,
        bind: str = "127.0.0.1",
        admin_port: int | None = None,
        spine: str | None = None,
    ) -> None:
        if not name or any(c.isspace() for c in name):
            raise InvalidRequest(f"a host name is a non-empty word, got {name!r}")
        if capacity < 1:
            raise InvalidRequest(f"capacity is at least 1, got {capacity}")
        self.leader = parse_endpoint(leader)
        self.bind = check_address(bind)
        self.name = name
        self.data_dir = os.path.abspath(data_dir)
        bind_only(self.bind)
        widen_transmits()
        orphan_guard()
        if spine:
            # Before the actor system forks: every session process placed here opens the
            # log, and inherits its backend's modules instead of importing them.
            load_backend(spine)
        self.admin_port = admin_port or free_port()
        from thespian.actors import ActorSystem

        from .._runtime.transport_auth import keyed, load_secret

        caps: dict[str, Any] = {
            "Admin Port": self.admin_port,
            "Convention Address.IPv4": self.leader,
            HOST: name,
            CAPACITY: capacity,
            DATA: self.data_dir,
        }
        # The convention's frames are authenticated with the leader's secret: a member's
        # data directory holds a copy of the leader's (docs/operations.md).
        with keyed(load_secret(self.data_dir), self.data_dir):
            self.system = ActorSystem(
                "multiprocTCPBase", caps, logDefs=log_defs(self.data_dir), transientUnique=True
            )
        self._closed = False

    def close(self) -> None:
        """Leave the convention and stop every actor of this host. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.system.shutdown()
