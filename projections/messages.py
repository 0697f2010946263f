"""Messages of the projection actor (frozen attrs, module level, so they pickle).

Commands are imperative, replies end in ``Reply``; `Rebuilding` tells a query that no
complete state exists yet. Every reply carries the reducer's `Progress`.

Every request carries a ``request_id`` that its replies echo (the actor layer's protocol
does the same), so a caller matches replies by id whatever else arrives meanwhile; a
request that cannot be served is answered `ProjectionFailed` with the same id. The id
defaults to "" for senders that do not care (the Runner's start, a test).
"""

from __future__ import annotations

import attrs

from ._index import SessionInfo, SessionsIndex
from ._policy import Fail, FailurePolicy
from ._reducer import DEFAULT_BATCH, DEFAULT_REBUILD_COMMIT, Progress
from ._status import Projection

#: How often the actor re-reads the log when no wake arrives (the seed's subscriber floor).
DEFAULT_POLL_FLOOR = 0.25


@attrs.frozen(kw_only=True)
class StartProjection:
    """Open the log and the checkpoint file and start folding; answered by `StartedReply`.

    ``log_path`` is the spine (a `spine.LogSpec` URL or a SQLite file path),
    ``checkpoint_path`` where the reducer checkpoints (a `spine.open_checkpoints`
    location, such as `spine.checkpoints_at` gives: its own SQLite file, or the spine's
    PostgreSQL URL to checkpoint into tables of the same database). A
    ``version`` other than the default forces the code version (tests use it to trigger
    the automatic rebuild). Sending it again with the same paths only answers.
    """

    request_id: str = ""
    log_path: str
    checkpoint_path: str
    policy: FailurePolicy = attrs.field(factory=Fail)
    batch: int = DEFAULT_BATCH
    rebuild_commit_every: int = DEFAULT_REBUILD_COMMIT
    poll_floor: float = DEFAULT_POLL_FLOOR
    version: str | None = None


@attrs.frozen(kw_only=True)
class StartedReply:
    request_id: str = ""
    progress: Progress
    pid: int


@attrs.frozen
class Wake:
    """A hint that the log has new events: fold now rather than at the next poll."""


@attrs.frozen(kw_only=True)
class QueryStatus:
    """Ask for one session's status; answered by `StatusReply` or `Rebuilding`."""

    request_id: str = ""
    session: str


@attrs.frozen(kw_only=True)
class StatusReply:
    """The session's status and index entry (both ``None`` for an unknown session),
    from the last complete state; ``progress.stale`` when a rebuild is replacing it."""

    request_id: str = ""
    session: str
    status: Projection | None
    info: SessionInfo | None
    progress: Progress


@attrs.frozen(kw_only=True)
class QueryIndex:
    """Ask for the sessions index; answered by `IndexReply` or `Rebuilding`."""

    request_id: str = ""


@attrs.frozen(kw_only=True)
class IndexReply:
    request_id: str = ""
    index: SessionsIndex
    progress: Progress


@attrs.frozen(kw_only=True)
class Rebuilding:
    """No complete state exists yet (first build, or a rebuild from an empty checkpoint)."""

    request_id: str = ""
    progress: Progress


@attrs.frozen(kw_only=True)
class Rebuild:
    """Drop the state and fold from position 0. Answered by `RebuildStartedReply`; the
    sender then gets `RebuildProgress` as it goes and `RebuildCompleted` at the end, all
    with this request's id."""

    request_id: str = ""


@attrs.frozen(kw_only=True)
class RebuildStartedReply:
    request_id: str = ""
    progress: Progress


@attrs.frozen(kw_only=True)
class RebuildProgress:
    request_id: str = ""
    progress: Progress


@attrs.frozen(kw_only=True)
class RebuildCompleted:
    request_id: str = ""
    progress: Progress
    seconds: float


@attrs.frozen(kw_only=True)
class QueryProgress:
    """Ask where the reducer stands; answered by `ProgressReply`."""

    request_id: str = ""


@attrs.frozen(kw_only=True)
class ProgressReply:
    request_id: str = ""
    progress: Progress
    pid: int


@attrs.frozen(kw_only=True)
class ProjectionFailed:
    """The request with ``request_id`` could not be served (not started, or the log cannot
    be opened): the projection's counterpart of the actor layer's ``RequestFailed``."""

    request_id: str = ""
    reason: str


@attrs.frozen
class FoldMore:
    """The actor's note to itself to fold the next page, so queries interleave."""
