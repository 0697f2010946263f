"""`MemoryLog`: the in-process log, for tests, embedding without a file, and as a model."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

import attrs
from sortedcontainers import SortedDict

from ._errors import ConflictError, InvalidArgumentError
from ._event import Event
from ._forks import ForkReads, Links, check_fork, fork_link
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
)


class MemoryLog(ForkReads):
    """A `Log` held in memory; same encoding, ordering and errors as the durable backends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._all: list[Record] = []
        self._streams: dict[str, list[Record]] = {}
        # Ordered by first position so `streams()` lists in order of first append.
        self._first: SortedDict = SortedDict()
        self._keys: dict[tuple[str, str], AppendResult] = {}
        self.wakeup = Wakeup()
        self._links = Links(self._first_row)

    def append(
        self,
        stream: str,
        events: Sequence[Event],
        *,
        expected_seq: int | None = None,
        idempotency_key: str | None = None,
    ) -> AppendResult:
        check_append(stream, events, expected_seq, idempotency_key)
        with self._lock:
            if idempotency_key is not None:
                prior = self._keys.get((stream, idempotency_key))
                if prior is not None:
                    return AppendResult(
                        stream=prior.stream,
                        first_seq=prior.first_seq,
                        last_seq=prior.last_seq,
                        first_position=prior.first_position,
                        last_position=prior.last_position,
                        records=prior.records,
                        duplicate=True,
                    )
            rows = self._streams.get(stream)
            last = rows[-1].seq if rows else 0
            if expected_seq is not None and expected_seq != last:
                raise ConflictError(stream, expected_seq, last)
            encoded = encode_batch(events, last + 1, stream)
            result = self._store(stream, encoded, idempotency_key)
        self.wakeup.bump([(stream, r.kind, r.seq) for r in result.records])
        return result

    def _store(
        self, stream: str, encoded: list[tuple[int, str, bytes]], key: str | None
    ) -> AppendResult:
        # Caller holds the lock.
        pos = len(self._all)
        records = tuple(
            Record(stream, seq, pos + i + 1, kind, payload)
            for i, (seq, kind, payload) in enumerate(encoded)
        )
        rows = self._streams.get(stream)
        if rows is None:
            rows = self._streams[stream] = []
            self._first[records[0].position] = stream
        rows.extend(records)
        self._all.extend(records)
        result = AppendResult(
            stream=stream,
            first_seq=records[0].seq,
            last_seq=records[-1].seq,
            first_position=records[0].position,
            last_position=records[-1].position,
            records=records,
        )
        if key is not None:
            self._keys[(stream, key)] = result
        return result

    def find_key(self, stream: str, idempotency_key: str) -> AppendResult | None:
        with self._lock:
            prior = self._keys.get((stream, idempotency_key))
        return None if prior is None else attrs.evolve(prior, duplicate=True)

    def _own_read(
        self,
        stream: str,
        after: int,
        upto: int | None,
        limit: int | None,
        kinds: tuple[str, ...] | None,
    ) -> list[Record]:
        with self._lock:
            rows = self._streams.get(stream)
            if not rows:
                return []
            # A fork's own rows start after its fork seq (`rows[i].seq == base + i + 1`).
            base = rows[0].seq - 1
            own = rows[max(0, after - base) : None if upto is None else max(0, upto - base)]
            return _take(own, 0, limit, kinds)

    def _own_events(self, stream: str, after: int, upto: int | None) -> list[Event]:
        return [r.event() for r in self._own_read(stream, after, upto, None, None)]

    def _first_row(self, stream: str) -> Record | None:
        with self._lock:
            rows = self._streams.get(stream)
            return rows[0] if rows else None

    def fork(
        self, stream: str, parent: str, at: int, events: Sequence[Event] = (), *, root: bool = True
    ) -> AppendResult:
        """Make ``stream`` a fork of ``parent`` at ``at`` by reference (`spine._forks`)."""
        check_fork(stream, parent, at, events)
        # Outside the lock: the root reads the parent (its prefix never changes).
        link = fork_link(self, parent, at, root)
        with self._lock:
            if stream in self._streams:
                raise ConflictError(stream, 0, self._streams[stream][-1].seq)
            has = self._streams[parent][-1].seq if parent in self._streams else 0
            if has < at:
                raise InvalidArgumentError(
                    f"cannot fork {parent!r} at seq {at}: it has {has} events; nothing was written"
                )
            encoded = encode_batch([link, *events], at + 1, stream)
            result = self._store(stream, encoded, None)
        self.wakeup.bump([(stream, r.kind, r.seq) for r in result.records])
        return result

    def read_all(
        self,
        after_position: int = 0,
        limit: int | None = DEFAULT_PAGE,
        kinds: Iterable[str] | None = None,
    ) -> list[Record]:
        check_page(after_position, limit, "after_position")
        ks = check_kinds(kinds)
        with self._lock:
            return _take(self._all, after_position, limit, ks)

    def read_rows(self, after_position: int = 0, limit: int | None = DEFAULT_PAGE) -> list[Row]:
        return [
            (r.stream, r.seq, r.position, r.kind, r.version, r.payload)
            for r in self.read_all(after_position, limit)
        ]

    def streams(self) -> list[StreamInfo]:
        with self._lock:
            out = []
            for stream in self._first.values():
                last = self._streams[stream][-1]
                out.append(
                    StreamInfo(stream=stream, last_seq=last.seq, last_position=last.position)
                )
            return out

    def last_seq(self, stream: str) -> int:
        with self._lock:
            rows = self._streams.get(stream)
            return rows[-1].seq if rows else 0

    def last_position(self) -> int:
        with self._lock:
            return len(self._all)

    def watch(self) -> None:
        """Nothing to do: every writer of a memory log is in this process."""

    def unwatch(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> MemoryLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _take(
    rows: list[Record], after: int, limit: int | None, kinds: tuple[str, ...] | None
) -> list[Record]:
    # Rows are indexed by (seq or position) - 1, both contiguous from 1.
    if kinds is None:
        end = None if limit is None else after + limit
        return rows[after:end]
    out = []
    for r in rows[after:]:
        if r.kind in kinds:
            out.append(r)
            if limit is not None and len(out) >= limit:
                break
    return out
