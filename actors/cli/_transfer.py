"""Reading an export (`vertebra export` writes it): a header line, then one stored event
per line. Pure: it parses text and checks it, the command stores the result."""

from __future__ import annotations

import json
from collections.abc import Iterable

from spine import DecodeError, Event, Kind, decode_event


def read_export(lines: Iterable[str], fmt: str) -> tuple[str, list[Event]]:
    """The session id and events of an export; ValueError names the first problem (a
    wrong header, an undecodable line, a gap in the seqs, a count that does not match)."""
    sid, events, _ = read_export_keys(lines, fmt)
    return sid, events


def read_export_keys(lines: Iterable[str], fmt: str) -> tuple[str, list[Event], dict[str, str]]:
    """`read_export`, and the public keys (id to hex) that the header carries for the
    seals among the events: the import checks each against its id."""
    it = iter(lines)
    try:
        header = json.loads(next(it))
    except StopIteration:
        raise ValueError("empty file, not an export") from None
    except ValueError:
        raise ValueError("line 1 is not JSON: not an export") from None
    if not isinstance(header, dict) or header.get("format") != fmt:
        raise ValueError(f"line 1 is not a {fmt} header")
    sid = header.get("session")
    count = header.get("events")
    if not isinstance(sid, str) or not isinstance(count, int):
        raise ValueError("the header needs a session id and an event count")
    keys = header.get("keys", {})
    if not isinstance(keys, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in keys.items()
    ):
        raise ValueError("the header's keys must map key ids to public keys in hex")
    events: list[Event] = []
    for n, line in enumerate(it, start=2):
        if not line.strip():
            continue
        try:
            ev = decode_event(line.rstrip("\n"), stream=sid)
        except DecodeError as exc:
            raise ValueError(f"line {n}: {exc}") from None
        if ev.seq != len(events) + 1:
            raise ValueError(f"line {n}: seq {ev.seq} where {len(events) + 1} was due")
        events.append(ev)
    if len(events) != count:
        raise ValueError(f"the header announces {count} events, the file holds {len(events)}")
    if not events:
        raise ValueError("no events to import")
    return sid, events, dict(keys)


def provenance(source: str, events: list[Event], keys: dict[str, str], file: str) -> Event:
    """The event an import stores right after what it copied (see `spine.seal.IMPORT_STREAM`):
    where the events came from and which seals and keys came with them, so the copy's
    seals verify as the exporting stream's and the record says it is a copy."""
    from spine.seal import IMPORT_EVENTS, IMPORT_STREAM

    sealed = [e for e in events if e.kind == Kind.RECORD_SEALED]
    return Event(
        kind=Kind.PROPERTIES,
        properties={
            IMPORT_STREAM: source,
            IMPORT_EVENTS: str(len(events)),
            "import.seals": str(len(sealed)),
            "import.keys": ",".join(sorted(keys)),
            "import.file": file,
        },
    )


__all__ = ["provenance", "read_export", "read_export_keys"]
