"""Where an actor may run with several hosts: the capabilities a member host advertises
and the one check Thespian's capability-based placement asks. Pure, and on the ground
floor: the session (which only needs `fits`) and the Runner (which places sessions) both
read it, so neither imports the other."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["CAPACITY", "DATA", "HOST", "fits"]

#: The capability naming a member host (and the requirement naming where an actor goes).
HOST = "vertebra.host"
#: The capability saying how many sessions a member host should carry.
CAPACITY = "vertebra.capacity"
#: The capability naming a member's data directory (its logs and snapshots).
DATA = "vertebra.data"


def fits(capabilities: Mapping[str, Any], requirements: Mapping[str, Any] | None) -> bool:
    """Whether an actor with ``requirements`` may run on a system with ``capabilities``.

    Without a `HOST` requirement an actor runs where it is created (a single host, or the
    leader when no member is live); with one, only on the member of that name.
    """
    want = (requirements or {}).get(HOST)
    return want is None or capabilities.get(HOST) == want
