"""A session's SSE clients at its live edge share one tail of the spine.

A client first catches up on its own, reading pages of the stream from its resume point
(on a worker thread, waiting for room in its buffer, so a slow reader holds back only
itself). Once its cursor reaches what the stream's `Hub` has handed out, it joins the hub,
which reads each new batch of records once and offers it to every client on the event
loop. Both steps run on the loop, so the join cannot miss or repeat a record: a client
takes from a hub batch only the seqs past its cursor. A batch is encoded and framed once;
a client that takes all of it writes those same bytes to its connection (`_wire.Out`)
right there, so one event reaches every client from one place, without a task switch per
client. A live client whose connection holds more than its bound of unread bytes is
disconnected; it resumes from its last id and loses nothing stored.

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
from collections.abc import Callable, Iterable, Iterator

import anyio.to_thread
import attrs

from spine import Kind, Log, Record, SubscriptionClosedError, subscribe, terminal_after

from ._sse import live_event, stored_event
from ._wire import HELLO, Out, chunk

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


@attrs.frozen(kw_only=True)
class Batch:
    """Records a hub hands out at once, encoded once for every client."""

    records: list[tuple[Record, bytes]]
    #: Every record's event, joined; and the same as one HTTP/1.1 chunk.
    body: bytes
    frame: bytes
    #: No lifecycle event: no client's state (and so its end) changes with this batch.
    plain: bool

    @classmethod
    def of(cls, records: list[Record]) -> Batch:
        encoded = [(r, stored_event(r)) for r in records]
        body = b"".join(data for _, data in encoded)
        plain = all(r.kind != Kind.LIFECYCLE for r in records)
        return cls(records=encoded, body=body, frame=chunk(body), plain=plain)

    @property
    def first(self) -> int:
        return self.records[0][0].seq

    @property
    def last(self) -> int:
        return self.records[-1][0].seq


class Client:
    """One SSE client of a session: its cursor, its kinds, and where its bytes go.

    The bytes are the REST stream's (`_sse`); a subclass that speaks another protocol
    from the same log overrides `encode` and `encode_live`, `hello`, and sets `shared`
    False so that batches encoded once for REST clients are never written to it."""

    #: Written first: a comment and the reconnection delay.
    hello = HELLO
    #: Whether this client writes a hub's batch bytes, encoded once for every client.
    shared = True

    def __init__(self, after: int, kinds: Iterable[str] | None, out: Out, limit: int) -> None:
        self.cursor = after
        self.kinds = frozenset(kinds) if kinds else None
        self.out = out
        #: Bytes the client may leave unread while live before it is disconnected.
        self.limit = limit
        self.state = ""
        self.live = False
        self.ended = False
        self.overflowed = False
        self.done = asyncio.Event()
        self._pending: list[bytes] = []
        self._held: list[Live] = []

    # -- fed on the loop --------------------------------------------------------------------

    def accept(self, r: Record, data: bytes | None = None) -> None:
        """Take the stored record that follows the cursor (written at the next `flush`)."""
        if self.ended or r.seq <= self.cursor:
            return
        self.cursor = r.seq
        if r.kind == Kind.LIFECYCLE:
            self.state = terminal_after(self.state, r.event().phase)
        # Nothing to say is no write: an empty chunk would end the response.
        if (self.kinds is None or r.kind in self.kinds) and (encoded := self.encode(r, data)):
            self._pending.append(encoded)
        if self._held:
            for item in self._held:
                if item[0] == self.cursor:
                    self._pending.append(self.encode_live(item, None))
            self._held = [item for item in self._held if item[0] > self.cursor]
        if self.state == "closed":
            self.end()

    def flush(self) -> None:
        """Write what `accept` took, as one write."""
        if self._pending:
            self.out.write(b"".join(self._pending))
            self._pending.clear()
            self._check()

    def offer(self, batch: Batch) -> None:
        """A hub batch: contiguous records; only those past the cursor are new here."""
        if not self.live or self.ended:
            return
        if (
            self.shared
            and batch.plain
            and self.kinds is None
            and not self._held
            and self.cursor == batch.first - 1
        ):
            # The common case: all of it, as it is: the bytes framed once for everyone.
            self.cursor = batch.last
            self.out.write(batch.body, batch.frame)
            self._check()
            return
        for r, data in batch.records:
            self.accept(r, data)
        self.flush()

    def live_item(self, item: Live, data: bytes | None = None, framed: bytes | None = None) -> None:
        """A live item (``data``, ``framed``: its encoding and its chunk, made once)."""
        if self.ended or (self.kinds is not None and item[1] not in self.kinds):
            return
        if item[0] == self.cursor:
            if data is None or not self.shared:
                data, framed = self.encode_live(item, None), None
            if data:
                self.out.write(data, framed)
            self._check()
        elif item[0] > self.cursor:
            self._held.append(item)
            if len(self._held) > HELD_MAX:
                self.overflowed = True
                self.end()

    def encode(self, r: Record, data: bytes | None) -> bytes:
        """The bytes of stored record ``r`` (``data``: the hub's encoding, if made)."""
        return data if data is not None else stored_event(r)

    def encode_live(self, item: Live, data: bytes | None) -> bytes:
        """The bytes of live item ``item``."""
        return data if data is not None else live_event(item)

    def _check(self) -> None:
        if self.live and not self.ended and self.out.buffered() > self.limit:
            # Too far behind: disconnect; the client resumes from its last id.
            self.overflowed = True
            self.end()

    def end(self) -> None:
        self.ended = True
        self.done.set()


class Waiter:
    """Collects the records of some kinds that a hub hands out after it joined (a goal
    wait: the end of a run), on the loop."""

    def __init__(self, kinds: Iterable[str] | None) -> None:
        #: None: every kind.
        self.kinds = frozenset(kinds) if kinds is not None else None
        self.found: list[Record] = []
        self.changed = asyncio.Event()

    def offer(self, batch: Batch) -> None:
        hits = [r for r, _ in batch.records if self.kinds is None or r.kind in self.kinds]
        if hits:
            self.found.extend(hits)
            self.changed.set()

    def end(self) -> None:
        self.changed.set()


class Recorder:
    """Keeps a stream's hub alive and records its live items until a client joins: a
    request that starts a turn and then streams it joins only after its ingress is
    committed, and the turn's first deltas may come before that."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.items: list[Live] = []

    def take(self) -> list[Live]:
        """What was recorded; the recording ends."""
        self.hub.recorders.discard(self)
        items, self.items = self.items, []
        return items


class Hub:
    """The shared tail of one stream: a thread reads each batch of new records once and
    hands it to the loop, which offers it to every client that joined."""

    def __init__(self, log_: Log, stream: str, loop: asyncio.AbstractEventLoop) -> None:
        self.stream = stream
        self.clients: set[Client] = set()
        self.waiters: set[Waiter] = set()
        self.recorders: set[Recorder] = set()
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
                self._loop.call_soon_threadsafe(self._dispatch, Batch.of(batch))
        except (SubscriptionClosedError, RuntimeError):
            pass
        except Exception:
            log.exception("SSE hub of %s failed", self.stream)

    def _dispatch(self, batch: Batch) -> None:
        for c in list(self.clients):
            c.offer(batch)
        for w in list(self.waiters):
            w.offer(batch)
        self.position = batch.last

    def live_item(self, item: Live) -> None:
        data = live_event(item)
        framed = chunk(data)
        for c in self.clients:
            c.live_item(item, data, framed)
        for r in self.recorders:
            if len(r.items) < HELD_MAX:
                r.items.append(item)

    def stop(self) -> None:
        self._stopped.set()
        self._sub.close()


class Hubs:
    """Every stream's hub, made on a stream's first client and stopped after its last.
    Used on the event loop only (the sink hands live items over with `post_live`)."""

    def __init__(self, log_: Log, limit: int, send_timeout: float) -> None:
        self._log = log_
        #: Bytes a live client may leave unread before it is disconnected.
        self.limit = limit
        self._timeout = send_timeout
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
        if (
            not hub.clients
            and not hub.waiters
            and not hub.recorders
            and self._hubs.get(hub.stream) is hub
        ):
            del self._hubs[hub.stream]
            hub.stop()

    def record(self, stream: str) -> Recorder:
        """Record ``stream``'s live items until `Recorder.take` (then `release`)."""
        hub = self._hub(stream)
        rec = Recorder(hub)
        hub.recorders.add(rec)
        return rec

    def release(self, rec: Recorder) -> None:
        """End a recording nobody took (the request failed first)."""
        rec.take()
        self._leave(rec.hub)

    @contextlib.contextmanager
    def waiting(self, stream: str, kinds: Iterable[str] | None) -> Iterator[Waiter]:
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

    async def serve(
        self,
        stream: str,
        after: int,
        kinds: Iterable[str] | None,
        out: Out,
        make: Callable[[int, Out, int], Client] | None = None,
    ) -> bool:
        """The SSE body for one client: catch up alone, then follow with the hub until
        the stream ends. True if the client fell too far behind. ``make(after, out,
        limit)`` builds a client of another protocol."""
        client = make(after, out, self.limit) if make else Client(after, kinds, out, self.limit)
        hub = self._hub(stream)
        hub.clients.add(client)
        try:
            out.write(client.hello)
            client.state = await anyio.to_thread.run_sync(state_before, self._log, stream, after)
            await self._catch_up(client, hub)
            await client.done.wait()
            return client.overflowed
        finally:
            hub.clients.discard(client)
            self._leave(hub)

    async def _catch_up(self, client: Client, hub: Hub) -> None:
        while not client.ended:
            page = await anyio.to_thread.run_sync(self._log.read, hub.stream, client.cursor, PAGE)
            for r in page:
                client.accept(r)
            client.flush()
            # On the loop, as the hub's dispatch: nothing can slip in between.
            if len(page) < PAGE and client.cursor >= hub.position:
                client.live = True
                if client.state == "closed":
                    client.end()
                return
            # A slow reader holds back only its own catch-up.
            if not await client.out.room(self._timeout):
                client.overflowed = True
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
