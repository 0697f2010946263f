"""Policies as values: what a session does with a message mid-turn, how the Runner
restarts a session that died, when a session seals and snapshots itself. Pure data, read
by the deciders, the registry and the session's shell."""

from __future__ import annotations

import enum
from collections.abc import Mapping

import attrs

from .errors import InvalidRequest

#: Metadata key that overrides the Runner's mid-turn policy for one session.
BUSY_POLICY_KEY = "session.busy_policy"


class BusyPolicy(enum.StrEnum):
    """What a session does with a user message that arrives while a turn runs."""

    #: Store it; its turn runs when the current one ends.
    ENQUEUE = "enqueue"
    #: Refuse it with `Rejected`; nothing is stored.
    REJECT = "reject"
    #: Cancel the running turn (``turn.cancelled``, reason superseded), then run this one.
    INTERRUPT = "interrupt"
    #: Store it as a steer and hand it to the running turn at its next safe point (after a
    #: tool batch has all its results, before the next model call): ``steer.delivered``.
    #: One that finds none is ``steer.dropped`` (then the next turn's message, or refused).
    #: With no turn running it is an ordinary message.
    STEER = "steer"

    @classmethod
    def parse(cls, value: str | BusyPolicy) -> BusyPolicy:
        """The policy named ``value``; `InvalidRequest` names the choices otherwise."""
        try:
            return cls(value)
        except ValueError:
            choices = ", ".join(p.value for p in cls)
            raise InvalidRequest(f"busy policy must be one of {choices}, not {value!r}") from None


@attrs.frozen(kw_only=True)
class RestartPolicy:
    """How the Runner brings back a session whose process died unasked.

    A session that dies more than ``max_restarts`` times within ``window`` seconds is
    marked failed. The first restart within the window starts at once (one crash, a
    SIGKILL or an OOM kill, is not a loop; waiting would only lengthen the outage); the
    n-th (n >= 2) waits ``min(backoff_max, backoff_initial * 2 ** (n - 2))`` seconds, so
    a crash loop backs off. Keyed ingress that was in
    flight through ``poison_after`` crashes is poison: it is answered with
    `PoisonMessageError` and recorded instead of delivered again.
    """

    max_restarts: int = attrs.field(default=5, validator=attrs.validators.ge(0))
    window: float = attrs.field(default=60.0, validator=attrs.validators.gt(0))
    backoff_initial: float = attrs.field(default=0.01, validator=attrs.validators.ge(0))
    backoff_max: float = attrs.field(default=2.0, validator=attrs.validators.ge(0))
    poison_after: int = attrs.field(default=2, validator=attrs.validators.ge(1))

    def recent(self, crashes: tuple[float, ...], now: float) -> tuple[float, ...]:
        """The crash times that still count at ``now``."""
        return tuple(t for t in crashes if now - t <= self.window)

    def exhausted(self, recent: int) -> bool:
        """Whether ``recent`` crashes within the window exceed the budget."""
        return recent > self.max_restarts

    def delay(self, recent: int) -> float:
        """Seconds to wait before the restart that follows ``recent`` crashes."""
        if recent <= 1:
            return 0.0
        return float(min(self.backoff_max, self.backoff_initial * 2 ** (recent - 2)))


#: Metadata keys that override the daemon's auto-seal policy for one session: seal once
#: this many events are unsealed ("0": never by count), and within this many seconds of
#: the first unsealed event ("0": never by time).
SEAL_EVERY_KEY = "vertebra.seal.every"
SEAL_INTERVAL_KEY = "vertebra.seal.interval"


@attrs.frozen(kw_only=True)
class SealPolicy:
    """When a session seals its own stream without being asked.

    A seal is due once ``every`` events are unsealed, or ``interval`` seconds after the
    first event that no seal covers yet; 0 turns either trigger off. Tampering after the
    newest seal cannot be detected (docs/seal.md), so this bounds that window. A
    session's metadata (`SEAL_EVERY_KEY`, `SEAL_INTERVAL_KEY`) overrides either value.
    """

    every: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    interval: float = attrs.field(default=0.0, validator=attrs.validators.ge(0))

    @property
    def enabled(self) -> bool:
        return bool(self.every or self.interval)

    def for_session(self, metadata: Mapping[str, str]) -> SealPolicy:
        """This policy with the session's own overrides (values that do not parse as a
        non-negative number are ignored)."""
        if SEAL_EVERY_KEY not in metadata and SEAL_INTERVAL_KEY not in metadata:
            return self
        every, interval = self.every, self.interval
        raw = metadata.get(SEAL_EVERY_KEY)
        if raw is not None and raw.strip().isdigit():
            every = int(raw)
        raw = metadata.get(SEAL_INTERVAL_KEY)
        if raw is not None:
            try:
                value = float(raw)
            except ValueError:
                value = -1.0
            if 0 <= value < float("inf"):
                interval = value
        return SealPolicy(every=every, interval=interval)


#: The daemon's default (``vertebra serve``): seal every 1000 events, and within a minute
#: of the first unsealed one. An embedding `Host` seals only when asked unless given one.
DAEMON_SEAL_POLICY = SealPolicy(every=1000, interval=60.0)


@attrs.frozen(kw_only=True)
class SnapshotPolicy:
    """When a session writes its snapshot: its folded state at a seq, a cache from which
    a restart folds only the events after it, so a first load costs the same at any
    length (docs/operations.md, "Snapshots").

    One is due once ``events`` events, or ``size`` bytes of stored payload, have been
    appended since the last one, whichever comes first; 0 turns that trigger off, both 0
    turns snapshots off. A load that had to fold more than that (a stream written by
    someone else: a fork, an import, the Runner, a version with another fold) writes one
    at once, so the next load is short again.
    """

    events: int = attrs.field(default=1000, validator=attrs.validators.ge(0))
    size: int = attrs.field(default=4 * 1024 * 1024, validator=attrs.validators.ge(0))

    def due(self, events: int, size: int = 0) -> bool:
        """Whether ``events`` events of ``size`` payload bytes past the last snapshot
        make one due."""
        return bool((self.events and events >= self.events) or (self.size and size >= self.size))
