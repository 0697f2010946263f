"""Shared fixtures."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator

import pytest


@pytest.fixture
def db_path(tmp_path: pathlib.Path) -> pathlib.Path:
    """A fresh SQLite file path in the test's temporary directory."""
    return tmp_path / "spine.db"


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """A PostgreSQL server URL: ``VERTEBRA_TEST_PG`` when set (CI sets it), else a throwaway
    cluster this test run starts itself when the server binaries are installed (skip
    otherwise)."""
    url = os.environ.get("VERTEBRA_TEST_PG")
    if url:
        yield url
        return
    from spine.testing import postgres_cluster
    from spine.testing.postgres import postgres_bin_dir

    if postgres_bin_dir() is None:
        # The skip summary (-ra) prints this: it says what is missing and how to give it.
        pytest.skip(
            "PostgreSQL: no server binaries (initdb, pg_ctl) installed and VERTEBRA_TEST_PG "
            "(a server URL) not set"
        )
    # Durability is not under test here; the benchmark runs with fsync on.
    with postgres_cluster(fsync=False) as started:
        yield started


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A URL of an empty schema of its own on the test PostgreSQL server."""
    from spine.testing import fresh_schema

    with fresh_schema(pg_server) as url:
        yield url


def descendants(pid: int) -> list[int]:
    """Live descendant process ids of ``pid`` (read from /proc)."""
    children: dict[int, list[int]] = {}
    for d in pathlib.Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces; the fields after its closing paren are fixed.
        rest = stat[stat.rindex(")") + 2 :].split()
        if rest[0] == "Z":
            continue
        children.setdefault(int(rest[1]), []).append(int(d.name))
    out: list[int] = []
    stack = [pid]
    while stack:
        for c in children.get(stack.pop(), []):
            out.append(c)
            stack.append(c)
    return out


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.01):  # type: ignore[no-untyped-def]
    """Poll ``predicate`` until it returns a truthy value; fail after ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {predicate}")
        time.sleep(interval)


@pytest.fixture
def no_leftover_processes():  # type: ignore[no-untyped-def]
    """Fail the test if processes it started outlive it: its own children, and every
    process of each actor system a Host of this test started (found by session id, since
    Thespian's admin detaches from its parent)."""
    import os

    from actors._runtime.system import processes_in_session
    from actors.host import SYSTEM_SESSIONS

    before_children = set(descendants(os.getpid()))
    before_systems = set(SYSTEM_SESSIONS)
    extra_systems: list[int] = []
    yield extra_systems

    def leftovers() -> set[int]:
        left = set(descendants(os.getpid())) - before_children
        for sid in (SYSTEM_SESSIONS - before_systems) | set(extra_systems):
            left.update(processes_in_session(sid))
        return left

    try:
        wait_for(lambda: not leftovers(), timeout=15)
    except AssertionError:
        left = leftovers()
        for pid in left:
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        raise AssertionError(f"actor processes left behind: {sorted(left)}") from None
