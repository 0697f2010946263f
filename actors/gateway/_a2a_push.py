"""A2A push notifications to the operator's webhook: every pause (input required) and end
of a goal run is POSTed as the A2A task, read from the log, signed, retried.

The webhook is the operator's (``vertebra serve --a2a-webhook URL``, its secret in an
environment variable the operator names): a URL a caller chose would be a request the
daemon makes on a caller's say, so the protocol's per-task push configurations are not
taken. Delivery follows the log from a position kept in ``DATA/a2a-push.json``, saved after
each notification is delivered or given up, so a restart neither loses nor repeats one
that was settled; one cut off mid-delivery is sent again with the same
``X-Vertebra-Delivery`` id for the receiver to drop.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import threading
from typing import Any

import attrs
import httpx
from a2a.types import a2a_pb2 as pb
from google.protobuf.json_format import MessageToDict

from spine import Log, Record, SubscriptionClosedError, subscribe_all

from ._a2a import fold_run, goal_starts

log = logging.getLogger("vertebra.gateway")

#: The stored events that change a task in a way its owner is told of.
KINDS = ("action.pending", "session.converged", "session.stalled")
STATE_FILE = "a2a-push.json"


@attrs.frozen
class Webhook:
    """Where notifications go and the secret their signature is made with."""

    url: str
    secret: bytes = attrs.field(repr=False)
    attempts: int = 4
    #: Seconds before the first retry; doubled at each.
    backoff: float = 0.5
    timeout: float = 10.0

    @classmethod
    def from_env(cls, url: str, secret_env: str) -> Webhook:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"--a2a-webhook must be an http(s) URL, got {url!r}")
        secret = os.environ.get(secret_env, "")
        if not secret:
            raise ValueError(
                f"the A2A webhook's secret: environment variable {secret_env} is empty"
            )
        return cls(url=url, secret=secret.encode())

    def sign(self, body: bytes) -> str:
        return "sha256=" + hmac.new(self.secret, body, hashlib.sha256).hexdigest()


def notification(log_: Log, r: Record) -> tuple[str, bytes] | None:
    """The delivery id and body for stored record ``r``; None if it is no goal run's."""
    starts = [s for s in goal_starts(log_, r.stream) if s < r.seq]
    if not starts:
        return None
    fold = fold_run(log_, r.stream, starts[-1], upto=r.seq)
    if fold.last != r.seq:
        return None  # a run that ended before: this event is not the run's
    body = json.dumps(MessageToDict(pb.StreamResponse(task=fold.task())), sort_keys=True)
    return f"{fold.id}:{r.seq}", body.encode()


class PushPump:
    """Follows the log on a thread of its own and delivers each notification."""

    def __init__(self, log_: Log, data_dir: str, hook: Webhook) -> None:
        self._log = log_
        self._hook = hook
        self._path = os.path.join(data_dir, STATE_FILE)
        self._stop = threading.Event()
        self.delivered = 0
        self.failed = 0
        position = self._load()
        self._sub = subscribe_all(log_, position, KINDS)
        self._position = position
        self._thread = threading.Thread(target=self._run, name="a2a-push", daemon=True)
        self._thread.start()

    def _load(self) -> int:
        try:
            with open(self._path) as f:
                return int(json.load(f)["position"])
        except (OSError, ValueError, KeyError, TypeError):
            # First start: what is stored already is history, not news.
            return self._log.last_position()

    def _save(self, position: int) -> None:
        tmp = self._path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"position": position}, f)
        os.replace(tmp, self._path)

    def _run(self) -> None:
        try:
            with httpx.Client(timeout=self._hook.timeout) as http:
                while not self._stop.is_set():
                    r = self._sub.get(0.5)
                    if r is None:
                        continue
                    made = notification(self._log, r)
                    if made is not None:
                        self._deliver(http, *made)
                    self._save(r.position)
        except SubscriptionClosedError:
            pass
        except Exception:
            log.exception("A2A push notifications stopped")

    def _deliver(self, http: httpx.Client, delivery: str, body: bytes) -> None:
        hook = self._hook
        headers = {
            "Content-Type": "application/json",
            "X-Vertebra-Delivery": delivery,
            "X-Vertebra-Signature": hook.sign(body),
        }
        wait = hook.backoff
        for attempt in range(1, hook.attempts + 1):
            try:
                r = http.post(hook.url, content=body, headers=headers)
                if r.status_code < 300:
                    self.delivered += 1
                    return
                why: Any = f"HTTP {r.status_code}"
            except httpx.HTTPError as exc:
                why = exc
            if attempt == hook.attempts or self._stop.wait(wait):
                break
            wait *= 2
        self.failed += 1
        log.warning(
            "A2A notification %s not delivered after %d attempts: %s", delivery, attempt, why
        )

    def stop(self) -> None:
        self._stop.set()
        self._sub.close()
        self._thread.join(5)


__all__ = ["PushPump", "Webhook", "notification"]
