"""Forks by reference: a stream that begins with another stream's prefix without a copy.

`Log.fork(stream, parent, at, events)` stores, in one transaction, a ``session.forked``
event at seq ``at + 1`` of a new stream (``extra``: ``parent`` and ``at``) and then
``events``. The new stream holds no row at seqs 1..``at``: every per-stream read
(`read`, `read_events`, and so everything built on them: subscriptions and their catch-up,
seals and their verification, a session's fold and its snapshots) serves those seqs from
the parent's rows, restated under the fork's name (same seq, kind, bytes and position),
then the fork's own. The parent's later events are never read: the reference stops at
``at``. A parent that is itself a fork resolves the same way, so a chain of forks reads
through to the stream that stored the rows.

The link is the stream's first stored row, immutable once written, so each log keeps the
links it has looked up. The global reads (`read_all`, `read_rows`) return stored rows
only, each once, at its position: a fold over the whole log that needs a fork's prefix
reads it through `read` when it meets the ``session.forked`` row (the projections do).

The log never removes a row (both backends refuse updates and deletes of events), so a
parent cannot vanish from under its forks: closing, failing or passivating the parent
only appends events after ``at``, which its forks never see.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from ._errors import DecodeError, InvalidArgumentError
from ._event import Event, Kind
from ._frontier import prefix_root
from ._ids import validate_session_id
from ._log import DEFAULT_PAGE, Log, Record, check_append, check_kinds, check_page


class Link(NamedTuple):
    """Where a fork's prefix lives: the parent stream and the last seq taken from it."""

    parent: str
    seq: int


def link_event(parent: str, at: int, root: str = "") -> Event:
    """The first event a fork stores (at seq ``at + 1``); ``root``: the Merkle root (hex)
    of the parent's seqs 1..``at``."""
    extra: dict[str, object] = {"parent": parent, "at": at}
    if root:
        extra["root"] = root
    return Event(kind=Kind.SESSION_FORKED, extra=extra)


def fork_link(log: Log, parent: str, at: int, root: bool) -> Event:
    """The link a fork of ``parent`` at ``at`` stores, naming (``root``) the root of the
    prefix, found from the parent's newest seal at or below ``at`` (`spine._frontier`).
    A parent too short for the fork gets no root: the fork then refuses it by name."""
    if not root:
        return link_event(parent, at)
    try:
        return link_event(parent, at, prefix_root(log, parent, at).hex())
    except InvalidArgumentError:
        return link_event(parent, at)


def link_of(first: Record | None) -> Link | None:
    """The link a stream's first stored row makes, None for a stream that is no fork."""
    if first is None or first.seq == 1 or first.kind != Kind.SESSION_FORKED:
        return None
    ev = first.event()
    parent, seq = ev.extra.get("parent"), ev.extra.get("at")
    if not isinstance(parent, str) or not isinstance(seq, int) or seq != first.seq - 1:
        raise DecodeError(
            "a fork's link names no parent and seq (at)", stream=first.stream, seq=first.seq
        )
    return Link(parent, seq)


def check_fork(stream: str, parent: str, at: object, events: Sequence[Event]) -> None:
    """Refuse a malformed fork before it touches storage."""
    validate_session_id(parent)
    if events:
        check_append(stream, events, None, None)
    else:
        validate_session_id(stream)
    if not isinstance(at, int) or isinstance(at, bool) or at < 1:
        raise InvalidArgumentError(f"a fork's seq must be an int of at least 1, got {at!r}")
    if stream == parent:
        raise InvalidArgumentError(f"stream {stream!r} cannot fork itself")


def restate(records: Iterable[Record], stream: str) -> list[Record]:
    """The parent's records as the fork's: only the stream's name changes."""
    return [r._replace(stream=stream) for r in records]


#: Reads a stream's own stored rows: (stream, after_seq, up_to_seq or None, limit, kinds).
OwnRead = Callable[[str, int, int | None, int | None, tuple[str, ...] | None], list[Record]]
#: Decodes a stream's own stored rows: (stream, after_seq, up_to_seq or None).
OwnEvents = Callable[[str, int, int | None], list[Event]]


class Links:
    """The links a log has looked up, by stream (a stream's first row never changes)."""

    __slots__ = ("_first", "_known", "_lock")

    def __init__(self, first: Callable[[str], Record | None]) -> None:
        self._first = first
        self._known: dict[str, Link | None] = {}
        self._lock = threading.Lock()

    def get(self, stream: str) -> Link | None:
        with self._lock:
            if stream in self._known:
                return self._known[stream]
        first = self._first(stream)
        link = link_of(first)
        if first is not None:
            # A stream that does not exist yet may still be created as a fork later.
            with self._lock:
                self._known[stream] = link
        return link


def read_through(
    links: Links,
    own: OwnRead,
    stream: str,
    after: int,
    upto: int | None,
    limit: int | None,
    kinds: tuple[str, ...] | None,
) -> list[Record]:
    """Records of ``stream`` after ``after`` (up to ``upto``), its prefix read by reference."""
    link = links.get(stream)
    if link is None or after >= link.seq:
        return own(stream, after, upto, limit, kinds)
    top = link.seq if upto is None else min(upto, link.seq)
    out = restate(read_through(links, own, link.parent, after, top, limit, kinds), stream)
    if (limit is not None and len(out) >= limit) or (upto is not None and upto <= link.seq):
        return out
    left = None if limit is None else limit - len(out)
    out.extend(own(stream, link.seq, upto, left, kinds))
    return out


def events_through(
    links: Links, own: OwnEvents, stream: str, after: int, upto: int | None
) -> list[Event]:
    """Every event of ``stream`` after ``after`` (up to ``upto``), decoded, the prefix read
    by reference (its rows are immutable: reading it apart from the rest loses nothing)."""
    link = links.get(stream)
    if link is None or after >= link.seq:
        return own(stream, after, upto)
    top = link.seq if upto is None else min(upto, link.seq)
    out = events_through(links, own, link.parent, after, top)
    if upto is None or upto > link.seq:
        out.extend(own(stream, link.seq, upto))
    return out


class ForkReads:
    """The per-stream reads of a log with forks, over its own-row reads (a mixin: the
    backend sets ``_links`` and implements ``_own_read`` and ``_own_events``)."""

    _links: Links

    if TYPE_CHECKING:

        def _own_read(
            self,
            stream: str,
            after: int,
            upto: int | None,
            limit: int | None,
            kinds: tuple[str, ...] | None,
        ) -> list[Record]: ...

        def _own_events(self, stream: str, after: int, upto: int | None) -> list[Event]: ...

    def read(
        self,
        stream: str,
        after_seq: int = 0,
        limit: int | None = DEFAULT_PAGE,
        kinds: Iterable[str] | None = None,
    ) -> list[Record]:
        check_page(after_seq, limit, "after_seq")
        ks = check_kinds(kinds)
        return read_through(self._links, self._own_read, stream, after_seq, None, limit, ks)

    def read_events(self, stream: str, after_seq: int = 0) -> list[Event]:
        """Every event of ``stream`` after ``after_seq``, decoded: the replay path. Its
        own rows come from one statement (one consistent snapshot); a fork's prefix,
        immutable, from the parent's."""
        check_page(after_seq, None, "after_seq")
        return events_through(self._links, self._own_events, stream, after_seq, None)

    def fork_link(self, stream: str) -> tuple[str, int] | None:
        """``(parent, seq)`` if ``stream`` is a fork by reference, else None."""
        link = self._links.get(stream)
        return None if link is None else (link.parent, link.seq)
