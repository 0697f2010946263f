"""What stored rows do to the sessions: one session's folds (`_Acc`: its status and index
entry), the per-kind row handlers, one generation's state in memory, and the folds of a
page of rows (fast, by kind) and of one record (strict, against a snapshot).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from typing import Any

import orjson

from spine import DEFAULT_PAGE, SCHEMA_VERSION, Kind, Record, event_to_dict

from ._index import INFO_STATE_HANDLERS, InfoFolder
from ._reader import LogReader
from ._status_rows import STATUS_HANDLERS, StatusFolder

#: A stored row as the reducer reads it: stream, seq, position, kind, version, payload.
Row = tuple[str, int, int, str, int, bytes]


class _Acc(StatusFolder):
    """One session's folds: the status (the folder itself, so that the status handlers
    take it directly in the hot loop) and its index entry."""

    __slots__ = ("info",)

    def __init__(self) -> None:
        super().__init__()
        self.info = InfoFolder("")

    @property
    def status(self) -> StatusFolder:
        return self

    @classmethod
    def new(cls, stream: str) -> _Acc:
        acc = cls()
        acc.info = InfoFolder(stream)
        return acc

    def body(self) -> bytes:
        return orjson.dumps({"s": self.view(), "i": self.info.dump()})

    @classmethod
    def from_body(cls, body: bytes) -> _Acc:
        d = orjson.loads(body)
        acc = cls.load(d["s"])
        acc.info = InfoFolder.load(d["i"])
        return acc


RowHandler = Callable[[_Acc, Mapping[str, Any]], None]


def _with_state(
    h: Callable[[StatusFolder, Mapping[str, Any]], None] | None,
    ih: Callable[[InfoFolder, Mapping[str, Any]], None],
) -> RowHandler:
    if h is None:

        def info_only(acc: _Acc, d: Mapping[str, Any]) -> None:
            ih(acc.info, d)

        return info_only
    status = h

    def both(acc: _Acc, d: Mapping[str, Any]) -> None:
        status(acc, d)
        ih(acc.info, d)

    return both


#: Per kind, everything a stored row of that kind changes (status, then index state).
ROW_HANDLERS: dict[str, RowHandler] = {
    **STATUS_HANDLERS,
    **{k: _with_state(STATUS_HANDLERS.get(k), ih) for k, ih in INFO_STATE_HANDLERS.items()},
}


class _State:
    """One generation in memory: its sessions and the position they are folded up to."""

    __slots__ = ("gen", "position", "sessions", "skipped", "version")

    def __init__(self, gen: int, version: str, position: int, skipped: int = 0) -> None:
        self.gen = gen
        self.version = version
        self.position = position
        self.skipped = skipped
        self.sessions: dict[str, _Acc] = {}


def _record(row: Row) -> Record:
    stream, seq, position, kind, version, payload = row
    return Record(stream, seq, position, kind, payload, version)


def _row_reader(log: LogReader) -> Callable[[int, int], list[Row]]:
    """A page reader over the all-streams log: ``read(after_position, limit)``.

    Every `Log` reads plain tuples through its own `read_rows` (no `Record` per row; on
    SQLite a read never takes the log's write lock); a reader without it goes through
    `read_all`.
    """
    fast = getattr(log, "read_rows", None)

    def read_records(after: int, limit: int) -> list[Row]:
        return [
            (r.stream, r.seq, r.position, r.kind, r.version, r.payload)
            for r in log.read_all(after, limit)
        ]

    plain: Callable[[int, int], list[Row]] = fast if fast is not None else read_records

    def read(after: int, limit: int) -> list[Row]:
        rows = plain(after, limit)
        if _FORKED not in map(itemgetter(3), rows):
            return rows
        return with_prefixes(log, rows)

    return read


_FORKED = str(Kind.SESSION_FORKED)


def with_prefixes(log: LogReader, rows: Sequence[Row]) -> list[Row]:
    """``rows`` with each fork's prefix (the parent's rows up to the fork seq, read by
    reference) placed before the fork's first row, as rows of the fork at that row's
    position: the global reads hold each stored row once, so a fold of the whole log
    would otherwise start a fork's session from its own rows, without its history.
    Nothing is folded twice: a prefix enters with the row that made the fork, and the
    position committed after a page is that of the page's last stored row."""
    out: list[Row] = []
    for row in rows:
        stream, seq, position, kind = row[0], row[1], row[2], row[3]
        if kind == _FORKED and seq > 1:
            after = 0
            while after < seq - 1:
                page = log.read(stream, after, min(DEFAULT_PAGE, seq - 1 - after))
                if not page:
                    break
                out.extend((stream, r.seq, position, r.kind, r.version, r.payload) for r in page)
                after = page[-1].seq
        out.append(row)
    return out


def _stored_dict(r: Record) -> dict[str, Any]:
    # The strict path: validate the row as an Event (naming stream and seq on failure),
    # and upcast older schema versions, before the fast fold reads it.
    ev = r.event()
    if r.version == SCHEMA_VERSION:
        try:
            d = orjson.loads(r.payload)
        except orjson.JSONDecodeError:
            # JSON that orjson refuses but the event accepts (a tool's raw input, kept as
            # the writer spelled it): the event's own fields in the stored shape.
            return event_to_dict(ev)
        if not isinstance(d, dict):  # pragma: no cover - r.event() already refused it
            raise TypeError("payload is not an object")
        return d
    return event_to_dict(ev)


def fold_page(sessions: dict[str, _Acc], rows: Sequence[Row], dirty: set[str]) -> None:
    # The hot loop of a rebuild. Rows are dispatched on the stored kind column (the
    # spine writes the payload's kind there), so rows of kinds no rule reads are not
    # even decoded; the index's per-row bookkeeping (count, last seq, time, position)
    # is taken per session per page from C-level passes over the page.
    current = SCHEMA_VERSION
    if set(map(itemgetter(4), rows)) - {current}:
        # Another schema version: validate and upcast row by row (rare).
        for row in rows:
            fold_row(sessions, row, _stored_dict(_record(row)), dirty)
        return
    loads = orjson.loads
    streams = list(map(itemgetter(0), rows))
    lasts = dict(zip(streams, rows, strict=True))
    counts = Counter(streams)
    # Marked before folding, so that a failure mid-page rolls back every session it
    # may have touched.
    dirty.update(lasts)
    fresh = [s for s in lasts if s not in sessions]
    if fresh:
        firsts = dict(zip(reversed(streams), reversed(rows), strict=True))
        for s in fresh:
            first = firsts[s]
            acc = sessions[s] = _Acc.new(s)
            acc.info.first_position = first[2]
            acc.info.created = loads(first[5]).get("time")
    handlers = ROW_HANDLERS
    for stream, _seq, _position, kind, _version, payload in rows:
        h = handlers.get(kind)
        if h is not None:
            d = loads(payload)
            # The one check the fast path makes: a row that is not an object of its
            # own kind goes to the careful path, which names the problem.
            if d["kind"] != kind:
                raise ValueError(f"payload kind differs from the stored kind {kind!r}")
            h(sessions[stream], d)
    for s, last in lasts.items():
        d = loads(last[5])
        sessions[s].info.feed_tail(d, d, last[2], counts[s])


def fold_row(sessions: dict[str, _Acc], row: Row, d: dict[str, Any], dirty: set[str]) -> None:
    acc = sessions.get(row[0])
    if acc is None:
        acc = sessions[row[0]] = _Acc.new(row[0])
    acc.status.feed(d)
    acc.info.feed(d, row[2])
    dirty.add(row[0])


def fold_record(sessions: dict[str, _Acc], r: Record, dirty: set[str]) -> None:
    d = _stored_dict(r)
    acc = sessions.get(r.stream)
    snapshot = None if acc is None else acc.body()
    fresh = acc if acc is not None else _Acc.new(r.stream)
    try:
        fresh.status.feed(d)
        fresh.info.feed(d, r.position)
    except Exception:
        if snapshot is not None:
            sessions[r.stream] = _Acc.from_body(snapshot)
        raise
    sessions[r.stream] = fresh
    dirty.add(r.stream)
