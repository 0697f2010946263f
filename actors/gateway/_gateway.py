"""`Gateway`, what every route handler shares (the Host, the spine, the tokens, the
streams), and how a handler calls the Host or checks that a session exists."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import anyio.to_thread
import attrs

from spine import Log

from ..host import Host
from ..otel._metrics import LogMetrics
from . import _sse
from ._hub import Hubs
from ._replies import HttpError
from ._tenants import Quotas, Tenants
from ._tokens import TokenStore


@attrs.define(kw_only=True)
class Gateway:
    """What every handler needs: the Host, the spine, the tokens and the limits."""

    host: Host
    log: Log
    tokens: TokenStore
    ping: float = 15.0
    send_timeout: float = 30.0
    #: Events the every-session stream holds for one client.
    buffer: int = 4096
    #: Bytes a live session stream may leave unread before its client is disconnected.
    buffer_bytes: int = 4 * 1024 * 1024
    #: Write SSE bodies straight to the socket (False: through ASGI, as any server).
    direct: bool = True
    quotas: Quotas = attrs.field(factory=Quotas)
    hubs: Hubs = attrs.field()
    feeds: list[_sse.Feed] = attrs.field(factory=list)
    lock: threading.Lock = attrs.field(factory=threading.Lock)
    stopping: bool = False
    metrics: LogMetrics = attrs.field(factory=LogMetrics)
    #: The A2A push notifications' pump (`_a2a_push.PushPump`), if a webhook is set.
    push: Any = None

    tenants: Tenants = attrs.field()

    @hubs.default
    def _hubs(self) -> Hubs:
        return Hubs(self.log, self.buffer_bytes, self.send_timeout)

    @tenants.default
    def _tenants(self) -> Tenants:
        return Tenants(self.log, self.quotas)

    def on_sink(self, sid: str, ev: Any, live: Any) -> None:
        """The Host sink: remember each session's last stored seq, so that a live item
        knows which stored event it follows, and pass live items to the session's hub."""
        if ev is not None:
            self.hubs.last_seen[sid] = ev.seq
            self.tenants.observe(sid, ev.kind)
        elif live is not None:
            self.hubs.post_live(sid, live)

    def attach(self, feed: _sse.Feed) -> None:
        with self.lock:
            self.feeds.append(feed)

        def detach() -> None:
            with self.lock:
                if feed in self.feeds:
                    self.feeds.remove(feed)

        feed.on_stop.append(detach)

    def stop_feeds(self) -> None:
        self.stopping = True
        self.hubs.stop()
        with self.lock:
            feeds = list(self.feeds)
        for f in feeds:
            f.stop()
            f.end()


async def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a Host call on a worker thread (each keeps its own actor-system context)."""
    return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))


async def known(gw: Gateway, sid: str) -> None:
    if gw.log.last_seq(sid) == 0:
        raise HttpError(404, "not_found", f"no session {sid!r}")
