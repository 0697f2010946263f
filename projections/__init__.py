"""Projections: pure folds of the spine's events (imports only ``spine``).

`reduce`/`project` fold a session's events into its status (`Projection`); `Thread` is its
turn tree; `metadata_from` its properties; `SessionsIndex` lists every session; and
`StatusReducer` (wrapped by `ProjectionActor`) keeps all of them checkpointed over the
whole log. See docs/projections.md.
"""

from ._errors import CheckpointError, FoldError, ProjectionError
from ._fast import StatusFolder
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
    MODEL_MAX_OUTPUT_TOKENS,
    MODEL_NAME,
    MODEL_TEMPERATURE,
    MODEL_THINKING_LEVEL,
    ModelSettings,
    apply_properties,
    metadata_from,
    model_settings,
    reduce_metadata,
)
from ._policy import Fail, FailurePolicy, RetryThenFail, Skip
from ._reducer import (
    DEFAULT_BATCH,
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
from ._store import CheckpointStore, Generation
from ._thread import ACTIVATES, EDITS, REGENERATES, Thread, Turn, thread_from, turns

__all__ = [
    "ACTIVATES",
    "CLOSED",
    "DEFAULT_BATCH",
    "EDITS",
    "HANDLERS",
    "MAX_ACTIONS",
    "MAX_EGRESS",
    "MODEL_MAX_OUTPUT_TOKENS",
    "MODEL_NAME",
    "MODEL_TEMPERATURE",
    "MODEL_THINKING_LEVEL",
    "REGENERATES",
    "STATUS_VERSION",
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
    "Generation",
    "InfoFolder",
    "ModelSettings",
    "Outcome",
    "Progress",
    "Projection",
    "ProjectionError",
    "RecordState",
    "RetryThenFail",
    "SessionInfo",
    "SessionsIndex",
    "Skip",
    "StatusFolder",
    "StatusReducer",
    "StepResult",
    "Thread",
    "Turn",
    "advance_record",
    "apply_properties",
    "index_from",
    "metadata_from",
    "model_settings",
    "new_projection",
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
