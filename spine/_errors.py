"""The spine's exception tree: misuse (bad arguments) apart from runtime conditions."""

from __future__ import annotations


class SpineError(Exception):
    """Base of every error the spine raises."""


class InvalidArgumentError(SpineError, ValueError):
    """The caller passed something the spine refuses (misuse, not a runtime condition)."""


class InvalidStreamIdError(InvalidArgumentError):
    """A stream (session) id is empty or holds whitespace, dots or wildcards."""

    def __init__(self, stream: str, problem: str) -> None:
        super().__init__(f"invalid session id {stream!r}: {problem}")
        self.stream = stream
        self.problem = problem


class ConflictError(SpineError):
    """An append's expected last seq did not match the stream's actual last seq."""

    def __init__(self, stream: str, expected_seq: int, actual_seq: int) -> None:
        super().__init__(
            f"append conflict on stream {stream!r}: expected last seq {expected_seq}, "
            f"actual {actual_seq}"
        )
        self.stream = stream
        self.expected_seq = expected_seq
        self.actual_seq = actual_seq


class DecodeError(SpineError):
    """Stored or incoming JSON could not be read as an event."""

    def __init__(self, problem: str, *, stream: str | None = None, seq: int | None = None) -> None:
        where = []
        if stream is not None:
            where.append(f"stream {stream!r}")
        if seq is not None:
            where.append(f"seq {seq}")
        prefix = f"malformed event at {', '.join(where)}: " if where else "malformed event: "
        super().__init__(prefix + problem)
        self.stream = stream
        self.seq = seq
        self.problem = problem


class SubscriptionClosedError(SpineError):
    """A read from a subscription that was closed."""


class StorageError(SpineError):
    """The backing store failed or holds data that breaks the log's invariants."""


class UnavailableError(StorageError):
    """The backing store cannot be reached (its server is down, the connection broke).

    A runtime condition that passes: the call may be made again later. An append that
    raised it may still have committed if the break raced its commit, so it is repeated
    only under its idempotency key or its expected seq, which make a second try of a
    stored batch a duplicate or a conflict, never a second copy."""


class FencedError(ConflictError):
    """An append by a writer whose lease on the stream was taken over by another writer
    (a newer epoch): a stale session on a partitioned host must not write.

    A conflict with another writer, so a caller that stops on a `ConflictError` (a stale
    session incarnation) stops on this too; ``expected_seq`` and ``actual_seq`` are -1
    (no seq was compared)."""

    def __init__(self, stream: str, held_epoch: int, current_epoch: int) -> None:
        SpineError.__init__(
            self,
            f"append to {stream!r} refused: this writer holds lease epoch {held_epoch}, "
            f"the stream's lease is at epoch {current_epoch}",
        )
        self.stream = stream
        self.expected_seq = -1
        self.actual_seq = -1
        self.held_epoch = held_epoch
        self.current_epoch = current_epoch


class CheckpointError(StorageError):
    """A checkpoint store cannot be opened, read or written."""


class CheckpointBusyError(CheckpointError):
    """Another writer (a reducer on another host) holds these checkpoints; this one stands
    by and may try again later."""
