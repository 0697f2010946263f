"""`MemberAgent`: the Runner's contact on a member host, answering heartbeats.

One agent per member, created by the Runner with the member's name as requirement, so
Thespian's capability-based placement puts it on that host. An answer proves the member's
actor system and the network path to it both work; a member whose agent goes silent is
declared dead by the Runner within seconds (see `actors.runner.rules.cluster`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from thespian.actors import ActorTypeDispatcher

from ...placement import fits
from ..protocol import Heartbeat, HeartbeatReply


class MemberAgent(ActorTypeDispatcher):  # type: ignore[misc]
    """Answers the Runner's heartbeats on the member host it was placed on."""

    @staticmethod
    def actorSystemCapabilityCheck(
        capabilities: Mapping[str, Any], requirements: Mapping[str, Any] | None
    ) -> bool:
        return fits(capabilities, requirements)

    def receiveMsg_Heartbeat(self, msg: Heartbeat, sender: Any) -> None:
        self.send(sender, HeartbeatReply(host=msg.host, beat=msg.beat))
