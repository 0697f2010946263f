"""The `Log` protocol, the rows it stores, and the wake signal subscriptions wait on."""

from __future__ import annotations

import functools
import operator
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

import attrs

from ._codec import (
    SCHEMA_VERSION,
    decode_event,
    encode_batch_checked,
    encode_event,
    plain_event,
)
from ._errors import DecodeError, InvalidArgumentError
from ._event import EPHEMERAL_KINDS, Event
from ._gcpause import gc_paused as gc_paused
from ._ids import validate_session_id

#: Rows per page when a reader does not say.
DEFAULT_PAGE = 1000


class Record(NamedTuple):
    """One stored event as bytes: what the log keeps, seals hash and actors pass around.

    A named tuple rather than an attrs class because logs build one per row read and per
    event appended: a tuple is made in C from a database row (see `make_record`), about a
    third of the cost, which the append and replay budgets in docs/performance.md need.
    """

    stream: str
    seq: int
    position: int
    kind: str
    payload: bytes
    version: int = SCHEMA_VERSION

    def event(self) -> Event:
        """Decode the payload (raises `DecodeError` naming stream and seq)."""
        return decode_event(self.payload, stream=self.stream, seq=self.seq, version=self.version)


#: A stored row as a fast reader gets it: stream, seq, position, kind, version, payload.
Row = tuple[str, int, int, str, int, bytes]

#: Build a `Record` from a tuple in field order without a Python-level constructor call.
make_record: Callable[[Iterable[object]], Record] = functools.partial(tuple.__new__, Record)


@attrs.frozen(kw_only=True)
class AppendResult:
    """What an append did: the seqs and global positions it took, and its records.

    ``duplicate`` is true when the idempotency key had been seen: nothing was appended and
    the original result is returned.
    """

    stream: str
    first_seq: int
    last_seq: int
    first_position: int
    last_position: int
    records: tuple[Record, ...] = ()
    duplicate: bool = False

    def events(self) -> list[Event]:
        return [r.event() for r in self.records]


@attrs.frozen(kw_only=True)
class StreamInfo:
    """A stream's summary as the log knows it."""

    stream: str
    last_seq: int
    last_position: int


@runtime_checkable
class Log(Protocol):
    """A durable, ordered event log of many streams.

    ``seq`` is 1-based and contiguous per stream; ``position`` orders all appends of all
    streams in commit order and has no gaps.
    """

    wakeup: Wakeup

    def append(
        self,
        stream: str,
        events: Sequence[Event],
        *,
        expected_seq: int | None = None,
        idempotency_key: str | None = None,
    ) -> AppendResult:
        """Append ``events`` as one atomic batch.

        With ``expected_seq`` the append happens only if the stream's last seq equals it,
        else `ConflictError`. A repeated ``idempotency_key`` on the same stream returns the
        original result (``duplicate=True``) instead of appending twice.
        """
        ...

    def fork(
        self, stream: str, parent: str, at: int, events: Sequence[Event] = (), *, root: bool = True
    ) -> AppendResult:
        """Make ``stream`` a fork of ``parent`` at seq ``at``, by reference: one
        ``session.forked`` event at seq ``at + 1`` naming both, then ``events``, in one
        transaction; nothing of the parent is copied. Per-stream reads of ``stream`` serve
        seqs 1..``at`` from the parent's rows (see `spine._forks`); ``root``: the link names
        the prefix's Merkle root, from the parent's seals (`spine._frontier`).
        `ConflictError` if ``stream`` exists, `InvalidArgumentError` if ``parent`` is short."""
        ...

    def fork_link(self, stream: str) -> tuple[str, int] | None:
        """``(parent, seq)`` for a fork by reference, None for any other stream."""
        ...

    def find_key(self, stream: str, idempotency_key: str) -> AppendResult | None:
        """The append that ``idempotency_key`` made on ``stream`` (``duplicate=True``, as
        a repeated append would return it), or None if the key was never used there."""
        ...

    def read(
        self,
        stream: str,
        after_seq: int = 0,
        limit: int | None = DEFAULT_PAGE,
        kinds: Iterable[str] | None = None,
    ) -> list[Record]:
        """Records of ``stream`` with seq greater than ``after_seq``, in seq order."""
        ...

    def read_events(self, stream: str, after_seq: int = 0) -> list[Event]:
        """Every event of ``stream`` after ``after_seq``, decoded, from one consistent
        snapshot: the replay path."""
        ...

    def read_all(
        self,
        after_position: int = 0,
        limit: int | None = DEFAULT_PAGE,
        kinds: Iterable[str] | None = None,
    ) -> list[Record]:
        """Records of every stream with position greater than ``after_position``."""
        ...

    def read_rows(self, after_position: int = 0, limit: int | None = DEFAULT_PAGE) -> list[Row]:
        """Like `read_all`, as plain tuples ``(stream, seq, position, kind, version,
        payload)``: the bulk path a projection folds, with no `Record` made per row."""
        ...

    def streams(self) -> list[StreamInfo]:
        """Every stream with at least one event, in order of first append."""
        ...

    def last_seq(self, stream: str) -> int:
        """The stream's last seq, 0 for an unknown stream."""
        ...

    def last_position(self) -> int:
        """The global position of the newest event, 0 for an empty log."""
        ...

    def watch(self) -> None:
        """Begin noticing appends made by other processes (counted; pair with `unwatch`)."""
        ...

    def unwatch(self) -> None: ...

    def close(self) -> None: ...

    def __enter__(self) -> Log: ...

    def __exit__(self, *exc: object) -> None: ...


class Wakeup:
    """A generation counter with conditions: appends bump it, subscribers wait on it.

    A bump may say which streams moved and up to which seq (``marks``), so that a
    subscriber of another stream need not re-read the log when woken: with many
    subscribers, one wake per commit would otherwise cost one query per subscriber. A bump
    that cannot say forgets every mark, and subscribers read again. A wake is only a hint;
    readers always re-read the log when in doubt and on their poll floor, so a lost wake
    costs latency, never correctness.

    A waiter may name its stream: it is then woken only by bumps that name that stream (or
    that cannot say what moved), not by every commit. Fifty subscribers of fifty sessions
    in one process were otherwise all woken, to find nothing, by each of the others'
    commits: one thread switch and one look at the marks per subscriber per commit.
    """

    __slots__ = ("_cond", "_lock", "_marks", "_waiting", "epoch", "generation")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: Waiters for any stream (a global tail) wait here.
        self._cond = threading.Condition(self._lock)
        #: stream -> [its condition (same lock), how many wait on it].
        self._waiting: dict[str, list[Any]] = {}
        # stream -> kind -> the last seq of that kind a bump reported.
        self._marks: dict[str, dict[str, int]] = {}
        #: Bumped whenever the marks are forgotten: within one epoch every bump said which
        #: streams it moved, so a stream without a mark has not moved in it.
        self.epoch = 0
        self.generation = 0

    def bump(self, marks: Iterable[tuple[str, str, int]] | None = None) -> None:
        """Wake the waiters concerned; ``marks`` are ``(stream, kind, seq)``: the last seq
        of each kind that moved in each stream (None: unknown, every waiter reads again)."""
        with self._lock:
            self.generation += 1
            self._cond.notify_all()
            if marks is None:
                self._marks.clear()
                self.epoch += 1
                for entry in self._waiting.values():
                    entry[0].notify_all()
                return
            waiting = self._waiting
            for stream, kind, seq in marks:
                kinds = self._marks.setdefault(stream, {})
                if seq > kinds.get(kind, 0):
                    kinds[kind] = seq
                moved = waiting.get(stream)
                if moved is not None:
                    moved[0].notify_all()

    def poke(self, stream: str) -> None:
        """Wake the waiters of ``stream`` (and global ones) without reporting a move: a
        subscription being closed wakes its own reader this way."""
        with self._lock:
            self.generation += 1
            self._cond.notify_all()
            entry = self._waiting.get(stream)
            if entry is not None:
                entry[0].notify_all()

    def mark(self, stream: str, kinds: Iterable[str] | None = None) -> int | None:
        """The last seq of ``stream`` (of one of ``kinds``) a bump reported, None if none
        did since the marks were last forgotten."""
        seen = self._marks.get(stream)
        if not seen:
            return None
        if kinds is None:
            return max(seen.values())
        return max((seen.get(k, 0) for k in kinds), default=0) or None

    def wait(self, seen: int, timeout: float | None, stream: str | None = None) -> int:
        """Block until the generation moves past ``seen`` or ``timeout`` passes; with a
        ``stream``, until a bump concerning that stream (a bump for another stream moves
        the generation without waking this waiter)."""
        with self._lock:
            if self.generation != seen:
                return self.generation
            if stream is None:
                self._cond.wait(timeout)
                return self.generation
            entry = self._waiting.get(stream)
            if entry is None:
                entry = self._waiting[stream] = [threading.Condition(self._lock), 0]
            entry[1] += 1
            try:
                entry[0].wait(timeout)
            finally:
                entry[1] -= 1
                if entry[1] == 0 and self._waiting.get(stream) is entry:
                    del self._waiting[stream]
            return self.generation


def check_kinds(kinds: Iterable[str] | None) -> tuple[str, ...] | None:
    if kinds is None:
        return None
    if isinstance(kinds, str):
        raise InvalidArgumentError("kinds must be a collection of kind strings, not one string")
    out = tuple(kinds)
    if not out:
        return None
    for k in out:
        if not isinstance(k, str) or not k:
            raise InvalidArgumentError(f"invalid kind in filter: {k!r}")
    return out


_JUST_EVENT = {Event}
_kind_of = operator.attrgetter("kind")


def check_append(
    stream: str, events: Sequence[Event], expected_seq: int | None, idempotency_key: str | None
) -> None:
    """Refuse a malformed append before it touches storage."""
    validate_session_id(stream)
    if isinstance(events, Event):
        raise InvalidArgumentError("append takes a sequence of events, not one event")
    if not events:
        raise InvalidArgumentError(f"append to {stream!r} has no events")
    # C-level passes first: a batch of plain `Event`s of stored kinds is the usual case.
    if set(map(type, events)) != _JUST_EVENT or not EPHEMERAL_KINDS.isdisjoint(
        map(_kind_of, events)
    ):
        for ev in events:
            if not isinstance(ev, Event):
                raise InvalidArgumentError(
                    f"append to {stream!r} got {type(ev).__name__}, not Event"
                )
            if ev.kind in EPHEMERAL_KINDS:
                raise InvalidArgumentError(f"{ev.kind!r} events are ephemeral and never stored")
    if expected_seq is not None and (not isinstance(expected_seq, int) or expected_seq < 0):
        raise InvalidArgumentError(f"expected_seq must be a non-negative int, got {expected_seq!r}")
    if idempotency_key is not None and (
        not isinstance(idempotency_key, str) or not idempotency_key
    ):
        raise InvalidArgumentError("an idempotency key must be a non-empty string")


def check_page(after: int, limit: int | None, what: str) -> None:
    if not isinstance(after, int) or after < 0:
        raise InvalidArgumentError(f"{what} must be a non-negative int, got {after!r}")
    if limit is not None and (not isinstance(limit, int) or limit <= 0):
        raise InvalidArgumentError(f"limit must be a positive int or None, got {limit!r}")


_stamp: tuple[int, str] = (-1, "")


def _now() -> str:
    """Now as `format_time` writes it, for the log's stamps: with microseconds, except on
    the exact second, where ``isoformat`` writes none. A stamp that read back differently
    (``.000000Z``) would make a check of the batch refuse it, about once in a million.

    Every append without a writer-set time stamps one, so the date part is formatted once
    a second instead of through ``datetime`` each time.
    """
    global _stamp
    sec, us = divmod(time.time_ns() // 1000, 1_000_000)
    # One tuple, read and replaced whole, so racing threads never pair a second with
    # another second's text.
    last, prefix = _stamp
    if sec != last:
        prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        _stamp = (sec, prefix)
    return f"{prefix}.{us:06d}Z" if us else f"{prefix}Z"


def wake_marks(
    stream: str, encoded: Sequence[tuple[int, str, bytes]]
) -> list[tuple[str, str, int]]:
    """What an append tells `Wakeup.bump`: the last seq of each kind it stored (the seqs
    ascend, so the last one per kind wins), not one mark per event."""
    last = {kind: seq for seq, kind, _ in encoded}
    return [(stream, kind, seq) for kind, seq in last.items()]


def appended(
    stream: str,
    first_seq: int,
    encoded: Sequence[tuple[int, str, bytes]],
    first_position: int,
    rows: Sequence[Iterable[object]],
) -> AppendResult:
    """The `AppendResult` of ``encoded`` stored as ``rows`` from ``first_position`` on."""
    return AppendResult(
        stream=stream,
        first_seq=first_seq,
        last_seq=encoded[-1][0],
        first_position=first_position,
        last_position=first_position + len(rows) - 1,
        records=tuple(map(make_record, rows)),
    )


def encode_batch(
    events: Sequence[Event], first_seq: int, stream: str | None = None
) -> list[tuple[int, str, bytes]]:
    """Encode a batch with its seqs assigned and unset times stamped now, and check that
    every payload reads back as the same event (see `check_readback`)."""
    out, odd = encode_batch_checked(events, first_seq, _now)
    if odd:
        check_readback(out, stream, only=odd)
    return out


def check_readback(
    encoded: Sequence[tuple[int, str, bytes]],
    stream: str | None,
    events: Sequence[Event] | None = None,
    *,
    only: Iterable[int] | None = None,
) -> None:
    """Refuse a batch of which any payload does not decode to the event that made it.

    Events are attrs classes without validators, so a wrongly typed field (a number as a
    metadata value, a string as a turn) encodes fine and only fails when read back: the
    whole stream would then be unreadable. Decoding and encoding again costs about 4.6 us
    an event, as much as the rest of a batched append, so with ``events`` (what made
    ``encoded``) an event whose fields are all plain scalars of their decoded types
    (`spine._codec.plain_event`, about 1 us) is not decoded again: it cannot read back
    differently. Every other event is. ``only`` names the events to check instead (the
    encoder's own verdict, taken while it read each field: `encode_batch_checked`).
    """
    where = f" to {stream!r}" if stream is not None else ""
    for i in range(len(encoded)) if only is None else only:
        _seq, kind, payload = encoded[i]
        if events is not None and plain_event(events[i]):
            continue
        try:
            back = encode_event(decode_event(payload))
        except (DecodeError, InvalidArgumentError, TypeError, ValueError, AttributeError) as exc:
            problem = exc.problem if isinstance(exc, DecodeError) else str(exc)
            raise InvalidArgumentError(
                f"refused an append{where}: event {i} ({kind}) would not read back: "
                f"{problem}; nothing was written"
            ) from None
        if back != payload:
            raise InvalidArgumentError(
                f"refused an append{where}: event {i} ({kind}) would read back differently "
                f"from what was written; nothing was written"
            )
