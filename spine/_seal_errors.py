"""Errors of sealing, keys, proofs and bundles; all are `SpineError`s."""

from __future__ import annotations

from ._errors import InvalidArgumentError, SpineError


class SealError(SpineError):
    """Base of every error raised by `spine.seal`."""


class NothingToSealError(SealError, InvalidArgumentError):
    """The requested range holds no events (or lies beyond the end of the stream)."""

    def __init__(self, stream: str, first: int, last: int) -> None:
        super().__init__(
            f"nothing to seal in stream {stream!r}: seq range {first}..{last} is empty"
        )
        self.stream = stream
        self.first = first
        self.last = last


class MalformedSealError(SealError):
    """A seal description (a record.sealed event's ``record``) is not a well-formed seal."""

    def __init__(self, problem: str, *, seq: int | None = None) -> None:
        where = f" at seq {seq}" if seq is not None else ""
        super().__init__(f"malformed seal{where}: {problem}")
        self.problem = problem
        self.seq = seq


class KeyStoreError(SealError):
    """The key directory is missing, unreadable, too permissive or holds a bad key file."""


class UnknownKeyError(SealError):
    """No public key with the requested key id is known."""

    def __init__(self, key_id: str) -> None:
        super().__init__(f"no public key with key id {key_id!r} is known")
        self.key_id = key_id


class InclusionError(SealError):
    """An inclusion proof does not prove its event is in the signed tree."""


class BundleError(SealError):
    """A bundle file cannot be read as a seal bundle (not a tamper finding: a broken file)."""
