"""Seals made, stored and read back: a stream's range sealed and appended to that stream.

A seal is stored in the ``record`` mapping of a ``record.sealed`` event on the very stream it
seals, so the log is the seal store: seals replicate, export and replay with the events, and
a later seal covers the earlier seal events (an edit to an old seal is then found twice: its
signature fails, and the later seal sees a modified event). See docs/seal.md. The seal
itself is `spine._seal_record`; inclusion proofs are `spine._seal_proof`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import attrs
import orjson

from ._codec import format_time
from ._errors import InvalidArgumentError
from ._event import Event, Kind
from ._frontier import FRONTIER, frontier_at, parse_frontier
from ._ids import validate_session_id
from ._keys import SigningKey
from ._log import Log, Record
from ._merkle import merkle_root, row_leaf_hashes
from ._seal_errors import MalformedSealError, NothingToSealError, SealError
from ._seal_record import Seal, _int, signed_bytes

_PAGE = 5000

# -- making seals ------------------------------------------------------------------------


def compute_seal(
    stream: str,
    first: int,
    payloads: Sequence[bytes],
    key: SigningKey,
    *,
    time: datetime,
    versions: Sequence[int] | None = None,
) -> Seal:
    """Seal ``payloads`` as seqs ``first..first+len-1`` of ``stream`` (pure: reads no log).

    ``versions`` are the rows' stored schema versions (None: all 1); each leaf covers its
    row's version too (see `row_leaf_hash`)."""
    validate_session_id(stream)
    if not isinstance(key, SigningKey):
        raise InvalidArgumentError(f"sealing needs a SigningKey, not {type(key).__name__}")
    if not isinstance(first, int) or isinstance(first, bool) or first < 1:
        raise InvalidArgumentError(f"first must be a seq of at least 1, got {first!r}")
    if not payloads:
        raise NothingToSealError(stream, first, first - 1)
    leaves = row_leaf_hashes(payloads, versions)
    root = merkle_root(leaves)
    t = format_time(time)
    count = len(leaves)
    last = first + count - 1
    sig = key.sign(signed_bytes(stream, first, last, count, root, t, key.key_id))
    return Seal(
        stream=stream,
        first=first,
        last=last,
        count=count,
        root=root,
        time=t,
        key_id=key.key_id,
        signature=sig,
        leaves=b"".join(leaves),
    )


def read_range(log: Log, stream: str, first: int, last: int) -> list[Record]:
    """Records ``first..last`` of ``stream``, read in pages."""
    out: list[Record] = []
    after = first - 1
    while after < last:
        page = log.read(stream, after, min(_PAGE, last - after))
        if not page:
            break
        out.extend(page)
        after = page[-1].seq
    return out


#: The provenance an import stores right after the events it copied, as a
#: ``session.properties`` event: the stream they were exported from and how many there
#: were (``import.events``), so that their seals, which name that stream, verify here.
IMPORT_STREAM = "import.stream"
IMPORT_EVENTS = "import.events"


#: The imported prefixes of a stream: ``(stream they came from, N)`` per import, N rising
#: (a copy of a copy holds one per import).
Origins = tuple[tuple[str, int], ...]


def origin_in(records: Sequence[Record]) -> Origins:
    """``(original stream, N)`` for each import that copied seqs 1..N into these records,
    and each fork by reference that reads them from its parent: the provenance event (a
    ``session.properties`` with the import keys, or the fork's ``session.forked`` link) is
    at seq N + 1, where nothing written later can be. Empty for a stream that was never
    imported or forked."""
    found: list[tuple[str, int]] = []
    for r in records:
        if r.kind not in _ORIGIN_KINDS:
            continue
        try:
            d = orjson.loads(r.payload)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(d, dict):
            continue
        if r.kind == _FORKED:
            src, n = d.get("parent"), d.get("at")
            n = str(n) if isinstance(n, int) and not isinstance(n, bool) else None
        else:
            p = d.get("properties")
            if not isinstance(p, dict):
                continue
            src, n = p.get(IMPORT_STREAM), p.get(IMPORT_EVENTS)
        if not (isinstance(src, str) and src and isinstance(n, str) and n.isdigit()):
            continue
        if int(n) + 1 == r.seq:
            found.append((src, int(n)))
    return tuple(sorted(found, key=lambda o: o[1]))


_FORKED = str(Kind.SESSION_FORKED)
_ORIGIN_KINDS = (str(Kind.PROPERTIES), _FORKED)


def sealed_in(origins: Origins, seq: int, stream: str) -> str:
    """The stream a seal stored at ``seq`` names: the one its imported prefix came from."""
    for src, n in origins:
        if seq <= n:
            return src
    return stream


def import_origin(log: Log, stream: str) -> Origins:
    """`origin_in` over the stream's properties and fork events, read from ``log``."""
    return origin_in(_read_kind(log, stream, *_ORIGIN_KINDS))


def seals(log: Log, stream: str) -> list[Seal]:
    """Every seal stored on ``stream``, oldest first; a malformed one raises."""
    origin = import_origin(log, stream)
    out = []
    for r in _read_kind(log, stream, Kind.RECORD_SEALED):
        out.append(parse_seal_event(stream, r, origin))
    return out


def _read_kind(log: Log, stream: str, *kinds: str) -> list[Record]:
    out: list[Record] = []
    after = 0
    while True:
        page = log.read(stream, after, _PAGE, kinds=kinds)
        if not page:
            return out
        out.extend(page)
        after = page[-1].seq


def parse_seal_event(stream: str, r: Record, origin: Origins = ()) -> Seal:
    """The seal stored in record ``r``, checked strictly (`MalformedSealError` if not).
    ``origin``: the stream's imported prefix (`origin_in`): a seal stored within it names
    the stream it was exported from.

    Besides the seal itself the event may hold nothing but its seq, time (equal to the
    seal's) and kind, so that no byte of even the newest, uncovered seal event can change
    unnoticed.
    """
    try:
        d = orjson.loads(r.payload)
    except orjson.JSONDecodeError as exc:
        raise MalformedSealError(f"the event is not JSON ({exc})", seq=r.seq) from None
    if not isinstance(d, dict):
        raise MalformedSealError("the event is not a JSON object", seq=r.seq)
    extra = set(d) - {"seq", "time", "kind", "record", FRONTIER}
    if extra:
        raise MalformedSealError(f"the event has unexpected field(s) {sorted(extra)}", seq=r.seq)
    if d.get("kind") != Kind.RECORD_SEALED:
        raise MalformedSealError(f"the event's kind is {d.get('kind')!r}", seq=r.seq)
    if _int(d.get("seq")) is None:
        raise MalformedSealError("the event has no integer seq", seq=r.seq)
    record = d.get("record")
    if not isinstance(record, dict):
        raise MalformedSealError("the event has no record object", seq=r.seq)
    named = sealed_in(origin, r.seq, stream)
    seal = Seal.from_record(record, stream=named, seq=r.seq)
    if d.get("time") != seal.time:
        raise MalformedSealError("the event's time differs from the seal's time", seq=r.seq)
    try:
        frontier = parse_frontier(d, seal.last)
    except ValueError as exc:
        raise MalformedSealError(str(exc), seq=r.seq) from None
    return seal if frontier is None else attrs.evolve(seal, frontier=frontier.peaks())


def next_unsealed(log: Log, stream: str) -> int:
    """The first seq after the newest seal's range (1 when nothing is sealed)."""
    records = _read_kind(log, stream, Kind.RECORD_SEALED)
    if not records:
        return 1
    return parse_seal_event(stream, records[-1], import_origin(log, stream)).last + 1


def prepare_seal(
    log: Log,
    stream: str,
    key: SigningKey,
    *,
    first: int | None = None,
    last: int | None = None,
    time: datetime | None = None,
) -> Seal:
    """The seal of seqs ``first..last`` of ``stream``, computed and signed but not stored.

    ``first`` defaults to the seq after the newest seal's range (so successive seals cover
    what is new, including the previous seal event), ``last`` to the stream's last seq,
    ``time`` to now. The stream's writer appends ``Event(kind=record.sealed, time=time,
    record=seal.to_record())`` itself; `seal_stream` does both for a caller that owns the
    stream. `NothingToSealError` when the range is empty.
    """
    validate_session_id(stream)
    end = log.last_seq(stream)
    lo = next_unsealed(log, stream) if first is None else first
    hi = end if last is None else last
    for name, v in (("first", first), ("last", last)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise InvalidArgumentError(f"{name} must be a seq of at least 1, got {v!r}")
    if hi < lo:
        raise NothingToSealError(stream, lo, hi)
    if hi > end:
        raise InvalidArgumentError(
            f"cannot seal up to seq {hi}: stream {stream!r} ends at seq {end}"
        )
    records = read_range(log, stream, lo, hi)
    if [r.seq for r in records] != list(range(lo, hi + 1)):
        bad = next((lo + i for i, r in enumerate(records) if r.seq != lo + i), lo + len(records))
        raise SealError(
            f"stream {stream!r} is not contiguous at seq {bad}; refusing to seal a damaged range"
        )
    when = datetime.now(UTC) if time is None else time
    seal = compute_seal(
        stream,
        lo,
        [r.payload for r in records],
        key,
        time=when,
        versions=[r.version for r in records],
    )
    # The frontier up to the seal's first seq is the previous seal's, mostly: cheap.
    frontier = frontier_at(log, stream, lo - 1)
    frontier.extend(seal.leaf_list())
    return attrs.evolve(seal, frontier=frontier.peaks())


def seal_event(seal: Seal) -> Event:
    """The ``record.sealed`` event that stores ``seal`` (its time is the seal's own)."""
    extra = {FRONTIER: [h.hex() for h in seal.frontier]} if seal.frontier else {}
    return Event(
        kind=Kind.RECORD_SEALED,
        time=datetime.fromisoformat(seal.time),
        record=seal.to_record(),
        extra=extra,
    )


def seal_stream(
    log: Log,
    stream: str,
    key: SigningKey,
    *,
    first: int | None = None,
    last: int | None = None,
    time: datetime | None = None,
    expected_seq: int | None = None,
) -> Seal:
    """Seal seqs ``first..last`` of ``stream`` (see `prepare_seal`) and append the
    ``record.sealed`` event. ``expected_seq`` is passed to the append (the seal event
    then lands only if nothing else was appended meanwhile). Returns the stored seal.
    """
    s = prepare_seal(log, stream, key, first=first, last=last, time=time)
    res = log.append(stream, [seal_event(s)], expected_seq=expected_seq)
    return attrs.evolve(s, seq=res.first_seq)
