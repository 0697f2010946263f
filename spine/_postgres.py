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
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import orjson
import psycopg
from psycopg import sql

from ._codec import SCHEMA_VERSION, decode_event
from ._errors import ConflictError, FencedError, InvalidArgumentError, StorageError
from ._event import Event
from ._log import (
    DEFAULT_PAGE,
    AppendResult,
    Record,
    Row,
    StreamInfo,
    Wakeup,
    check_append,
    check_kinds,
    check_page,
    encode_batch,
    gc_paused,
    make_record,
)

FORMAT = "vertebra-spine-1"
# Any constant: serialises schema creation between processes opening a fresh database.
_SCHEMA_LOCK = 0x7665727465627261
#: How long the server lets one of our connections sit idle inside a transaction.
SET_IDLE_TIMEOUT = "SET idle_in_transaction_session_timeout = '10s'"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS spine_events (
    position BIGINT PRIMARY KEY,
    stream   TEXT   NOT NULL,
    seq      BIGINT NOT NULL,
    kind     TEXT   NOT NULL,
    version  INT    NOT NULL,
    payload  BYTEA  NOT NULL,
    UNIQUE (stream, seq)
);
CREATE TABLE IF NOT EXISTS spine_streams (
    stream         TEXT PRIMARY KEY,
    last_seq       BIGINT NOT NULL,
    last_position  BIGINT NOT NULL,
    first_position BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS spine_streams_first ON spine_streams (first_position);
CREATE TABLE IF NOT EXISTS spine_idempotency (
    stream         TEXT   NOT NULL,
    key            TEXT   NOT NULL,
    first_seq      BIGINT NOT NULL,
    last_seq       BIGINT NOT NULL,
    first_position BIGINT NOT NULL,
    last_position  BIGINT NOT NULL,
    PRIMARY KEY (stream, key)
);
CREATE TABLE IF NOT EXISTS spine_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS spine_position (
    id       INT    PRIMARY KEY CHECK (id = 1),
    position BIGINT NOT NULL
);
INSERT INTO spine_position VALUES (1, 0) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS spine_leases (
    stream TEXT   PRIMARY KEY,
    epoch  BIGINT NOT NULL,
    holder TEXT   NOT NULL
);
-- Stored bytes are what seals hash: the log itself never rewrites or removes them.
CREATE OR REPLACE FUNCTION spine_events_append_only() RETURNS trigger AS $$
BEGIN RAISE EXCEPTION 'events are append-only'; END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS spine_events_append_only ON spine_events;
CREATE TRIGGER spine_events_append_only BEFORE UPDATE OR DELETE ON spine_events
FOR EACH ROW EXECUTE FUNCTION spine_events_append_only();
"""

#: The whole append transaction, run by the server in one call (see the module's doc).
#: Checks in the order the log contract fixes: a known idempotency key answers first
#: ("duplicate": its seqs and positions), then the lease ("fenced": the current epoch),
#: then the expected seq ("conflict": the stream's last seq); "ok" carries the stream's
#: last seq and the counter before the append. A refused append writes nothing.
_APPEND_FUNCTION = """
CREATE OR REPLACE FUNCTION spine_append(
    p_stream TEXT, p_expected BIGINT, p_key TEXT, p_epoch BIGINT,
    p_kinds TEXT[], p_payloads BYTEA[], p_version INT, p_channel TEXT, p_marks TEXT
) RETURNS TABLE (r_outcome TEXT, r_a BIGINT, r_b BIGINT, r_c BIGINT, r_d BIGINT) AS $$
DECLARE
    v_pos0 BIGINT;
    v_last BIGINT;
    v_epoch BIGINT;
    v_n INT := cardinality(p_kinds);
    v_prior spine_idempotency%ROWTYPE;
BEGIN
    -- First, the counter row: every append waits here for the one before it to commit,
    -- so positions are taken and committed in one order.
    SELECT position INTO v_pos0 FROM spine_position WHERE id = 1 FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the spine''s position counter row is missing';
    END IF;
    IF p_key IS NOT NULL THEN
        SELECT * INTO v_prior FROM spine_idempotency WHERE stream = p_stream AND key = p_key;
        IF FOUND THEN
            RETURN QUERY SELECT 'duplicate'::TEXT, v_prior.first_seq, v_prior.last_seq,
                v_prior.first_position, v_prior.last_position;
            RETURN;
        END IF;
    END IF;
    IF p_epoch IS NOT NULL THEN
        SELECT epoch INTO v_epoch FROM spine_leases WHERE stream = p_stream FOR SHARE;
        IF COALESCE(v_epoch, 0) <> p_epoch THEN
            RETURN QUERY SELECT 'fenced'::TEXT, COALESCE(v_epoch, 0), 0::BIGINT, 0::BIGINT,
                0::BIGINT;
            RETURN;
        END IF;
    END IF;
    SELECT last_seq INTO v_last FROM spine_streams WHERE stream = p_stream;
    v_last := COALESCE(v_last, 0);
    IF v_last <> p_expected THEN
        RETURN QUERY SELECT 'conflict'::TEXT, v_last, 0::BIGINT, 0::BIGINT, 0::BIGINT;
        RETURN;
    END IF;
    INSERT INTO spine_events (stream, seq, position, kind, payload, version)
        SELECT p_stream, v_last + i, v_pos0 + i, p_kinds[i], p_payloads[i], p_version
        FROM generate_subscripts(p_kinds, 1) AS i;
    UPDATE spine_position SET position = v_pos0 + v_n WHERE id = 1;
    INSERT INTO spine_streams (stream, last_seq, last_position, first_position)
        VALUES (p_stream, v_last + v_n, v_pos0 + v_n, v_pos0 + 1)
        ON CONFLICT (stream) DO UPDATE SET
        last_seq = excluded.last_seq, last_position = excluded.last_position;
    IF p_key IS NOT NULL THEN
        INSERT INTO spine_idempotency
            VALUES (p_stream, p_key, v_last + 1, v_last + v_n, v_pos0 + 1, v_pos0 + v_n);
    END IF;
    PERFORM pg_notify(p_channel, p_marks);
    RETURN QUERY SELECT 'ok'::TEXT, v_last, v_pos0, 0::BIGINT, 0::BIGINT;
END $$ LANGUAGE plpgsql
"""
_APPEND_SIGNATURE = "spine_append(text,bigint,text,bigint,text[],bytea[],integer,text,text)"
#: One append: one statement, one round trip (the benchmark's baseline calls it too).
APPEND = "SELECT * FROM spine_append(%s, %s, %s, %s, %s, %s, %s, %s, %s)"

PRIOR_KEY = (
    "SELECT first_seq, last_seq, first_position, last_position "
    "FROM spine_idempotency WHERE stream = %s AND key = %s"
)
TAKE_LEASE = (
    "INSERT INTO spine_leases (stream, epoch, holder) VALUES (%s, 1, %s) "
    "ON CONFLICT (stream) DO UPDATE SET epoch = spine_leases.epoch + 1, "
    "holder = excluded.holder RETURNING epoch"
)
LAST_SEQ = "SELECT last_seq FROM spine_streams WHERE stream = %s"
#: Appends without an expected seq that lost a race to another writer of the same stream
#: try again this many times before giving up.
_APPEND_ATTEMPTS = 50

_COLUMNS = "stream, seq, position, kind, payload, version"
_READ_ROWS = (
    "SELECT stream, seq, position, kind, version, payload FROM spine_events "
    "WHERE position > %s ORDER BY position LIMIT %s"
)
# A notification payload must stay under 8000 bytes; past this the wake says nothing
# about which streams moved and every subscriber reads.
_NOTIFY_MAX = 7000
_REPLAY_PAGE = 2000


def _redact(url: str) -> str:
    return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)


class PostgresLog:
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
        self._w = self._connect()
        try:
            self.channel = self._init_schema()
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
        except psycopg.Error as exc:
            raise StorageError(f"cannot open spine database {self.where!r}: {exc}") from exc

    def _init_schema(self) -> str:
        c = self._w
        try:
            schema = c.execute(
                "SELECT current_schema(), to_regprocedure(%s) IS NOT NULL", (_APPEND_SIGNATURE,)
            ).fetchone()
            if schema is None or schema[0] is None:
                raise StorageError(f"{self.where!r} has no schema to keep the spine in")
            if schema[1] and not self._read_only:
                # The usual case, without a transaction: the function is made last, in the
                # transaction that made the tables, so a spine that has it is complete.
                # Every new session process opens the log, and on a loaded host each round
                # trip here delays its takeover.
                row = c.execute("SELECT value FROM spine_meta WHERE key = 'format'").fetchone()
                if row is not None and row[0] != FORMAT:
                    raise StorageError(f"{self.where!r} holds an unknown spine format {row[0]!r}")
                if row is not None:
                    return f"spine_{schema[0]}"
            if self._read_only:
                row = c.execute(
                    "SELECT to_regclass('spine_meta') IS NOT NULL AND EXISTS "
                    "(SELECT 1 FROM spine_meta WHERE key = 'format' AND value = %s)",
                    (FORMAT,),
                ).fetchone()
                if row is None or not row[0]:
                    raise StorageError(f"{self.where!r} holds no spine to read")
            else:
                with c.transaction():
                    c.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                    exists = c.execute("SELECT to_regclass('spine_meta')").fetchone()
                    if exists is None or exists[0] is None:
                        c.execute(_SCHEMA)
                    row = c.execute("SELECT value FROM spine_meta WHERE key = 'format'").fetchone()
                    if row is None:
                        c.execute("INSERT INTO spine_meta VALUES ('format', %s)", (FORMAT,))
                    elif row[0] != FORMAT:
                        raise StorageError(
                            f"{self.where!r} holds an unknown spine format {row[0]!r}"
                        )
                    # A spine made before appends were one call lacks the function.
                    fn = c.execute("SELECT to_regprocedure(%s)", (_APPEND_SIGNATURE,))
                    made = fn.fetchone()
                    if made is None or made[0] is None:
                        c.execute(_APPEND_FUNCTION)
        except psycopg.Error as exc:
            raise StorageError(f"{self.where!r} is not a usable spine database: {exc}") from exc
        # One channel per schema, so that logs in other schemas of the database (tests,
        # tenants) do not wake each other.
        return f"spine_{schema[0]}"

    def _writer(self) -> psycopg.Connection[Any]:
        """The writer connection (caller holds the write lock), reopened if it broke (the
        server restarted, an administrator ended it): the append that found it broken
        failed, the next one works again."""
        if self._w.broken or self._w.closed:
            with contextlib.suppress(psycopg.Error):
                self._w.close()
            self._w = self._connect()
        return self._w

    def _reader(self) -> psycopg.Connection[Any]:
        if self._closed:
            raise StorageError(f"spine log {self.where!r} is closed")
        if self._single:
            return self._writer()
        c: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if c is None or c.closed or c.broken:
            c = self._connect()
            self._local.conn = c
            with self._readers_lock:
                self._readers.append(c)
        return c

    @contextlib.contextmanager
    def _reading(self) -> Iterator[psycopg.Connection[Any]]:
        # A shared connection is serialized with appends for the whole read.
        shared = self._wlock if self._single else contextlib.nullcontext()
        try:
            with shared:
                c = self._reader()
                yield c
        except psycopg.Error as exc:
            raise StorageError(f"read from {self.where!r} failed: {exc}") from exc

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
            held = self._leases.get(stream)
            try:
                if expected_seq is not None:
                    last = expected_seq
                else:
                    # The seqs go into the payloads, so encode for the stream's end as
                    # read now; another writer that appends first makes this try again.
                    row = c.execute(LAST_SEQ, (stream,)).fetchone()
                    last = int(row[0]) if row is not None else 0
                for _ in range(_APPEND_ATTEMPTS):
                    encoded = pre if pre is not None else encode_batch(events, last + 1, stream)
                    outcome, a, b, first, final = c.execute(
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
                    ).fetchone() or ("", 0, 0, 0, 0)
                    if outcome == "ok":
                        break
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
                else:
                    raise StorageError(
                        f"append to {stream!r} kept losing races to other writers "
                        f"({_APPEND_ATTEMPTS} attempts); nothing was written"
                    )
            except psycopg.Error as exc:
                raise StorageError(f"append to {stream!r} failed: {exc}") from exc
        pos0 = b
        rows = [
            (stream, seq, pos0 + seq - last, kind, payload, SCHEMA_VERSION)
            for seq, kind, payload in encoded
        ]
        self.wakeup.bump([(stream, kind, seq) for seq, kind, _ in encoded])
        return AppendResult(
            stream=stream,
            first_seq=last + 1,
            last_seq=encoded[-1][0],
            first_position=pos0 + 1,
            last_position=pos0 + len(rows),
            records=tuple(map(make_record, rows)),
        )

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

    # -- reads -------------------------------------------------------------------------

    def read(
        self,
        stream: str,
        after_seq: int = 0,
        limit: int | None = DEFAULT_PAGE,
        kinds: Iterable[str] | None = None,
    ) -> list[Record]:
        check_page(after_seq, limit, "after_seq")
        ks = check_kinds(kinds)
        q = f"SELECT {_COLUMNS} FROM spine_events WHERE stream = %s AND seq > %s"
        args: list[object] = [stream, after_seq]
        if ks is not None:
            q += " AND kind = ANY(%s)"
            args.append(list(ks))
        q += " ORDER BY seq LIMIT %s"
        args.append(limit)
        return list(map(make_record, self._query(q, args)))

    def read_events(self, stream: str, after_seq: int = 0) -> list[Event]:
        """Every event of ``stream`` after ``after_seq``, decoded: the replay fast path.

        One statement, so the events come from one consistent snapshot of the stream.
        """
        check_page(after_seq, None, "after_seq")
        out: list[Event] = []
        with self._reading() as c:
            cur = c.cursor(binary=True)
            cur.execute(
                "SELECT seq, version, payload FROM spine_events WHERE stream = %s AND seq > %s "
                "ORDER BY seq",
                (stream, after_seq),
            )
            with contextlib.closing(cur), gc_paused():
                while rows := cur.fetchmany(_REPLAY_PAGE):
                    out.extend(
                        [decode_event(b, stream=stream, seq=s, version=v) for s, v, b in rows]
                    )
        return out

    def read_all(
        self,
        after_position: int = 0,
        limit: int | None = DEFAULT_PAGE,
        kinds: Iterable[str] | None = None,
    ) -> list[Record]:
        check_page(after_position, limit, "after_position")
        ks = check_kinds(kinds)
        q = f"SELECT {_COLUMNS} FROM spine_events WHERE position > %s"
        args: list[object] = [after_position]
        if ks is not None:
            q += " AND kind = ANY(%s)"
            args.append(list(ks))
        q += " ORDER BY position LIMIT %s"
        args.append(limit)
        return list(map(make_record, self._query(q, args)))

    def read_rows(self, after_position: int = 0, limit: int | None = DEFAULT_PAGE) -> list[Row]:
        check_page(after_position, limit, "after_position")
        return self._query(_READ_ROWS, (after_position, limit))

    def streams(self) -> list[StreamInfo]:
        rows = self._query(
            "SELECT stream, last_seq, last_position FROM spine_streams ORDER BY first_position",
            (),
        )
        return [StreamInfo(stream=s, last_seq=q, last_position=p) for s, q, p in rows]

    def last_seq(self, stream: str) -> int:
        rows = self._query(LAST_SEQ, (stream,))
        return int(rows[0][0]) if rows else 0

    def last_position(self) -> int:
        # The counter, not MAX(position): it only moves at commit, with no gaps below it.
        rows = self._query("SELECT position FROM spine_position WHERE id = 1", ())
        return int(rows[0][0]) if rows else 0

    def _query(self, q: str, args: Sequence[object]) -> list[Any]:
        with self._reading() as c:
            return c.execute(q, args, binary=True).fetchall()

    # -- wakes -------------------------------------------------------------------------

    def watch(self) -> None:
        with self._watch_lock:
            self._watchers += 1
            if self._watch_thread is None and not self._closed:
                # Listen first, before returning: a subscriber reads the log after watch(),
                # so every commit it has not read will also be notified.
                try:
                    c = self._connect()
                    c.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                except (psycopg.Error, StorageError) as exc:
                    self._watchers -= 1
                    raise StorageError(f"cannot watch {self.where!r}: {exc}") from exc
                # Marks from before may have missed commits made while nobody listened:
                # forget them, so every subscriber catches up by reading.
                self.wakeup.bump(None)
                t = threading.Thread(
                    target=self._watch_loop, args=(c,), name="spine-listen", daemon=True
                )
                self._watch_thread = t
                t.start()

    def unwatch(self) -> None:
        with self._watch_lock:
            self._watchers = max(0, self._watchers - 1)

    def _watch_loop(self, c: psycopg.Connection[Any]) -> None:
        try:
            while True:
                with self._watch_lock:
                    if self._watchers == 0 or self._closed:
                        self._watch_thread = None
                        return
                try:
                    for n in c.notifies(timeout=self._watch_interval):
                        self.wakeup.bump(_parse_marks(n.payload))
                except psycopg.Error:
                    # The connection broke: forget the marks (subscribers read on their
                    # floor) and listen again on a new one.
                    self.wakeup.bump(None)
                    with contextlib.suppress(psycopg.Error):
                        c.close()
                    try:
                        c = self._connect()
                        c.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                    except (psycopg.Error, StorageError):
                        threading.Event().wait(self._watch_interval)
                    self.wakeup.bump(None)
        finally:
            with contextlib.suppress(psycopg.Error):
                c.close()

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


def _marks_payload(stream: str, encoded: Sequence[tuple[int, str, bytes]]) -> str:
    """``[stream, {kind: last seq}]`` as JSON; empty (unknown) if it would be too long."""
    kinds: dict[str, int] = {}
    for seq, kind, _ in encoded:
        kinds[kind] = seq
    text = orjson.dumps([stream, kinds]).decode()
    return text if len(text) <= _NOTIFY_MAX else ""


def _parse_marks(payload: str) -> list[tuple[str, str, int]] | None:
    try:
        stream, kinds = orjson.loads(payload)
        return [(str(stream), str(k), int(s)) for k, s in kinds.items()]
    except (ValueError, TypeError, AttributeError):
        return None
