"""The JSON codec: the seed's field names, empty fields omitted, unknown ones preserved.

One cattrs converter (`converter`) is the public face; its Event hooks are written by hand
because replay speed is bounded by this code (see docs/performance.md). The field tables
and generated encoders are in `spine._codec_fields`, the decoding in `spine._codec_decode`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import cattrs
import orjson

from ._codec_decode import _from_dict, _raw_input, _wide_loads
from ._codec_fast import _MISS, _PLANS, _plan, fast_decode
from ._codec_fields import _fill, encode_checked, plain_event, usage_from_dict, usage_to_dict
from ._errors import DecodeError, InvalidArgumentError
from ._event import Event, Usage

__all__ = [
    "SCHEMA_VERSION",
    "Upcaster",
    "converter",
    "decode_event",
    "decode_stored",
    "encode_batch_checked",
    "encode_event",
    "encode_events",
    "event_from_dict",
    "event_to_dict",
    "format_time",
    "plain_event",
    "register_upcaster",
    "upcast",
    "usage_from_dict",
    "usage_to_dict",
]

#: Version of the stored JSON shape. Stored rows carry the version they were written with;
#: older rows pass through the registered upcasters on read.
SCHEMA_VERSION = 1

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
_upcasters: dict[int, Upcaster] = {}


def register_upcaster(from_version: int, fn: Upcaster) -> None:
    """Register ``fn`` to turn a stored dict of ``from_version`` into ``from_version + 1``."""
    if from_version >= SCHEMA_VERSION:
        raise InvalidArgumentError(
            f"an upcaster must start below the current schema version {SCHEMA_VERSION}"
        )
    _upcasters[from_version] = fn


def format_time(value: datetime) -> str:
    """RFC 3339 in UTC with a ``Z`` suffix, as the seed's Go ``time.Time`` writes it."""
    if value.tzinfo is None:
        raise InvalidArgumentError("event time must be timezone-aware (got a naive datetime)")
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def event_to_dict(ev: Event, *, seq: int | None = None, time: str | None = None) -> dict[str, Any]:
    """The event as a JSON-ready dict with the seed's names, empty fields omitted.

    ``input`` becomes an `orjson.Fragment` so the raw JSON text is embedded as is. ``seq``
    and ``time`` override the event's own (the log assigns them on append).
    """
    out: dict[str, Any] = {}
    if seq is not None:
        out["seq"] = seq
    elif ev.seq:
        out["seq"] = ev.seq
    if time is not None:
        out["time"] = time
    elif ev.time is not None:
        out["time"] = format_time(ev.time)
    return _fill(ev, out)


def encode_event(ev: Event, *, seq: int | None = None, time: str | None = None) -> bytes:
    """Serialize an event to its canonical JSON bytes (see `event_to_dict`)."""
    if not isinstance(ev.kind, str) or not ev.kind:
        raise InvalidArgumentError("an event needs a non-empty kind")
    try:
        return orjson.dumps(event_to_dict(ev, seq=seq, time=time))
    except TypeError as exc:
        raise InvalidArgumentError(f"event cannot be encoded as JSON: {exc}") from None


def encode_events(
    events: Sequence[Event], first_seq: int, now: Callable[[], str]
) -> list[tuple[int, str, bytes]]:
    """``(seq, kind, payload)`` for each event, seqs from ``first_seq``.

    Events without a time get ``now()`` (called at most once per batch). This is
    `encode_event` over a batch (`spine._codec_fields.encode_checked`, which also says
    which events are not `plain_event`): appends spend most of their Python time here.
    """
    return encode_batch_checked(events, first_seq, now)[0]


def encode_batch_checked(
    events: Sequence[Event], first_seq: int, now: Callable[[], str]
) -> tuple[list[tuple[int, str, bytes]], list[int]]:
    """`encode_events`, and the indices of the events that are not `plain_event` (those
    the read-back check must decode again)."""
    try:
        return encode_checked(events, first_seq, now, format_time)
    except TypeError as exc:
        raise InvalidArgumentError(f"event cannot be encoded as JSON: {exc}") from None


def event_from_dict(d: Any, *, stream: str | None = None, seq: int | None = None) -> Event:
    """Build an event from a decoded JSON object; unknown fields go to ``extra``.

    ``input`` here is a parsed value, so it is written back as compact JSON (an
    `orjson.Fragment`, as `event_to_dict` gives it, keeps its exact text). `decode_event`
    reads the text straight from the payload instead.
    """
    return _from_dict(d, stream, seq, None)


def decode_event(
    payload: bytes | str,
    *,
    stream: str | None = None,
    seq: int | None = None,
    version: int = SCHEMA_VERSION,
) -> Event:
    """Parse stored or incoming JSON into an `Event`, naming stream and seq on failure.

    ``input`` is read as the exact text the payload holds for it, never re-encoded.
    """
    if version == SCHEMA_VERSION and type(payload) is bytes:
        try:
            ev = fast_decode(orjson.loads(payload), payload, seq)
        except orjson.JSONDecodeError:
            ev = None
        if ev is not None:
            return ev
    return _decode_general(payload, stream, seq, version)


def decode_stored(rows: Iterable[tuple[int, int, bytes]], stream: str) -> list[Event]:
    """The events of stored ``(seq, version, payload)`` rows of ``stream``: `decode_event`
    over a page, its fast path inlined (a replay runs it once per stored event)."""
    out: list[Event] = []
    append, loads, plans, plan, miss = out.append, orjson.loads, _PLANS, _plan, _MISS
    for s, v, b in rows:
        ev = None
        if v == SCHEMA_VERSION and type(b) is bytes:
            try:
                d = loads(b)
                if type(d) is dict:
                    fn = plans.get(tuple(d), miss)
                    if fn is miss:
                        fn = plan(d)
                    if fn is not None:
                        ev = fn(d, b)
                        if ev.seq != s:
                            ev = None
            except Exception:  # the general path below names what is wrong
                ev = None
        append(ev if ev is not None else _decode_general(b, stream, s, v))
    return out


def _decode_general(
    payload: bytes | str, stream: str | None, seq: int | None, version: int
) -> Event:
    raw: str | None = None
    try:
        d = orjson.loads(payload)
        if type(d) is dict and "input" in d:
            b = payload.encode() if isinstance(payload, str) else payload
            raw = _raw_input(b, d)
            if raw is None:
                d, raw = _wide_loads(b.decode())
    except (orjson.JSONDecodeError, ValueError) as exc:
        try:
            text = payload.decode() if isinstance(payload, bytes) else payload
            d, raw = _wide_loads(text)
        except ValueError:
            raise DecodeError(f"invalid JSON ({exc})", stream=stream, seq=seq) from None
    if version != SCHEMA_VERSION:
        before = d.get("input") if type(d) is dict else None
        d = upcast(d, version, stream=stream, seq=seq)
        if raw is not None and (type(d) is not dict or d.get("input") is not before):
            # An upcaster rewrote the input: its parsed value is the truth now.
            raw = None
    ev = _from_dict(d, stream, seq, raw)
    if seq is not None and ev.seq != seq:
        raise DecodeError(
            f"payload carries seq {ev.seq} but is stored at seq {seq}", stream=stream, seq=seq
        )
    return ev


def upcast(
    d: Any, version: int, *, stream: str | None = None, seq: int | None = None
) -> dict[str, Any]:
    """Bring a stored dict of ``version`` up to `SCHEMA_VERSION` through the upcasters."""
    if version > SCHEMA_VERSION:
        # A newer writer: keep every field; unknown ones land in ``extra``.
        return d  # type: ignore[no-any-return]
    while version < SCHEMA_VERSION:
        fn = _upcasters.get(version)
        if fn is None:
            raise DecodeError(
                f"no upcaster registered from schema version {version}", stream=stream, seq=seq
            )
        d = fn(d)
        version += 1
    return d  # type: ignore[no-any-return]


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter()
    conv.register_unstructure_hook(Event, event_to_dict)
    conv.register_structure_hook(Event, lambda d, _t: event_from_dict(d))
    conv.register_unstructure_hook(Usage, usage_to_dict)
    conv.register_structure_hook(Usage, lambda d, _t: usage_from_dict(d))
    conv.register_unstructure_hook(datetime, format_time)
    conv.register_structure_hook(datetime, lambda v, _t: datetime.fromisoformat(v))
    return conv


#: The one converter for spine types; ``converter.unstructure(event)`` gives the seed's JSON
#: shape (with ``input`` as an `orjson.Fragment`), ``converter.structure(d, Event)`` reads it.
converter = _make_converter()
