"""Events pushed out of the runtime: subscriptions to one session and sinks of every
session's live events, the requests that open and close them, and the batches they get."""

from __future__ import annotations

import attrs

from .converters import _tuple

# -- subscriptions -------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Subscribe:
    """Push this session's events after ``after_seq`` to the sender, then live.

    The session answers `SubscribeReply`, then sends `EventBatch` messages in seq order,
    exactly once, until `Unsubscribe` or the session closes (a final batch has
    ``closed=True``).
    """

    request_id: str
    session_id: str
    after_seq: int = 0
    kinds: tuple[str, ...] = attrs.field(factory=tuple, converter=_tuple)


@attrs.frozen(kw_only=True)
class Unsubscribe:
    request_id: str
    session_id: str
    subscription_id: str


@attrs.frozen(kw_only=True)
class SubscribeReply:
    request_id: str
    session_id: str
    subscription_id: str


# -- sinks ---------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class AddSink:
    """Register the sender as a sink for live events of every session (kinds empty = all)."""

    request_id: str
    kinds: tuple[str, ...] = attrs.field(factory=tuple, converter=_tuple)
    max_pending: int = 1000


@attrs.frozen(kw_only=True)
class RemoveSink:
    request_id: str
    sink_id: str


@attrs.frozen(kw_only=True)
class SinkReply:
    request_id: str
    sink_id: str


# -- pushed to subscribers and sinks -------------------------------------------------------


@attrs.frozen(kw_only=True)
class EventBatch:
    """Stored events of one session as (seq, kind, raw JSON payload), in seq order.

    Raw bytes cross process boundaries far cheaper than event objects; decode with
    `spine.decode_event` at the edge.
    """

    session_id: str
    subscription_id: str = ""
    records: tuple[tuple[int, str, bytes], ...] = attrs.field(factory=tuple, converter=_tuple)
    closed: bool = False
    # 1, 2, 3, ... per subscription: Thespian may deliver two batches in flight to one
    # target out of order, so a receiver reorders by this (`actors.host.BatchOrder`).
    # 0 means unnumbered.
    batch: int = 0


@attrs.frozen(kw_only=True)
class SinkBatch:
    """What a sink receives: stored events as (seq, kind, payload) and ephemeral items.

    ``live`` holds ephemeral items (notices, streamed text deltas) as
    ``(after_seq, kind, severity-or-empty, text)``: an item belongs after stored record
    ``after_seq`` and before ``after_seq + 1``, so a consumer merging ``records`` and
    ``live`` by seq delivers notices in the order they were produced relative to stored
    events (items with the same ``after_seq`` keep their order). A sink answers each batch
    with `SinkAck`; a sink with ``max_pending`` unacknowledged batches gets no more until it
    catches up (the batches it misses are counted as drops; `Subscribe` is the exact-replay
    path).
    """

    session_id: str
    sink_id: str = ""
    records: tuple[tuple[int, str, bytes], ...] = attrs.field(factory=tuple, converter=_tuple)
    live: tuple[tuple[int, str, str, str], ...] = attrs.field(factory=tuple, converter=_tuple)


@attrs.frozen(kw_only=True)
class SinkAck:
    """A sink's acknowledgement of ``count`` batches."""

    sink_id: str
    count: int = 1
