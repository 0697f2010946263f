"""A throwaway PostgreSQL server for tests (`postgres_cluster`), and an empty schema in one
for each test (`fresh_schema`)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Sequence

import attrs
import pytest

#: Where Debian's packages put the server binaries, newest first.
PG_BIN_DIRS = (
    "/usr/lib/postgresql/17/bin",
    "/usr/lib/postgresql/16/bin",
    "/usr/lib/postgresql/15/bin",
    "/usr/lib/postgresql/14/bin",
)


def postgres_bin_dir() -> str | None:
    """The directory holding ``initdb`` and ``postgres``, None when none is installed."""
    for d in PG_BIN_DIRS:
        if os.path.exists(os.path.join(d, "initdb")):
            return d
    found = shutil.which("initdb")
    return os.path.dirname(os.path.realpath(found)) if found else None


@attrs.define
class PostgresServer:
    """A throwaway PostgreSQL server a test started: its URL, and `stop` and `start` for
    an outage of that server only (never one the test did not start)."""

    url: str
    base: str
    prefix: tuple[str, ...]
    pg_ctl: str
    listen: str
    port: int
    fsync: bool
    running: bool = False

    def stop(self, mode: str = "immediate") -> None:
        """Stop the server (``immediate``: as a crash would, no checkpoint)."""
        data = os.path.join(self.base, "data")
        cmd = [*self.prefix, self.pg_ctl, "-D", data, "-m", mode, "-w", "-t", "60", "stop"]
        subprocess.run(cmd, capture_output=True, cwd=self.base, timeout=120, check=True)
        self.running = False

    def start(self) -> None:
        """Start it again on the same port and data; returns once it takes connections."""
        _start(self.prefix, self.pg_ctl, self.base, self.listen, self.port, self.fsync)
        self.running = True


@contextlib.contextmanager
def postgres_server(
    *,
    fsync: bool = True,
    user: str = "postgres",
    listen: str = "127.0.0.1",
    wrap: Sequence[str] = (),
    allow: Sequence[str] = (),
) -> Iterator[PostgresServer]:
    """Start a throwaway PostgreSQL cluster in a temporary directory on a free loopback
    port; yield its handle; stop it and delete it on exit, whatever happened.

    As root the server runs as ``user`` (PostgreSQL refuses to run as root). Skips the
    calling test when no server binaries are installed. ``listen`` is the one address it
    listens on and ``wrap`` a prefix for its commands (``ip netns exec NS``: a server
    inside a network namespace, listening on that namespace's address); ``allow`` are
    networks (CIDR) whose clients are trusted besides loopback.
    """
    bindir = postgres_bin_dir()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries installed")
    root = os.geteuid() == 0
    prefix: list[str] = [*wrap, *(["runuser", "-u", user, "--"] if root else [])]
    base = tempfile.mkdtemp(prefix="vertebra-pg-")
    if root:
        shutil.chown(base, user)
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    server = PostgresServer(
        url=f"postgresql://postgres@{listen}:{port}/postgres",
        base=base,
        prefix=tuple(prefix),
        pg_ctl=os.path.join(bindir, "pg_ctl"),
        listen=listen,
        port=port,
        fsync=fsync,
    )
    try:
        _initdb(prefix, bindir, base, allow)
        server.start()
        yield server
    finally:
        if server.running:
            with contextlib.suppress(subprocess.SubprocessError):
                server.stop()
        shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def postgres_cluster(
    *,
    fsync: bool = True,
    user: str = "postgres",
    listen: str = "127.0.0.1",
    wrap: Sequence[str] = (),
    allow: Sequence[str] = (),
) -> Iterator[str]:
    """`postgres_server`, yielding only its URL."""
    with postgres_server(fsync=fsync, user=user, listen=listen, wrap=wrap, allow=allow) as s:
        yield s.url


def _initdb(prefix: Sequence[str], bindir: str, base: str, allow: Sequence[str]) -> None:
    """Make the cluster's data directory in ``base``, trusting ``allow`` besides loopback."""
    data = os.path.join(base, "data")
    subprocess.run(
        [
            *prefix,
            os.path.join(bindir, "initdb"),
            "-D",
            data,
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        ],
        check=True,
        capture_output=True,
        cwd=base,
        timeout=120,
    )
    if allow:
        with open(os.path.join(data, "pg_hba.conf"), "a") as hba:
            hba.writelines(f"host all all {net} trust\n" for net in allow)


def _start(
    prefix: Sequence[str], pg_ctl: str, base: str, listen: str, port: int, fsync: bool
) -> None:
    """Start the server of the cluster in ``base`` and wait until it takes connections."""
    opts = (
        f"-c listen_addresses={listen} -c port={port} -c unix_socket_directories={base} "
        f"-c fsync={'on' if fsync else 'off'} -c max_connections=200"
    )
    subprocess.run(
        [
            *prefix,
            pg_ctl,
            "-D",
            os.path.join(base, "data"),
            "-l",
            os.path.join(base, "server.log"),
            "-o",
            opts,
            "-w",
            "-t",
            "60",
            "start",
        ],
        check=True,
        capture_output=True,
        cwd=base,
        timeout=120,
    )


@contextlib.contextmanager
def fresh_schema(url: str) -> Iterator[str]:
    """An empty schema in the database at ``url``, for one test: yields a URL whose
    connections use it, and drops it (and everything in it) on exit."""
    import uuid

    import psycopg

    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(f"CREATE SCHEMA {name}")
    sep = "&" if "?" in url else "?"
    try:
        yield f"{url}{sep}options=-csearch_path%3D{name}"
    finally:
        with psycopg.connect(url, autocommit=True) as c:
            c.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
