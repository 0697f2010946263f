"""The behaviour every `Log` backend owes its callers, as pytest classes to subclass.

A backend's test module subclasses `LogContract` (and `DurableLogContract` when another
process can open the same log, `LeaseContract` when it fences writers) and implements
`new_log` (and `reopen`, `opener`); every test here then runs against it. This is how
vertebra tests its own backends, and how a third-party backend proves itself::

    from spine.testing import DurableLogContract

    class TestMyLog(DurableLogContract):
        def new_log(self, tmp_path):
            return MyLog(...)

`CheckpointContract` and `SnapshotContract` do the same for a backend's checkpoint and
snapshot stores (`new_store`, and `reopen` for a fresh store at the same location).

`postgres_cluster` starts a throwaway PostgreSQL server (when its binaries are installed)
and `fresh_schema` gives each test an empty schema in one, for backends that need a server.
Importing this package needs pytest (the ``test`` extra). The contracts are composed in
`log_contract` from `appends` and `reads`; `durable` and `leases` add to them, `stores`
holds the store contracts, `postgres` the server, `events` the small helpers.
"""

from .durable import DurableLogContract
from .events import WAIT, ev, snapshot, texts
from .leases import LeaseContract
from .log_contract import LogContract, check_concurrent_outcome
from .postgres import PG_BIN_DIRS, fresh_schema, postgres_bin_dir, postgres_cluster
from .stores import CheckpointContract, SnapshotContract

__all__ = [
    "PG_BIN_DIRS",
    "WAIT",
    "CheckpointContract",
    "DurableLogContract",
    "LeaseContract",
    "LogContract",
    "SnapshotContract",
    "check_concurrent_outcome",
    "ev",
    "fresh_schema",
    "postgres_bin_dir",
    "postgres_cluster",
    "snapshot",
    "texts",
]
