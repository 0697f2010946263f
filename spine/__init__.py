"""The spine: vertebra's durable, ordered event log and its catch-up subscriptions.

It imports neither ``actors`` nor ``projections``.
"""

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
    ConflictError,
    DecodeError,
    FencedError,
    InvalidArgumentError,
    InvalidStreamIdError,
    SpineError,
    StorageError,
    SubscriptionClosedError,
)
from ._event import EPHEMERAL_KINDS, Event, Kind, Phase, Severity, Usage
from ._frozen import FrozenDict, FrozenList
from ._ids import new_session_id, validate_session_id
from ._lifecycle import REVIVING_PHASES, TERMINAL_PHASES, terminal_after
from ._log import DEFAULT_PAGE, AppendResult, Log, Record, Row, StreamInfo, Wakeup
from ._memory import MemoryLog
from ._private import UnsafeDataDirError, private_dir, private_file, private_sqlite
from ._recover import LOST_KIND, LostRow, RecoveryReport, recover_sqlite
from ._spec import LogSpec, load_backend, open_log
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
    "DEFAULT_PAGE",
    "DEFAULT_POLL_FLOOR",
    "EPHEMERAL_KINDS",
    "LOST_KIND",
    "REVIVING_PHASES",
    "SCHEMA_VERSION",
    "TERMINAL_PHASES",
    "AllSubscription",
    "AppendResult",
    "ConflictError",
    "DecodeError",
    "Event",
    "FencedError",
    "FrozenDict",
    "FrozenList",
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
    "SpineError",
    "SqliteLog",
    "StorageError",
    "StreamInfo",
    "StreamSubscription",
    "SubscriptionClosedError",
    "UnsafeDataDirError",
    "Usage",
    "Wakeup",
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
    "open_log",
    "private_dir",
    "private_file",
    "private_sqlite",
    "recover_sqlite",
    "register_upcaster",
    "subscribe",
    "subscribe_all",
    "terminal_after",
    "validate_session_id",
]
