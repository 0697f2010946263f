"""The log contract for every backend, and what only the SQLite file or PostgreSQL adds."""

from __future__ import annotations

import functools
import pathlib
import sqlite3
from collections.abc import Callable

import pytest

from spine import Log, LogSpec, MemoryLog, SqliteLog, StorageError, open_log
from spine.testing import DurableLogContract, LeaseContract, LogContract, ev, snapshot


class TestMemoryLog(LogContract):
    """MemoryLog keeps the whole contract in one process."""

    def new_log(self, tmp_path: pathlib.Path) -> Log:
        return MemoryLog()


def tamper_sqlite(path: str, stream: str, seq: int, column: str, value: object) -> None:
    """Edit one stored row of a SQLite spine with its append-only trigger dropped."""
    raw = sqlite3.connect(path, isolation_level=None)
    try:
        raw.execute("DROP TRIGGER IF EXISTS events_append_only_update")
        raw.execute(
            f"UPDATE events SET {column} = ? WHERE stream = ? AND seq = ?", (value, stream, seq)
        )
    finally:
        raw.close()


class SqliteTamper:
    def tamper(self, log: Log, stream: str, seq: int, column: str, value: object) -> None:
        tamper_sqlite(str(log.path), stream, seq, column, value)  # type: ignore[attr-defined]


class TestSqliteLog(SqliteTamper, DurableLogContract):
    """SqliteLog keeps the contract in a real file, across threads and processes."""

    def new_log(self, tmp_path: pathlib.Path) -> Log:
        return SqliteLog(tmp_path / "spine.db")

    def reopen(self, log: Log, tmp_path: pathlib.Path) -> Log:
        return SqliteLog(tmp_path / "spine.db")

    def opener(self, tmp_path: pathlib.Path) -> Callable[[], Log]:
        return functools.partial(SqliteLog, str(tmp_path / "spine.db"))

    def test_stored_events_cannot_be_rewritten_or_removed(
        self, log: Log, db_path: pathlib.Path
    ) -> None:
        """The file refuses UPDATE and DELETE on events: sealed bytes stay as sealed."""
        log.append("s", [ev("a")])
        raw = sqlite3.connect(str(pathlib.Path(log.path)))  # type: ignore[attr-defined]
        try:
            with pytest.raises(sqlite3.DatabaseError, match="append-only"):
                raw.execute("UPDATE events SET payload = x'00'")
            with pytest.raises(sqlite3.DatabaseError, match="append-only"):
                raw.execute("DELETE FROM events")
        finally:
            raw.close()
        assert [r.event().text for r in log.read("s")] == ["a"]

    def test_the_file_is_in_wal_mode_with_the_chosen_durability(
        self, tmp_path: pathlib.Path
    ) -> None:
        """The log puts the file in WAL and applies the synchronous setting it was given."""
        with SqliteLog(tmp_path / "full.db", synchronous="full") as log:
            conn = log._w  # the writer connection: where the setting matters
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2

    def test_an_unknown_synchronous_setting_is_refused(self, tmp_path: pathlib.Path) -> None:
        """Only SQLite's own synchronous levels are accepted."""
        with pytest.raises(ValueError, match="synchronous"):
            SqliteLog(tmp_path / "x.db", synchronous="sometimes")

    def test_a_file_that_is_not_a_database_is_refused_untouched(
        self, tmp_path: pathlib.Path
    ) -> None:
        """Opening a non-database file raises StorageError and leaves its bytes alone."""
        path = tmp_path / "notes.txt"
        path.write_bytes(b"not a database, just notes\n" * 100)
        with pytest.raises(StorageError, match="not a database"):
            SqliteLog(path)
        assert path.read_bytes() == b"not a database, just notes\n" * 100

    def test_a_file_of_another_spine_format_is_refused(self, tmp_path: pathlib.Path) -> None:
        """A database marked with an unknown spine format is not appended to."""
        path = tmp_path / "future.db"
        SqliteLog(path).close()
        raw = sqlite3.connect(str(path))
        raw.execute("UPDATE spine_meta SET value = 'vertebra-spine-99' WHERE key = 'format'")
        raw.commit()
        raw.close()
        with pytest.raises(StorageError, match="unknown spine format"):
            SqliteLog(path)

    def test_a_closed_log_refuses_appends_and_reads(self, tmp_path: pathlib.Path) -> None:
        """After close, append and read raise StorageError instead of touching the file."""
        log = SqliteLog(tmp_path / "c.db")
        log.append("s", [ev("a")])
        log.close()
        log.close()  # closing twice is harmless
        with pytest.raises(StorageError, match="closed"):
            log.append("s", [ev("b")])
        with SqliteLog(tmp_path / "c.db") as again:
            assert [r.event().text for r in again.read("s")] == ["a"]

    def test_readers_in_other_threads_see_committed_appends(self, log: Log) -> None:
        """Each thread reads through its own connection and sees every commit."""
        import threading

        log.append("s", [ev("a")])
        seen: list[int] = []
        t = threading.Thread(target=lambda: seen.append(len(log.read("s"))))
        t.start()
        t.join(10)
        assert seen == [1]
        assert snapshot(log)[0].stream == "s"


class TestSqliteLogOneConnection(SqliteTamper, DurableLogContract):
    """With reads on the writer's connection (a session's setting) the contract holds."""

    def new_log(self, tmp_path: pathlib.Path) -> Log:
        return SqliteLog(tmp_path / "spine.db", single_connection=True)

    def reopen(self, log: Log, tmp_path: pathlib.Path) -> Log:
        return SqliteLog(tmp_path / "spine.db", single_connection=True)

    def opener(self, tmp_path: pathlib.Path) -> Callable[[], Log]:
        return functools.partial(SqliteLog, str(tmp_path / "spine.db"), single_connection=True)


class TestSqliteLogOpenedBySpec(SqliteTamper, DurableLogContract):
    """A log opened from a `LogSpec` URL is the same SQLite log."""

    def new_log(self, tmp_path: pathlib.Path) -> Log:
        return open_log(LogSpec.sqlite(tmp_path / "spine.db"))

    def reopen(self, log: Log, tmp_path: pathlib.Path) -> Log:
        return open_log(f"sqlite:///{tmp_path / 'spine.db'}")

    def opener(self, tmp_path: pathlib.Path) -> Callable[[], Log]:
        return functools.partial(open_log, LogSpec.sqlite(tmp_path / "spine.db"))


class TestPostgresLog(DurableLogContract, LeaseContract):
    """PostgresLog keeps the whole contract on a real server, and fences stale writers."""

    url = ""

    @pytest.fixture(autouse=True)
    def _schema(self, pg_url: str) -> None:
        self.url = pg_url

    def new_log(self, tmp_path: pathlib.Path) -> Log:
        return open_log(self.url)

    def reopen(self, log: Log, tmp_path: pathlib.Path) -> Log:
        return open_log(self.url)

    def opener(self, tmp_path: pathlib.Path) -> Callable[[], Log]:
        return functools.partial(open_log, self.url)

    def tamper(self, log: Log, stream: str, seq: int, column: str, value: object) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as c:
            c.execute("DROP TRIGGER IF EXISTS spine_events_append_only ON spine_events")
            c.execute(
                f"UPDATE spine_events SET {column} = %s WHERE stream = %s AND seq = %s",
                (value, stream, seq),
            )


def test_a_postgres_log_recovers_after_the_server_ends_its_connections(pg_url: str) -> None:
    """An administrator (or a restart) ends every connection of a log: the call that
    meets a broken connection fails with StorageError, the next works again, and a
    subscriber relying on notifications alone is woken through a reopened listener."""
    import threading
    import uuid

    import psycopg

    from spine import subscribe

    name = f"victim_{uuid.uuid4().hex[:8]}"
    victim_url = f"{pg_url}&application_name={name}"
    log, other = open_log(victim_url), open_log(pg_url)
    try:
        with subscribe(log, "s", poll_floor=0) as sub:
            other.append("s", [ev("one")])
            got = sub.get(30)
            assert got is not None and got.text == "one"
            with psycopg.connect(pg_url, autocommit=True) as admin:
                ended = admin.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE application_name = %s",
                    (name,),
                ).fetchone()
            assert ended is not None and ended[0] >= 2  # the writer and the listener

            def retried(fn):  # type: ignore[no-untyped-def]
                for _ in range(2):
                    try:
                        return fn()
                    except StorageError:
                        continue
                raise AssertionError("still failing after a reconnect")

            retried(lambda: log.append("s", [ev("two")]))
            assert [r.event().text for r in retried(lambda: log.read("s"))] == ["one", "two"]
            got = sub.get(30)
            assert got is not None and got.text == "two"
            # Commits through another connection still wake the subscriber.
            woken: list[object] = []
            t = threading.Thread(target=lambda: woken.append(sub.get(30)))
            t.start()
            other.append("s", [ev("three")])
            t.join(40)
            assert woken and getattr(woken[0], "text", None) == "three"
    finally:
        log.close()
        other.close()


class _Cut:
    """A TCP relay on loopback that can stop carrying bytes both ways without closing
    anything: what a PostgreSQL client looks like to the server when its host is cut off
    by a partition (the server sees an open, silent connection)."""

    def __init__(self, host: str, port: int) -> None:
        import socket
        import threading

        self.target = (host, port)
        self.cut = threading.Event()
        self.closing = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.socks: list[socket.socket] = []
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        import socket
        import threading

        while not self.closing.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target, timeout=30)
            server.settimeout(None)
            self.socks += [client, server]
            for a, b in ((client, server), (server, client)):
                t = threading.Thread(target=self._pump, args=(a, b), daemon=True)
                self.threads.append(t)
                t.start()

    def _pump(self, src: object, dst: object) -> None:
        try:
            while True:
                data = src.recv(65536)  # type: ignore[attr-defined]
                if not data:
                    return
                while self.cut.is_set() and not self.closing.is_set():
                    self.closing.wait(0.02)
                if self.closing.is_set():
                    return
                dst.sendall(data)  # type: ignore[attr-defined]
        except OSError:
            return

    def close(self) -> None:
        import contextlib
        import socket

        self.closing.set()
        # A shut-down socket wakes the thread blocked on it (a closed one may not).
        for s in [self.listener, *self.socks]:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        for t in self.threads:
            t.join(10)
        for s in [self.listener, *self.socks]:
            s.close()


def test_writers_cut_off_while_queued_for_the_counter_do_not_stall_the_others(
    pg_url: str,
) -> None:
    """Writers whose host is cut off while their appends wait for the position counter
    hold no lock the others need: an append from elsewhere commits while they stay cut
    off (the server never waits for a client in the middle of an append)."""
    import threading
    import urllib.parse

    import psycopg
    from conftest import wait_for

    parts = urllib.parse.urlsplit(pg_url)
    assert parts.hostname is not None and parts.port is not None
    relay = _Cut(parts.hostname, parts.port)
    cut_url = urllib.parse.urlunsplit(
        parts._replace(netloc=parts.netloc.replace(f":{parts.port}", f":{relay.port}"))
    )
    healthy = open_log(pg_url)
    cut_off = [open_log(f"{cut_url}&application_name=cut_off") for _ in range(3)]
    blocker = psycopg.connect(pg_url)
    threads: list[threading.Thread] = []
    try:
        for i, log in enumerate(cut_off):
            log.append(f"s{i}", [ev("before")])
            # The server's idle-transaction timeout would end a stuck holder after a while;
            # off here, so that a lock held across a round trip would stall for good.
            log._w.execute("SET idle_in_transaction_session_timeout = 0")  # type: ignore[attr-defined]
        # Hold the counter, queue the cut-off writers behind it, cut them off, let go.
        blocker.execute("SELECT position FROM spine_position WHERE id = 1 FOR UPDATE")
        for i, log in enumerate(cut_off):
            t = threading.Thread(
                target=lambda log=log, i=i: log.append(f"s{i}", [ev("during")]), daemon=True
            )
            threads.append(t)
            t.start()
        with psycopg.connect(pg_url, autocommit=True) as admin:
            wait_for(
                lambda: (
                    admin.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'cut_off' "
                        "AND wait_event_type = 'Lock'"
                    ).fetchone()
                    == (3,)
                ),
                timeout=30,
            )
        relay.cut.set()
        blocker.commit()
        done = threading.Event()
        other = threading.Thread(
            target=lambda: (healthy.append("h", [ev("elsewhere")]), done.set()), daemon=True
        )
        other.start()
        assert done.wait(60), "an append from another host waited for the cut-off writers"
        assert relay.cut.is_set()
        relay.cut.clear()
        for t in [*threads, other]:
            t.join(30)
            assert not t.is_alive()
        # Everything committed once, in one gapless order.
        rows = healthy.read_rows(0)
        assert [r[2] for r in rows] == list(range(1, 8))
        assert sorted(r[0] for r in rows) == ["h", "s0", "s0", "s1", "s1", "s2", "s2"]
    finally:
        relay.cut.clear()
        blocker.close()
        healthy.close()
        for log in cut_off:
            log.close()
        relay.close()


def test_a_postgres_spine_made_before_one_call_appends_gains_the_function(pg_url: str) -> None:
    """A spine whose schema predates the server-side append function gets it when a
    writer opens it, and appends go on where they were."""
    import psycopg

    log = open_log(pg_url)
    log.append("s", [ev("a")])
    log.close()
    with psycopg.connect(pg_url, autocommit=True) as c:
        c.execute("DROP FUNCTION spine_append")
    log = open_log(pg_url)
    try:
        assert log.append("s", [ev("b")], expected_seq=1).last_seq == 2
        assert [r.event().text for r in log.read("s")] == ["a", "b"]
    finally:
        log.close()


def test_loading_a_backend_imports_its_modules_and_opens_nothing(tmp_path: pathlib.Path) -> None:
    """`load_backend` imports what `open_log` would for that URL (psycopg for PostgreSQL,
    not for SQLite) and connects to nothing: a forking host calls it before it forks."""
    import subprocess
    import sys

    probe = (
        "import sys, spine; spine.load_backend(sys.argv[1]); "
        "print('psycopg' in sys.modules, 'spine._postgres' in sys.modules)"
    )
    # Nothing listens on port 9 of loopback: loading must not try to connect.
    urls = {
        "postgresql://nobody@127.0.0.1:9/none": "True True",
        str(tmp_path / "s.db"): "False False",
    }
    for url, want in urls.items():
        out = subprocess.run(
            [sys.executable, "-c", probe, url], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == want, (url, out.stdout)
    assert not (tmp_path / "s.db").exists()


def test_a_writer_that_defers_checkpoints_leaves_them_to_the_background_checkpointer(
    tmp_path: pathlib.Path,
) -> None:
    """Sessions never checkpoint on a commit (their ack waits for it); the Host's
    checkpointer copies the WAL into the database in the background."""
    from conftest import wait_for

    path = tmp_path / "spine.db"
    with open_log(str(path), deferred_checkpoints=True) as writer:
        assert isinstance(writer, SqliteLog)
        assert writer._w.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        with SqliteLog(path) as keeper:
            assert keeper._w.execute("PRAGMA wal_autocheckpoint").fetchone()[0] > 0
            before = path.stat().st_size
            for i in range(200):
                writer.append("s", [ev(f"a fairly long message {i} " * 1000)])  # 5 MB in all
            assert path.stat().st_size == before  # nothing copied by the writer's commits
            keeper.start_checkpoints(every=0.01)
            keeper.start_checkpoints(every=0.01)  # idempotent
            wait_for(lambda: keeper.checkpoints >= 1 and path.stat().st_size > before)
            writer.append("s", [ev("after")])
            n = keeper.checkpoints
            wait_for(lambda: keeper.checkpoints > n)
        assert [e.text for e in writer.read_events("s")][-1] == "after"


def _wal_checkpoint_seq(wal: pathlib.Path) -> int:
    """The WAL header's checkpoint sequence number: it goes up each time the WAL starts over."""
    with open(wal, "rb") as f:
        return int.from_bytes(f.read(16)[12:16], "big")


def test_the_checkpointer_starts_the_wal_over_though_readers_always_overlap(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Readers that always overlap (subscribers, a watcher) keep a passive checkpoint from
    ever letting the WAL start over, so under a sustained load it grew for as long as
    commits kept coming. Past a size the checkpointer waits briefly for those readers, and
    the WAL starts over (its header says so); nothing is lost on the way.

    The WAL's largest size depends on how often the checkpointer gets the CPU, so it is
    measured in bench/spine.py, not bounded here."""
    import threading

    from conftest import wait_for

    import spine._sqlite_watch as watch

    monkeypatch.setattr(watch, "_WAL_RESTART_PAGES", 64)
    path = tmp_path / "spine.db"
    wal = tmp_path / "spine.db-wal"
    with open_log(str(path), deferred_checkpoints=True) as writer, SqliteLog(path) as keeper:
        stop = threading.Event()

        def read() -> None:
            with SqliteLog(path) as reader:
                while not stop.is_set():
                    reader.read("s", 0, 20)

        readers = [threading.Thread(target=read) for _ in range(3)]
        for t in readers:
            t.start()
        try:
            writer.append("s", [ev("first")])
            started_at = _wal_checkpoint_seq(wal)
            keeper.start_checkpoints(every=0.005)
            for i in range(1500):
                writer.append("s", [ev(f"message {i} " * 40)])
            # However late the checkpointer ran, the WAL is past 64 pages: it restarts it.
            wait_for(lambda: keeper.wal_restarts >= 1, timeout=30)
            writer.append("s", [ev("after")])  # the commit that starts the WAL over
            assert _wal_checkpoint_seq(wal) > started_at
        finally:
            stop.set()
            for t in readers:
                t.join(10)
        assert len(writer.read_events("s")) == 1502
