"""`start_gateway`: the HTTP server on a thread of the embedding program (or the CLI)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
import threading
import time
from typing import Any

import uvicorn

from spine import open_log

from ..host import Host
from ..runner import spine_spec
from ._app import create_app
from ._gateway import Gateway
from ._limits import Limits, ResourceReport, protocol
from ._tenants import Quotas
from ._tokens import TokenStore
from ._wire import expose_transport


class GatewayError(Exception):
    """The gateway cannot start as asked (a refused bind, a port in use)."""


def parse_bind(bind: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as a host and a port."""
    host, sep, port = bind.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise GatewayError(f"bind must be HOST:PORT, got {bind!r}")
    host = host.strip("[]")
    if not 0 <= int(port) <= 65535:
        raise GatewayError(f"port out of range in {bind!r}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class GatewayHandle:
    """A running gateway: its ``url``, its admin ``token``, and `stop`."""

    def __init__(
        self,
        server: uvicorn.Server,
        thread: threading.Thread,
        gw: Gateway,
        url: str,
        owned_host: Host | None,
        sink_id: str,
    ) -> None:
        self._server = server
        self._thread = thread
        self.gateway = gw
        self.url = url
        self.token = gw.tokens.admin
        self.host = gw.host
        self._owned = owned_host
        self._sink_id = sink_id
        self._stopped = False

    @property
    def page_url(self) -> str:
        """The page's address with the token in the fragment (never sent to the server)."""
        return f"{self.url}/#token={self.token}"

    def stop(self, timeout: float = 10.0) -> None:
        """End every stream, stop serving, and close the Host if the gateway started it."""
        if self._stopped:
            return
        self._stopped = True
        if self.gateway.push is not None:
            self.gateway.push.stop()
        self.gateway.stop_feeds()
        self._server.should_exit = True
        self._thread.join(timeout)
        with contextlib.suppress(Exception):
            self.host.remove_sink(self._sink_id)
        self.gateway.log.unwatch()
        self.gateway.log.close()
        if self._owned is not None:
            self._owned.close()

    def __enter__(self) -> GatewayHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_gateway(
    data_dir: str | os.PathLike[str],
    bind: str = "127.0.0.1:0",
    *,
    allow_remote: bool = False,
    host: Host | None = None,
    ping: float = 15.0,
    limits: Limits | None = None,
    quotas: Quotas | None = None,
    webhook: Any = None,
    **host_options: Any,
) -> GatewayHandle:
    """Serve HTTP + SSE for the daemon over ``data_dir`` on ``bind`` (port 0: a free one).

    With ``host`` the gateway uses that embedding `Host` (and leaves it open on `stop`);
    without, it starts one with ``host_options`` and closes it on `stop`. A bind address
    that is not loopback is refused unless ``allow_remote``: the admin token then crosses
    the network, so put TLS in front. ``limits`` bounds connections (`Limits`: head,
    body and idle timeouts, how many at once); ``quotas`` bounds each tenant (`Quotas`).
    ``webhook`` (an `_a2a_push.Webhook`, the a2a extra) receives the A2A tasks' pauses
    and ends.
    """
    addr, port = _bind(bind, allow_remote)
    data = os.path.abspath(os.fspath(data_dir))
    tokens = TokenStore(data)
    family, sock = _listen(addr, port, bind)
    owned = None
    try:
        if host is None:
            owned = host = Host(data, **host_options)
        # The daemon's own spine, wherever it lives: a PostgreSQL spine leaves no
        # sessions in the data directory's SQLite file.
        log = open_log(spine_spec(host.data_dir, host.spine))
        log.watch()
        gw = Gateway(host=host, log=log, tokens=tokens, ping=ping, quotas=quotas or Quotas())
        sink_id = host.add_sink(gw.on_sink)
        if webhook is not None:
            from ._a2a_push import PushPump

            gw.push = PushPump(log, data, webhook)
    except BaseException:
        sock.close()
        if owned is not None:
            owned.close()
        raise
    server, thread = _serve(gw, sock, owned, limits or Limits())
    shown = f"[{addr}]" if family == socket.AF_INET6 else addr
    url = f"http://{shown}:{sock.getsockname()[1]}"
    return GatewayHandle(server, thread, gw, url, owned, sink_id)


def _bind(bind: str, allow_remote: bool) -> tuple[str, int]:
    addr, port = parse_bind(bind)
    if not is_loopback(addr) and not allow_remote:
        raise GatewayError(
            f"refusing to bind {addr}: not a loopback address"
            " (--http-allow-remote, or allow_remote=True, allows it)"
        )
    return addr, port


def _listen(addr: str, port: int, bind: str) -> tuple[socket.AddressFamily, socket.socket]:
    """A socket listening on ``addr:port`` (``bind`` as the caller wrote it, for the error)."""
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((addr, port))
        sock.listen(Limits().backlog)
    except OSError as exc:
        sock.close()
        raise GatewayError(f"cannot bind {bind}: {exc}") from None
    return family, sock


class _Server(uvicorn.Server):
    """uvicorn's server with the loop's handler of accept errors replaced, so that a
    process out of file descriptors logs a line now and then, not a traceback a try."""

    def __init__(self, config: uvicorn.Config, report: ResourceReport) -> None:
        super().__init__(config)
        self.report = report

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        asyncio.get_running_loop().set_exception_handler(self.report)
        await super().serve(sockets)


def _serve(
    gw: Gateway, sock: socket.socket, owned: Host | None, limits: Limits
) -> tuple[uvicorn.Server, threading.Thread]:
    """Run uvicorn on ``sock`` on a thread of its own and wait until it serves; if it
    does not, close the socket and ``owned`` (the Host the gateway started)."""
    config = uvicorn.Config(
        expose_transport(create_app(gw)),
        # h11 (the default without httptools), named so that the SSE bodies' direct
        # writes know the framing they write into; with deadlines and a connection bound.
        http=protocol(limits),
        timeout_keep_alive=max(1, round(limits.idle)),
        backlog=limits.backlog,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=2,
        ws="none",
    )
    server = _Server(config, ResourceReport(limits.report))
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="vertebra-gateway", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            if owned is not None:
                owned.close()
            raise GatewayError("the HTTP server did not start")
        time.sleep(0.01)
    return server, thread
