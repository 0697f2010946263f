"""`SnapshotStore`: a cache of each stream's folded state at a seq, as opaque bytes, so a
long stream restarts without folding from its start; each backend implements it
(`_backends`).

A snapshot is never the truth: it carries the seq it was folded to and the version of the
fold that wrote it, and the reader (the session) decides whether to use it. The store keeps
one snapshot per stream, the last one saved. What the bytes hold, and how a stale version is
recognised, is the caller's.
"""

from __future__ import annotations

import abc
from typing import Any

import attrs

from ._errors import InvalidArgumentError


def _check_body(_: object, __: object, body: Any) -> None:
    if not isinstance(body, bytes):
        raise InvalidArgumentError(f"a snapshot's body is bytes, got {type(body).__name__}")


def _size(body: bytes) -> str:
    return f"<{len(body)} bytes>"


@attrs.frozen
class Snapshot:
    """A stream's state folded up to ``seq`` by fold version ``version``, as bytes."""

    stream: str
    seq: int
    version: int
    body: bytes = attrs.field(validator=_check_body, repr=_size)


class SnapshotStore(abc.ABC):
    """Snapshots by stream id. Failures raise `StorageError`; a failed `save` leaves the
    stream's previous snapshot in place."""

    #: Where the store lives, for messages (a file path, or a URL without its password).
    path: str

    @abc.abstractmethod
    def load(self, stream: str) -> Snapshot | None:
        """The last snapshot saved for ``stream``, None if there is none."""

    @abc.abstractmethod
    def save(self, snapshot: Snapshot) -> None:
        """Store ``snapshot`` in place of its stream's previous one."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> SnapshotStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
