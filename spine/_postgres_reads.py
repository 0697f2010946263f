"""`PostgresReads`: the mixin of `PostgresLog` that reads, each thread on a connection of
its own (or, with ``single_connection``, on the writer's, serialized with appends)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import psycopg

from ._codec import decode_stored
from ._errors import StorageError, UnavailableError
from ._event import Event
from ._log import (
    DEFAULT_PAGE,
    Record,
    Row,
    StreamInfo,
    check_kinds,
    check_page,
    gc_paused,
    make_record,
)
from ._postgres_schema import _COLUMNS, _READ_ROWS, LAST_SEQ

_REPLAY_PAGE = 2000
#: Above every seq (a BIGINT).
_NO_END = 2**63 - 1


class PostgresReads:
    """Reading a PostgreSQL log: records, decoded events, rows and streams."""

    where: str
    _closed: bool
    _single: bool
    _local: threading.local
    _readers: list[psycopg.Connection[Any]]
    _readers_lock: threading.Lock
    _wlock: threading.Lock

    def _connect(self) -> psycopg.Connection[Any]:
        """A new connection to the log's database (`PostgresLog` opens it)."""
        raise NotImplementedError

    def _writer(self) -> psycopg.Connection[Any]:
        """The writer's connection (`PostgresLog` keeps it)."""
        raise NotImplementedError

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
        except psycopg.OperationalError as exc:
            raise UnavailableError(f"read from {self.where!r} failed: {exc}") from exc
        except psycopg.Error as exc:
            raise StorageError(f"read from {self.where!r} failed: {exc}") from exc

    def _own_read(
        self,
        stream: str,
        after: int,
        upto: int | None,
        limit: int | None,
        kinds: tuple[str, ...] | None,
    ) -> list[Record]:
        q = f"SELECT {_COLUMNS} FROM spine_events WHERE stream = %s AND seq > %s"
        args: list[object] = [stream, after]
        if upto is not None:
            q += " AND seq <= %s"
            args.append(upto)
        if kinds is not None:
            q += " AND kind = ANY(%s)"
            args.append(list(kinds))
        q += " ORDER BY seq LIMIT %s"
        args.append(limit)
        return list(map(make_record, self._query(q, args)))

    def _first_row(self, stream: str) -> Record | None:
        rows = self._query(
            f"SELECT {_COLUMNS} FROM spine_events WHERE stream = %s ORDER BY seq LIMIT 1",
            (stream,),
        )
        return make_record(rows[0]) if rows else None

    def _own_events(self, stream: str, after: int, upto: int | None) -> list[Event]:
        # One statement, so the events come from one consistent snapshot of the stream.
        out: list[Event] = []
        with self._reading() as c:
            cur = c.cursor(binary=True)
            cur.execute(
                "SELECT seq, version, payload FROM spine_events WHERE stream = %s AND seq > %s "
                "AND seq <= %s ORDER BY seq",
                (stream, after, _NO_END if upto is None else upto),
            )
            with contextlib.closing(cur), gc_paused():
                while rows := cur.fetchmany(_REPLAY_PAGE):
                    out.extend(decode_stored(rows, stream))
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
