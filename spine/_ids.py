"""Session ids: fresh UUIDv7 by default, caller-chosen ids checked as bus-subject tokens."""

from __future__ import annotations

import functools
import os
import threading
import time
import uuid

from ._errors import InvalidStreamIdError

_lock = threading.Lock()
_last_ms = 0
_counter = 0

_MAX_LEN = 200


def new_session_id() -> str:
    """Return a fresh UUIDv7: time-ordered, globally unique, stable once chosen.

    Within one millisecond a 12-bit counter keeps ids from one process strictly increasing.
    """
    global _last_ms, _counter
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            _counter += 1
            if _counter > 0xFFF:
                # Borrow the next millisecond rather than wrap and break the ordering.
                _last_ms += 1
                _counter = 0
            ms = _last_ms
        else:
            _last_ms = ms
            _counter = int.from_bytes(os.urandom(2), "big") & 0x3FF
        counter = _counter
    rand = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= counter << 64
    value |= 0b10 << 62
    value |= rand
    return str(uuid.UUID(int=value))


def validate_session_id(stream: str) -> str:
    """Return ``stream`` if it is a usable session id, else raise `InvalidStreamIdError`.

    An id names a stream and a bus subject token, so it may not be empty, nor hold
    whitespace, dots or the wildcards ``*`` and ``>``.
    """
    if not isinstance(stream, str):
        raise InvalidStreamIdError(repr(stream), "a session id must be a string")
    _check(stream)
    return stream


# Every append and subscription checks its id; a session appends under the same id many
# times, and the character scan would otherwise cost a single-event append a few percent.
# Only valid ids are remembered: a refusal raises, which the cache does not keep.
@functools.lru_cache(maxsize=4096)
def _check(stream: str) -> None:
    if not stream:
        raise InvalidStreamIdError(stream, "it is empty")
    if len(stream) > _MAX_LEN:
        raise InvalidStreamIdError(stream, f"it is longer than {_MAX_LEN} characters")
    for ch in stream:
        if ch.isspace():
            raise InvalidStreamIdError(stream, "it contains whitespace")
        if ch == ".":
            raise InvalidStreamIdError(stream, "it contains a dot")
        if ch in "*>":
            raise InvalidStreamIdError(stream, f"it contains the wildcard {ch!r}")
        if not ch.isprintable():
            raise InvalidStreamIdError(stream, "it contains a control character")
