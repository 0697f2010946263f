"""The spine: vertebra's durable, ordered event log and its catch-up subscriptions.

It imports neither ``actors`` nor ``projections``.
"""

from ._backends import BACKENDS, Backend
from ._checkpoints import CheckpointStore, Generation
from ._codec import (
    SCHEMA_VERSION,
    converter,
    decode_event,
    encode_event,
    event_from_dict,
    event_to_dict,
    format_time,
    register_upcaster,
)
from ._errors import (
    CheckpointBusyError,
    CheckpointError,
    ConflictError,
    DecodeError,
    FencedError,
    InvalidArgumentError,
    InvalidStreamIdError,
    SpineError,
    StorageError,
    SubscriptionClosedError,
    UnavailableError,
)
from ._event import EPHEMERAL_KINDS, Event, Kind, Phase, Severity, Usage
from ._frozen import FrozenDict, FrozenList
from ._ids import new_session_id, validate_session_id
from ._lifecycle import REVIVING_PHASES, TERMINAL_PHASES, terminal_after
from ._log import DEFAULT_PAGE, AppendResult, Log, Record, Row, StreamInfo, Wakeup
from ._memory import MemoryLog
from ._private import UnsafeDataDirError, private_dir, private_file, private_sqlite
from ._recover import LOST_KIND, LostRow, RecoveryReport, recover_sqlite
from ._snapshots import Snapshot, SnapshotStore
from ._spec import (
    DURABILITY,
    LogSpec,
    backend,
    checkpoints_at,
    load_backend,
    open_checkpoints,
    open_log,
    open_snapshots,
    snapshots_at,
)
from ._sqlite import SqliteLog
from ._sqlite_schema import connect_read_only
from ._subscribe import (
    DEFAULT_POLL_FLOOR,
    AllSubscription,
    StreamSubscription,
    history,
    subscribe,
    subscribe_all,
)

__all__ = [
    "BACKENDS",
    "DEFAULT_PAGE",
    "DEFAULT_POLL_FLOOR",
    "DURABILITY",
    "EPHEMERAL_KINDS",
    "LOST_KIND",
    "REVIVING_PHASES",
    "SCHEMA_VERSION",
    "TERMINAL_PHASES",
    "AllSubscription",
    "AppendResult",
    "Backend",
    "CheckpointBusyError",
    "CheckpointError",
    "CheckpointStore",
    "ConflictError",
    "DecodeError",
    "Event",
    "FencedError",
    "FrozenDict",
    "FrozenList",
    "Generation",
    "InvalidArgumentError",
    "InvalidStreamIdError",
    "Kind",
    "Log",
    "LogSpec",
    "LostRow",
    "MemoryLog",
    "Phase",
    "Record",
    "RecoveryReport",
    "Row",
    "Severity",
    "Snapshot",
    "SnapshotStore",
    "SpineError",
    "SqliteLog",
    "StorageError",
    "StreamInfo",
    "StreamSubscription",
    "SubscriptionClosedError",
    "UnavailableError",
    "UnsafeDataDirError",
    "Usage",
    "Wakeup",
    "backend",
    "checkpoints_at",
    "connect_read_only",
    "converter",
    "decode_event",
    "encode_event",
    "event_from_dict",
    "event_to_dict",
    "format_time",
    "history",
    "load_backend",
    "new_session_id",
    "open_checkpoints",
    "open_log",
    "open_snapshots",
    "private_dir",
    "private_file",
    "private_sqlite",
    "recover_sqlite",
    "register_upcaster",
    "snapshots_at",
    "subscribe",
    "subscribe_all",
    "terminal_after",
    "validate_session_id",
]
