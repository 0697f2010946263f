"""Sealing what is new in a session's stream and verifying its seals: requests and replies."""

from __future__ import annotations

import attrs


@attrs.frozen(kw_only=True)
class SealSession:
    """Seal what is new in the session's stream (a signed Merkle root, `spine.seal`).

    The session itself appends the ``record.sealed`` event: it is its stream's only writer.
    """

    request_id: str
    session_id: str


@attrs.frozen(kw_only=True)
class VerifySession:
    """Verify every seal of the session's stream and append ``record.verified`` with the
    outcome (pass or failure, so a replay reproduces the record badge). A failure names
    what failed and where."""

    request_id: str
    session_id: str


@attrs.frozen(kw_only=True)
class SealReply:
    """``seq`` is where the seal event is stored; 0 when there was nothing new to seal."""

    request_id: str
    session_id: str
    seq: int
    first: int = 0
    last: int = 0
    root: str = ""
    key_id: str = ""


@attrs.frozen(kw_only=True)
class VerifyReply:
    """``ok`` and a one-line ``summary``; ``seq`` is the record.verified event (0 if none)."""

    request_id: str
    session_id: str
    ok: bool
    summary: str
    seq: int = 0
