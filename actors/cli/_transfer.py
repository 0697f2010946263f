"""Reading an export (`vertebra export` writes it): a header line, then one stored event
per line. Pure: it parses text and checks it, the command stores the result."""

from __future__ import annotations

import json
from collections.abc import Iterable

from spine import DecodeError, Event, decode_event


def read_export(lines: Iterable[str], fmt: str) -> tuple[str, list[Event]]:
    """The session id and events of an export; ValueError names the first problem (a
    wrong header, an undecodable line, a gap in the seqs, a count that does not match)."""
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
    return sid, events


__all__ = ["read_export"]
