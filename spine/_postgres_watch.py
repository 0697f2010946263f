"""`PostgresWatch`: the mixin of `PostgresLog` that listens for other writers' appends
(``LISTEN``/``NOTIFY``) and wakes its subscribers, and the notifications' payloads."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from typing import Any

import orjson
import psycopg
from psycopg import sql

from ._errors import StorageError
from ._log import Wakeup

# A notification payload must stay under 8000 bytes; past this the wake says nothing
# about which streams moved and every subscriber reads.
_NOTIFY_MAX = 7000


class PostgresWatch:
    """Listening to the log's notification channel while anyone subscribes."""

    where: str
    channel: str
    wakeup: Wakeup
    _closed: bool
    _watch_interval: float
    _watchers: int
    _watch_lock: threading.Lock
    _watch_thread: threading.Thread | None

    def _connect(self) -> psycopg.Connection[Any]:
        """A new connection to the log's database (`PostgresLog` opens it)."""
        raise NotImplementedError

    def watch(self) -> None:
        with self._watch_lock:
            self._watchers += 1
            if self._watch_thread is None and not self._closed:
                # Listen first, before returning: a subscriber reads the log after watch(),
                # so every commit it has not read will also be notified.
                try:
                    c = self._connect()
                    c.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                except (psycopg.Error, StorageError) as exc:
                    self._watchers -= 1
                    raise StorageError(f"cannot watch {self.where!r}: {exc}") from exc
                # Marks from before may have missed commits made while nobody listened:
                # forget them, so every subscriber catches up by reading.
                self.wakeup.bump(None)
                t = threading.Thread(
                    target=self._watch_loop, args=(c,), name="spine-listen", daemon=True
                )
                self._watch_thread = t
                t.start()

    def unwatch(self) -> None:
        with self._watch_lock:
            self._watchers = max(0, self._watchers - 1)

    def _watch_loop(self, c: psycopg.Connection[Any]) -> None:
        try:
            while True:
                with self._watch_lock:
                    if self._watchers == 0 or self._closed:
                        self._watch_thread = None
                        return
                try:
                    for n in c.notifies(timeout=self._watch_interval):
                        self.wakeup.bump(_parse_marks(n.payload))
                except psycopg.Error:
                    # The connection broke: forget the marks (subscribers read on their
                    # floor) and listen again on a new one.
                    self.wakeup.bump(None)
                    with contextlib.suppress(psycopg.Error):
                        c.close()
                    try:
                        c = self._connect()
                        c.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                    except (psycopg.Error, StorageError):
                        threading.Event().wait(self._watch_interval)
                    self.wakeup.bump(None)
        finally:
            with contextlib.suppress(psycopg.Error):
                c.close()


def _marks_payload(stream: str, encoded: Sequence[tuple[int, str, bytes]]) -> str:
    """``[stream, {kind: last seq}]`` as JSON; empty (unknown) if it would be too long."""
    kinds: dict[str, int] = {}
    for seq, kind, _ in encoded:
        kinds[kind] = seq
    text = orjson.dumps([stream, kinds]).decode()
    return text if len(text) <= _NOTIFY_MAX else ""


def _parse_marks(payload: str) -> list[tuple[str, str, int]] | None:
    try:
        stream, kinds = orjson.loads(payload)
        return [(str(stream), str(k), int(s)) for k, s in kinds.items()]
    except (ValueError, TypeError, AttributeError):
        return None
