"""Durability as a setting: a SQLite spine's URL says what an acknowledged event survives
(``normal``: a crash of any process; ``full``: a power cut too), every opener honours it,
and the daemon and the Host take it as an option."""

from __future__ import annotations

import pathlib

import pytest

from actors.host import Host
from spine import DURABILITY, Event, InvalidArgumentError, LogSpec, open_log


def test_the_durability_rides_in_the_url_and_leaves_the_location_alone(
    tmp_path: pathlib.Path,
) -> None:
    spec = LogSpec.sqlite(tmp_path / "s.db")
    assert spec.durability == "normal" and DURABILITY == ("normal", "full")
    full = spec.durable("full")
    assert full.url == spec.url + "?durability=full"
    assert full.durability == "full"
    assert full.path == spec.path and full.location == spec.location == spec.url
    assert full.durable("normal") == spec
    assert LogSpec.parse(full.url) == full


@pytest.mark.parametrize("bad", ["sometimes", "FULL", ""])
def test_an_unknown_durability_is_refused_by_name(tmp_path: pathlib.Path, bad: str) -> None:
    spec = LogSpec.sqlite(tmp_path / "s.db")
    with pytest.raises(InvalidArgumentError, match="durability"):
        spec.durable(bad)
    with pytest.raises(InvalidArgumentError, match=f"unknown durability {bad!r}"):
        LogSpec(spec.url + "?durability=" + bad)


def test_a_postgresql_spine_is_as_durable_as_its_server() -> None:
    pg = LogSpec("postgresql://u@127.0.0.1:5432/db")
    assert pg.durable("full") == pg and pg.durability == "normal"
    with pytest.raises(InvalidArgumentError, match="synchronous_commit"):
        pg.durable("normal")


@pytest.mark.parametrize(("level", "pragma"), [("normal", 1), ("full", 2)])
def test_the_log_opened_from_the_url_syncs_as_it_says(
    tmp_path: pathlib.Path, level: str, pragma: int
) -> None:
    spec = LogSpec.sqlite(tmp_path / "s.db").durable(level)
    with open_log(spec) as log:
        log.append("a", [Event(kind="user.message", text="x")], expected_seq=0)
        assert log._w.execute("PRAGMA synchronous").fetchone()[0] == pragma  # type: ignore[attr-defined]
        assert log.last_seq("a") == 1


def test_a_host_with_full_durability_gives_its_sessions_the_full_spine(
    tmp_path: pathlib.Path,
) -> None:
    """The setting travels in the spine's URL: the sessions (here in this process) open
    the same file with it, and what they store is read back as usual."""
    with Host(tmp_path / "data", base="simpleSystemBase", timeout=20, durability="full") as h:
        assert LogSpec.parse(h.spine).durability == "full"
        sid = h.create("d-1")
        h.send(sid, "hello")
        assert h.info(sid).session_id == "d-1"
    with open_log(LogSpec.sqlite(tmp_path / "data" / "spine.db"), read_only=True) as log:
        kinds = [e.kind for e in log.read_events("d-1", 0)]
    assert "user.message" in kinds
