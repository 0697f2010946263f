"""`PostgresLog`: the durable log in PostgreSQL, shared by several processes and hosts.

Global order without gaps: a position counter row is locked (``SELECT ... FOR UPDATE``) as
the first statement of every append and advanced in the same transaction, so appends
commit one at a time in position order. A reader that has seen position N therefore never
later finds a commit below N; with a plain sequence it would (a sequence value is taken
before a slower transaction commits, so a tailing reader can skip it for good). A rolled
back append (a conflict, an error) leaves the counter where it was: no holes either.

Wakes: each append sends ``NOTIFY`` (delivered at commit) with the streams, kinds and seqs
it wrote; a watching log listens first, then tells its subscribers to catch up, then
waits. A notification is only a hint under the subscribers' poll floor.

Fencing: a writer may take a lease on a stream (`take_lease`), which bumps the stream's
epoch; its later appends to that stream check, inside the append transaction and under a
share lock on the lease row, that the epoch is still theirs, and are refused with
`FencedError` once another writer has taken the lease over.

One round trip per append: the whole transaction (counter lock, key, lease and seq checks,
inserts, notification) is one call of the server-side function ``spine_append``, so the
server never holds the counter lock while it waits for a client. A writer cut off by a
partition between the statements of a client-driven transaction held that lock, and so
stalled every writer of every host, until the server ended its idle transaction; writers
of the same host queued behind it took the lock in turn and held it as long again.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Sequence
from typing import Any

import psycopg

from ._codec import SCHEMA_VERSION
from ._errors import (
    ConflictError,
    FencedError,
    InvalidArgumentError,
    StorageError,
    UnavailableError,
)
from ._event import Event
from ._forks import ForkReads, Links, check_fork, fork_link
from ._log import (
    AppendResult,
    Wakeup,
    appended,
    check_append,
    encode_batch,
    make_record,
    wake_marks,
)
from ._postgres_reads import PostgresReads
from ._postgres_schema import (
    _COLUMNS,
    APPEND,
    LAST_SEQ,
    PRIOR_KEY,
    SET_IDLE_TIMEOUT,
    TAKE_LEASE,
    init_schema,
)
from ._postgres_watch import PostgresWatch, _marks_payload

# The statements stay importable from here: the benchmark runs them itself.
__all__ = ["APPEND", "LAST_SEQ", "PostgresLog"]

#: Appends without an expected seq that lost a race to another writer of the same stream
#: try again this many times before giving up.
_APPEND_ATTEMPTS = 50


def _redact(url: str) -> str:
    return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)


class PostgresLog(ForkReads, PostgresReads, PostgresWatch):
    """A `Log` in a PostgreSQL database (tables ``spine_*`` in the connection's schema).

    ``url`` is a libpq URL. ``single_connection`` makes reads share the writer's
    connection (serialized with appends) instead of one connection per reading thread.
    ``read_only`` refuses appends and lease changes (a projection's reader); the schema
    must then exist already.
    """

    def __init__(
        self,
        url: str,
        *,
        single_connection: bool = False,
        read_only: bool = False,
        watch_interval: float = 0.25,
        connect_timeout: float = 10.0,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("postgresql://", "postgres://")):
            raise InvalidArgumentError(f"not a PostgreSQL URL: {url!r}")
        self.url = url
        self.where = _redact(url)
        self._single = single_connection
        self._read_only = read_only
        self._watch_interval = watch_interval
        self._connect_timeout = connect_timeout
        self._wlock = threading.Lock()
        self._local = threading.local()
        self._readers: list[psycopg.Connection[Any]] = []
        self._readers_lock = threading.Lock()
        self._closed = False
        self._leases: dict[str, int] = {}
        self.wakeup = Wakeup()
        self._watchers = 0
        self._watch_lock = threading.Lock()
        self._watch_thread: threading.Thread | None = None
        self._links = Links(self._first_row)
        self._w = self._connect()
        try:
            self.channel = init_schema(self._w, self.where, self._read_only)
        except BaseException:
            self._w.close()
            raise

    # -- connections -------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            c = psycopg.connect(
                self.url, autocommit=True, connect_timeout=max(1, int(self._connect_timeout))
            )
            # A writer cut off mid-append (its host partitioned) would hold the position
            # counter's lock, and so stall every writer of every host, until the server
            # noticed the dead connection (hours, by TCP keepalive): the server ends such a
            # transaction instead. Appends are a few statements long.
            c.execute(SET_IDLE_TIMEOUT)
            return c
        except psycopg.OperationalError as exc:
            raise UnavailableError(f"cannot reach spine database {self.where!r}: {exc}") from exc
        except psycopg.Error as exc:
            raise StorageError(f"cannot open spine database {self.where!r}: {exc}") from exc

    def _writer(self) -> psycopg.Connection[Any]:
        """The writer connection (caller holds the write lock), reopened if it broke (the
        server restarted, an administrator ended it): the append that found it broken
        failed, the next one works again."""
        if self._w.broken or self._w.closed:
            with contextlib.suppress(psycopg.Error):
                self._w.close()
            self._w = self._connect()
        return self._w

    # -- leases ------------------------------------------------------------------------

    def take_lease(self, stream: str, holder: str) -> int:
        """Take ``stream`` over for this writer: bump its epoch and hold the new one.

        From now on this log's appends to ``stream`` are refused with `FencedError` as
        soon as another writer takes the lease; another writer's older lease is refused
        at once.
        """
        if self._read_only:
            raise StorageError(f"spine log {self.where!r} is open read-only")
        with self._wlock:
            if self._closed:
                raise StorageError(f"spine log {self.where!r} is closed")
            try:
                row = self._writer().execute(TAKE_LEASE, (stream, holder)).fetchone()
            except psycopg.OperationalError as exc:
                raise UnavailableError(f"cannot take the lease of {stream!r}: {exc}") from exc
            except psycopg.Error as exc:
                raise StorageError(f"cannot take the lease of {stream!r}: {exc}") from exc
            assert row is not None
            epoch = int(row[0])
            self._leases[stream] = epoch
            return epoch

    def lease(self, stream: str) -> tuple[int, str] | None:
        """The stream's current lease ``(epoch, holder)``, None if nobody took one."""
        with self._reading() as c:
            row = c.execute(
                "SELECT epoch, holder FROM spine_leases WHERE stream = %s", (stream,)
            ).fetchone()
        return None if row is None else (int(row[0]), str(row[1]))

    # -- writes ------------------------------------------------------------------------

    def append(
        self,
        stream: str,
        events: Sequence[Event],
        *,
        expected_seq: int | None = None,
        idempotency_key: str | None = None,
    ) -> AppendResult:
        check_append(stream, events, expected_seq, idempotency_key)
        # Encode outside the write lock when the seqs are known in advance.
        pre = encode_batch(events, expected_seq + 1, stream) if expected_seq is not None else None
        with self._wlock:
            if self._closed:
                raise StorageError(f"spine log {self.where!r} is closed")
            if self._read_only:
                raise StorageError(f"spine log {self.where!r} is open read-only")
            c = self._writer()
            try:
                done = self._run_append(c, stream, events, expected_seq, idempotency_key, pre)
            except psycopg.OperationalError as exc:
                raise UnavailableError(f"append to {stream!r} failed: {exc}") from exc
            except psycopg.Error as exc:
                raise StorageError(f"append to {stream!r} failed: {exc}") from exc
        if isinstance(done, AppendResult):
            return done  # the key's earlier append
        last, pos0, encoded = done
        rows = [
            (stream, seq, pos0 + seq - last, kind, payload, SCHEMA_VERSION)
            for seq, kind, payload in encoded
        ]
        self.wakeup.bump(wake_marks(stream, encoded))
        return appended(stream, last + 1, encoded, pos0 + 1, rows)

    def _run_append(
        self,
        c: psycopg.Connection[Any],
        stream: str,
        events: Sequence[Event],
        expected_seq: int | None,
        idempotency_key: str | None,
        pre: list[tuple[int, str, bytes]] | None,
    ) -> AppendResult | tuple[int, int, list[tuple[int, str, bytes]]]:
        """Call the server's append function (again after a lost race): the duplicate's
        result for a known key, else the stream's last seq and the log's last position
        before the batch, and the batch as encoded (``pre``: encoded already)."""
        held = self._leases.get(stream)
        if expected_seq is not None:
            last = expected_seq
        else:
            # The seqs go into the payloads, so encode for the stream's end as
            # read now; another writer that appends first makes this try again.
            row = c.execute(LAST_SEQ, (stream,)).fetchone()
            last = int(row[0]) if row is not None else 0
        for _ in range(_APPEND_ATTEMPTS):
            encoded = pre if pre is not None else encode_batch(events, last + 1, stream)
            outcome, a, b, first, final = self._call_append(
                c, stream, last, idempotency_key, held, encoded
            )
            if outcome == "ok":
                return last, b, encoded
            if outcome == "duplicate":
                return self._duplicate(c, stream, a, b, first, final)
            if outcome == "fenced":
                assert held is not None
                raise FencedError(stream, held, a)
            if outcome != "conflict":
                raise StorageError(f"append to {stream!r}: no answer from the server")
            if expected_seq is not None:
                raise ConflictError(stream, expected_seq, a)
            last = a
        raise StorageError(
            f"append to {stream!r} kept losing races to other writers "
            f"({_APPEND_ATTEMPTS} attempts); nothing was written"
        )

    def _call_append(
        self,
        c: psycopg.Connection[Any],
        stream: str,
        last: int,
        idempotency_key: str | None,
        held: int | None,
        encoded: list[tuple[int, str, bytes]],
    ) -> tuple[str, int, int, int, int]:
        """One call of the server's append function: the outcome and its four numbers."""
        row = c.execute(
            APPEND,
            (
                stream,
                last,
                idempotency_key,
                held,
                [kind for _, kind, _ in encoded],
                [payload for _, _, payload in encoded],
                SCHEMA_VERSION,
                self.channel,
                _marks_payload(stream, encoded),
            ),
        ).fetchone()
        return row or ("", 0, 0, 0, 0)

    def fork(
        self, stream: str, parent: str, at: int, events: Sequence[Event] = (), *, root: bool = True
    ) -> AppendResult:
        """Make ``stream`` a fork of ``parent`` at ``at`` by reference (`spine._forks`):
        a ``session.forked`` event at seq ``at + 1``, then ``events``, and no copy.
        `ConflictError` if ``stream`` exists; `InvalidArgumentError` if ``parent`` has
        fewer than ``at`` events."""
        check_fork(stream, parent, at, events)
        encoded = encode_batch([fork_link(self, parent, at, root), *events], at + 1, stream)
        with self._wlock:
            if self._closed:
                raise StorageError(f"spine log {self.where!r} is closed")
            if self._read_only:
                raise StorageError(f"spine log {self.where!r} is open read-only")
            c = self._writer()
            try:
                with c.transaction():
                    pos0 = self._start_fork(c, stream, parent, at)
                    outcome = self._call_append(c, stream, at, None, None, encoded)[0]
                    if outcome != "ok":
                        raise StorageError(f"fork into {stream!r}: the append said {outcome!r}")
            except psycopg.Error as exc:
                raise StorageError(f"fork into {stream!r} failed: {exc}") from exc
        rows = [
            (stream, seq, pos0 + seq - at, kind, payload, SCHEMA_VERSION)
            for seq, kind, payload in encoded
        ]
        self.wakeup.bump(wake_marks(stream, encoded))
        return appended(stream, at + 1, encoded, pos0 + 1, rows)

    @staticmethod
    def _start_fork(c: psycopg.Connection[Any], stream: str, parent: str, at: int) -> int:
        """Inside the fork's transaction: take the position counter (as every append
        does first, so racing forks into one id serialize), check both streams, and
        start the new one at ``at``. Returns the counter."""
        row = c.execute("SELECT position FROM spine_position WHERE id = 1 FOR UPDATE").fetchone()
        if row is None:
            raise StorageError("the spine's position counter row is missing")
        have = c.execute(LAST_SEQ, (stream,)).fetchone()
        if have is not None:
            raise ConflictError(stream, 0, int(have[0]))
        top = c.execute(LAST_SEQ, (parent,)).fetchone()
        has = 0 if top is None else int(top[0])
        if has < at:
            raise InvalidArgumentError(
                f"cannot fork {parent!r} at seq {at}: it has {has} events; nothing was written"
            )
        pos0 = int(row[0])
        c.execute(
            "INSERT INTO spine_streams (stream, last_seq, last_position, first_position) "
            "VALUES (%s, %s, %s, %s)",
            (stream, at, pos0, pos0 + 1),
        )
        return pos0

    def find_key(self, stream: str, idempotency_key: str) -> AppendResult | None:
        with self._reading() as c:
            prior = c.execute(PRIOR_KEY, (stream, idempotency_key)).fetchone()
            return None if prior is None else self._duplicate(c, stream, *prior)

    def _duplicate(
        self,
        c: psycopg.Connection[Any],
        stream: str,
        first_seq: int,
        last_seq: int,
        first_pos: int,
        last_pos: int,
    ) -> AppendResult:
        rows = c.execute(
            f"SELECT {_COLUMNS} FROM spine_events WHERE stream = %s AND seq BETWEEN %s AND %s "
            "ORDER BY seq",
            (stream, first_seq, last_seq),
            binary=True,
        ).fetchall()
        return AppendResult(
            stream=stream,
            first_seq=first_seq,
            last_seq=last_seq,
            first_position=first_pos,
            last_position=last_pos,
            records=tuple(map(make_record, rows)),
            duplicate=True,
        )

    # -- closing -----------------------------------------------------------------------

    def close(self) -> None:
        with self._wlock:
            if self._closed:
                return
            self._closed = True
            with contextlib.suppress(psycopg.Error):
                self._w.close()
        with self._readers_lock:
            for c in self._readers:
                with contextlib.suppress(psycopg.Error):
                    c.close()
            self._readers.clear()
        t = self._watch_thread
        if t is not None:
            t.join(timeout=2 * self._watch_interval + 1.0)
        self.wakeup.bump()

    def __enter__(self) -> PostgresLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
