"""A session's SSE clients at its live edge share one tail of the spine.

A client first catches up on its own, reading pages of the stream from its resume point
(on a worker thread, waiting for room in its buffer, so a slow reader holds back only
itself). Once its cursor reaches what the stream's `Hub` has handed out, it joins the hub,
which reads each new batch of records once and offers it to every client on the event
loop. Both steps run on the loop, so the join cannot miss or repeat a record: a client
takes from a hub batch only the seqs past its cursor. A client whose buffer passes its
bound while live is disconnected; it resumes from its last id and loses nothing stored.

Live items (text deltas, notices) come from the gateway's Host sink through the hub; each
goes out after the stored event it follows (`after`), waits for it if that event was not
sent yet, and is dropped if a later stored event already went out (that event carries the
content). The stream ends after the lifecycle event that closes the session, like
`SessionSubscription`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

import anyio.to_thread

from spine import Kind, Log, Record, SubscriptionClosedError, subscribe, terminal_after

from ._sse import hello, live_event, stored_event

log = logging.getLogger("vertebra.gateway")

#: Records read per page while a client catches up.
PAGE = 500
#: Live items a client may hold while the stored event they follow is not sent yet.
HELD_MAX = 4096
#: A live item: (after_seq, kind, severity, text).
Live = tuple[int, str, str, str]


def state_before(log_: Log, stream: str, after: int) -> str:
    """The terminal state the lifecycle events up to ``after`` leave the session in."""
    state, cursor = "", 0
    while cursor < after:
        page = log_.read(stream, cursor, PAGE, (Kind.LIFECYCLE,))
        for r in page:
            if r.seq > after:
                return state
            state = terminal_after(state, r.event().phase)
        if len(page) < PAGE:
            break
        cursor = page[-1].seq
    return state


class Client:
    """One SSE client of a session: its cursor, its kinds, its pending output."""

    def __init__(self, after: int, kinds: Iterable[str] | None, capacity: int) -> None:
        self.cursor = after
        self.kinds = frozenset(kinds) if kinds else None
        self.capacity = capacity
        self.state = ""
        self.live = False
        self.ended = False
        self.overflowed = False
        self._out: deque[bytes] = deque()
        self._held: list[Live] = []
        self._ready = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()

    # -- fed on the loop --------------------------------------------------------------------

    def accept(self, r: Record, data: bytes | None = None) -> None:
        """Take the stored record that follows the cursor."""
        if self.ended or r.seq <= self.cursor:
            return
        self.cursor = r.seq
        if r.kind == Kind.LIFECYCLE:
            self.state = terminal_after(self.state, r.event().phase)
        if self.kinds is None or r.kind in self.kinds:
            self._push(data if data is not None else stored_event(r))
        if self._held:
            for item in self._held:
                if item[0] == self.cursor:
                    self._push(live_event(item))
            self._held = [item for item in self._held if item[0] > self.cursor]
        if self.state == "closed":
            self.end()

    def offer(self, batch: list[tuple[Record, bytes]]) -> None:
        """A hub batch: contiguous records; only those past the cursor are new here."""
        if self.live:
            for r, data in batch:
                self.accept(r, data)
            if self.live and len(self._out) > self.capacity:
                # Too far behind: disconnect; the client resumes from its last id.
                self.overflowed = True
                self.end()

    def live_item(self, item: Live) -> None:
        if self.ended or (self.kinds is not None and item[1] not in self.kinds):
            return
        if item[0] == self.cursor:
            self._push(live_event(item))
        elif item[0] > self.cursor:
            self._held.append(item)
            if len(self._held) > HELD_MAX:
                self.overflowed = True
                self.end()

    def _push(self, data: bytes) -> None:
        self._out.append(data)
        self._ready.set()
        if len(self._out) >= self.capacity:
            self._room.clear()

    def end(self) -> None:
        self.ended = True
        self._ready.set()

    # -- drained by the response ------------------------------------------------------------

    async def take(self) -> bytes | None:
        """Everything pending as one chunk (fewer writes under load); None at the end."""
        while not self._out:
            if self.ended:
                return None
            self._ready.clear()
            await self._ready.wait()
        chunk = b"".join(self._out)
        self._out.clear()
        self._room.set()
        return chunk

    async def room(self) -> None:
        await self._room.wait()


class Waiter:
    """Collects the records of some kinds that a hub hands out after it joined (a goal
    wait: the end of a run), on the loop."""

    def __init__(self, kinds: Iterable[str]) -> None:
        self.kinds = frozenset(kinds)
        self.found: list[Record] = []
        self.changed = asyncio.Event()

    def offer(self, batch: list[tuple[Record, bytes]]) -> None:
        hits = [r for r, _ in batch if r.kind in self.kinds]
        if hits:
            self.found.extend(hits)
            self.changed.set()

    def end(self) -> None:
        self.changed.set()


class Hub:
    """The shared tail of one stream: a thread reads each batch of new records once and
    hands it to the loop, which offers it to every client that joined."""

    def __init__(self, log_: Log, stream: str, loop: asyncio.AbstractEventLoop) -> None:
        self.stream = stream
        self.clients: set[Client] = set()
        self.waiters: set[Waiter] = set()
        self._loop = loop
        # What the hub has handed out: nothing yet, and it starts at the log's end.
        self.position = log_.last_seq(stream)
        self._sub = subscribe(log_, stream, self.position)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._tail, name=f"sse-hub-{stream}", daemon=True)
        self._thread.start()

    def _tail(self) -> None:
        try:
            while not self._stopped.is_set():
                r = self._sub.get_record(1.0)
                if r is None:
                    continue
                batch = [r]
                while len(batch) < PAGE and (more := self._sub.get_record(0)) is not None:
                    batch.append(more)
                encoded = [(x, stored_event(x)) for x in batch]
                self._loop.call_soon_threadsafe(self._dispatch, encoded)
        except (SubscriptionClosedError, RuntimeError):
            pass
        except Exception:
            log.exception("SSE hub of %s failed", self.stream)

    def _dispatch(self, batch: list[tuple[Record, bytes]]) -> None:
        for c in list(self.clients):
            c.offer(batch)
        for w in list(self.waiters):
            w.offer(batch)
        self.position = batch[-1][0].seq

    def live_item(self, item: Live) -> None:
        for c in self.clients:
            c.live_item(item)

    def stop(self) -> None:
        self._stopped.set()
        self._sub.close()


class Hubs:
    """Every stream's hub, made on a stream's first client and stopped after its last.
    Used on the event loop only (the sink hands live items over with `post_live`)."""

    def __init__(self, log_: Log, capacity: int) -> None:
        self._log = log_
        self._capacity = capacity
        self._hubs: dict[str, Hub] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.last_seen: dict[str, int] = {}

    def post_live(self, stream: str, item: tuple[str, str, str]) -> None:
        """From the sink's thread: a live item for ``stream``'s clients."""
        loop = self._loop
        if loop is None or stream not in self._hubs:
            return
        after = self.last_seen.get(stream)
        if after is None:
            after = self.last_seen[stream] = self._log.last_seq(stream)
        try:
            loop.call_soon_threadsafe(self._live, stream, (after, *item))
        except RuntimeError:
            pass  # the server stopped

    def _live(self, stream: str, item: Live) -> None:
        hub = self._hubs.get(stream)
        if hub is not None:
            hub.live_item(item)

    def _hub(self, stream: str) -> Hub:
        loop = asyncio.get_running_loop()
        self._loop = loop
        hub = self._hubs.get(stream)
        if hub is None:
            hub = self._hubs[stream] = Hub(self._log, stream, loop)
        return hub

    def _leave(self, hub: Hub) -> None:
        if not hub.clients and not hub.waiters and self._hubs.get(hub.stream) is hub:
            del self._hubs[hub.stream]
            hub.stop()

    @contextlib.contextmanager
    def waiting(self, stream: str, kinds: Iterable[str]) -> Iterator[Waiter]:
        """A `Waiter` on ``stream``'s hub for as long as the block runs. Everything the
        log holds when it joins is readable from the log: read it after joining, and
        nothing falls between the read and what the waiter sees."""
        hub = self._hub(stream)
        waiter = Waiter(kinds)
        hub.waiters.add(waiter)
        try:
            yield waiter
        finally:
            hub.waiters.discard(waiter)
            self._leave(hub)

    async def stream(
        self, stream: str, after: int, kinds: Iterable[str] | None
    ) -> AsyncIterator[Any]:
        """The SSE body for one client: catch up alone, then follow with the hub."""
        client = Client(after, kinds, self._capacity)
        hub = self._hub(stream)
        hub.clients.add(client)
        try:
            yield hello()
            client.state = await anyio.to_thread.run_sync(state_before, self._log, stream, after)
            catch_up = asyncio.create_task(self._catch_up(client, hub))
            try:
                while (chunk := await client.take()) is not None:
                    yield chunk
            finally:
                catch_up.cancel()
        finally:
            hub.clients.discard(client)
            self._leave(hub)

    async def _catch_up(self, client: Client, hub: Hub) -> None:
        try:
            while not client.ended:
                await client.room()
                page = await anyio.to_thread.run_sync(
                    self._log.read, hub.stream, client.cursor, PAGE
                )
                for r in page:
                    client.accept(r)
                # On the loop, as the hub's dispatch: nothing can slip in between.
                if len(page) < PAGE and client.cursor >= hub.position:
                    client.live = True
                    if client.state == "closed":
                        client.end()
                    return
        except Exception:
            log.exception("SSE catch-up of %s failed", hub.stream)
            client.end()

    def stop(self) -> None:
        for hub in list(self._hubs.values()):
            ends = [c.end for c in hub.clients] + [w.end for w in hub.waiters]
            for end in ends:
                if self._loop is not None:
                    try:
                        self._loop.call_soon_threadsafe(end)
                    except RuntimeError:
                        pass
            hub.stop()
