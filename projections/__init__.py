"""Projections: pure folds of the spine's events (imports only ``spine``).

`reduce`/`project` fold a session's events into its status (`Projection`); `Thread` is its
turn tree; `metadata_from` its properties; `SessionsIndex` lists every session; and
`StatusReducer` (wrapped by `ProjectionActor`) keeps all of them checkpointed over the
whole log. See docs/projections.md.
"""

from ._checkpoints import CheckpointStore, Generation
from ._errors import CheckpointError, FoldError, ProjectionError
from ._index import (
    CLOSED,
    InfoFolder,
    SessionInfo,
    SessionsIndex,
    index_from,
    reduce_index,
    reduce_info,
)
from ._metadata import (
    LEGACY_PREFIX,
    MODEL_MAX_OUTPUT_TOKENS,
    MODEL_NAME,
    MODEL_TEMPERATURE,
    MODEL_THINKING_LEVEL,
    PARSERS,
    THINKING_LEVELS,
    ModelSettings,
    SettingsError,
    apply_properties,
    metadata_from,
    model_settings,
    model_value,
    parse_max_tokens,
    parse_temperature,
    parse_thinking,
    reduce_metadata,
)
from ._policy import Fail, FailurePolicy, RetryThenFail, Skip
from ._reader import LogReader, SqliteLogReader
from ._reducer import (
    DEFAULT_BATCH,
    DEFAULT_REBUILD_COMMIT,
    STATUS_VERSION,
    FailureInfo,
    Progress,
    StatusReducer,
    StepResult,
)
from ._status import (
    HANDLERS,
    MAX_ACTIONS,
    MAX_EGRESS,
    ActionEntry,
    ActionState,
    EgressEntry,
    FanoutChild,
    FanoutState,
    Outcome,
    Projection,
    RecordState,
    advance_record,
    new_projection,
    project,
    record_rank,
    reduce,
    verification_passed,
)
from ._status_rows import StatusFolder
from ._thread import ACTIVATES, EDITS, REGENERATES, Thread, Turn, thread_from, turns
from .messages import (
    DEFAULT_POLL_FLOOR,
    FoldMore,
    IndexReply,
    ProgressReply,
    ProjectionFailed,
    QueryIndex,
    QueryProgress,
    QueryStatus,
    Rebuild,
    RebuildCompleted,
    Rebuilding,
    RebuildProgress,
    RebuildStartedReply,
    StartedReply,
    StartProjection,
    StatusReply,
    Wake,
)

__all__ = [
    "ACTIVATES",
    "CLOSED",
    "DEFAULT_BATCH",
    "DEFAULT_POLL_FLOOR",
    "DEFAULT_REBUILD_COMMIT",
    "EDITS",
    "HANDLERS",
    "LEGACY_PREFIX",
    "MAX_ACTIONS",
    "MAX_EGRESS",
    "MODEL_MAX_OUTPUT_TOKENS",
    "MODEL_NAME",
    "MODEL_TEMPERATURE",
    "MODEL_THINKING_LEVEL",
    "PARSERS",
    "REGENERATES",
    "STATUS_VERSION",
    "THINKING_LEVELS",
    "ActionEntry",
    "ActionState",
    "CheckpointError",
    "CheckpointStore",
    "EgressEntry",
    "Fail",
    "FailureInfo",
    "FailurePolicy",
    "FanoutChild",
    "FanoutState",
    "FoldError",
    "FoldMore",
    "Generation",
    "IndexReply",
    "InfoFolder",
    "LogReader",
    "ModelSettings",
    "Outcome",
    "Progress",
    "ProgressReply",
    "Projection",
    "ProjectionActor",
    "ProjectionError",
    "ProjectionFailed",
    "QueryIndex",
    "QueryProgress",
    "QueryStatus",
    "Rebuild",
    "RebuildCompleted",
    "RebuildProgress",
    "RebuildStartedReply",
    "Rebuilding",
    "RecordState",
    "RetryThenFail",
    "SessionInfo",
    "SessionsIndex",
    "SettingsError",
    "Skip",
    "SqliteLogReader",
    "StartProjection",
    "StartedReply",
    "StatusFolder",
    "StatusReducer",
    "StatusReply",
    "StepResult",
    "Thread",
    "Turn",
    "Wake",
    "advance_record",
    "apply_properties",
    "index_from",
    "metadata_from",
    "model_settings",
    "model_value",
    "new_projection",
    "parse_max_tokens",
    "parse_temperature",
    "parse_thinking",
    "project",
    "record_rank",
    "reduce",
    "reduce_index",
    "reduce_info",
    "reduce_metadata",
    "thread_from",
    "turns",
    "verification_passed",
]


def __getattr__(name: str) -> object:
    # The actor pulls in Thespian; the folds, the reducer and the metadata parsers (which
    # the session's pure decisions use) should not.
    if name == "ProjectionActor":
        from ._actor import ProjectionActor

        return ProjectionActor
    raise AttributeError(f"module 'projections' has no attribute {name!r}")
