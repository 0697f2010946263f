"""The behaviour every `Log` backend owes its callers, as pytest classes to subclass.

A backend's test module subclasses `LogContract` (and `DurableLogContract` when another
process can open the same log, `LeaseContract` when it fences writers) and implements
`new_log` (and `reopen`, `opener`); every test here then runs against it. This is how
vertebra tests its own backends, and how a third-party backend proves itself::

    from spine.testing import DurableLogContract

    class TestMyLog(DurableLogContract):
        def new_log(self, tmp_path):
            return MyLog(...)

`postgres_cluster` starts a throwaway PostgreSQL server (when its binaries are installed)
and `fresh_schema` gives each test an empty schema in one, for backends that need a server.
Importing this package needs pytest (the ``test`` extra). The contracts are composed in
`log_contract` from `appends` and `reads`; `durable` and `leases` add to them, `postgres`
holds the server, `events` the small helpers.
"""

from .durable import DurableLogContract
from .events import WAIT, ev, snapshot, texts
from .leases import LeaseContract
from .log_contract import LogContract, check_concurrent_outcome
from .postgres import PG_BIN_DIRS, fresh_schema, postgres_bin_dir, postgres_cluster

__all__ = [
    "PG_BIN_DIRS",
    "WAIT",
    "DurableLogContract",
    "LeaseContract",
    "LogContract",
    "check_concurrent_outcome",
    "ev",
    "fresh_schema",
    "postgres_bin_dir",
    "postgres_cluster",
    "snapshot",
    "texts",
]
