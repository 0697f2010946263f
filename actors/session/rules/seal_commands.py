"""The decider's seal commands (pure data): seal what is new, verify the stream, and the
shell's answers to both. Part of the vocabulary of `commands` (which names them in its
``Command``)."""

from __future__ import annotations

from datetime import datetime

import attrs

from spine.seal import Seal, VerifyReport

from ...terse import terse_module

__all__ = ["SealStream", "Sealed", "Verified", "VerifyStream"]


@attrs.frozen(kw_only=True)
class SealStream:
    """Seal what is new: the shell computes the seal (it reads the log and signs)."""

    request_id: str


@attrs.frozen(kw_only=True)
class Sealed:
    """The computed seal (None: nothing new to seal), for the session to append."""

    request_id: str
    seal: Seal | None


@attrs.frozen(kw_only=True)
class VerifyStream:
    request_id: str


@attrs.frozen(kw_only=True)
class Verified:
    """The verification's report, for the session to record as ``record.verified``."""

    request_id: str
    report: VerifyReport
    time: datetime


terse_module(globals())
