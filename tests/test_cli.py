"""The command line, run as real processes: the daemon, a client attached to it, the demo."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys

import pytest
from conftest import wait_for

pytestmark = pytest.mark.timeout(120)

CLI = [sys.executable, "-m", "actors.cli"]


def _run(data: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "--data", str(data), *args], capture_output=True, text=True, timeout=60
    )


def test_the_daemon_serves_clients_that_attach_through_the_data_directory(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """serve records its port; send/sessions/history attach to it; SIGTERM stops it cleanly."""
    data = tmp_path / "data"
    daemon = subprocess.Popen(
        [*CLI, "--data", str(data), "serve", "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: (data / "daemon.json").exists() or daemon.poll() is not None, 30)
        assert daemon.poll() is None, daemon.stderr.read() if daemon.stderr else ""
        info = json.loads(wait_for(lambda: (data / "daemon.json").read_text() or None, 10))
        no_leftover_processes.append(info["system_session"])
        out = _run(data, "send", "chat-1", "hello daemon", "--create")
        assert out.returncode == 0, out.stderr
        assert "[scripted] hello daemon" in out.stdout
        out = _run(data, "send", "chat-1", "/model big")
        assert "[success] model set to big" in out.stdout
        out = _run(data, "sessions")
        assert "chat-1" in out.stdout and "live" in out.stdout
        out = _run(data, "history", "chat-1")
        assert "session.properties" in out.stdout and "ore.model.name=big" in out.stdout
        out = _run(data, "seal", "chat-1")
        assert out.returncode == 0 and "sealed seqs 1.." in out.stdout, out.stderr
        out = _run(data, "verify", "chat-1")
        assert out.returncode == 0 and "verified seqs 1.." in out.stdout, out.stderr
        out = _run(data, "send", "nobody", "hi")
        assert out.returncode == 2 and "SessionNotFound" in out.stderr
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(30)
        finally:
            if daemon.poll() is None:
                daemon.kill()
    assert daemon.returncode == 0
    assert not (data / "daemon.json").exists()


def test_a_client_without_a_daemon_gets_a_clear_error(tmp_path: pathlib.Path) -> None:
    """Commands that need the daemon say so instead of starting a second actor system."""
    out = _run(tmp_path, "send", "s", "hi")
    assert out.returncode != 0 and "no daemon runs" in out.stderr


def test_the_demo_runs_to_the_end_and_leaves_a_gapless_stream(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """The quick start's demo completes, including the kill and recovery of its session."""
    out = _run(tmp_path / "d", "demo")
    assert out.returncode == 0, out.stderr
    assert "seqs gapless: True" in out.stdout and "restarts: 1" in out.stdout
    assert os.path.exists(tmp_path / "d" / "spine.db")


def test_serve_with_a_postgres_spine_keeps_every_session_in_the_database(
    tmp_path: pathlib.Path, pg_url: str, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """serve --spine postgresql://... stores in PostgreSQL; clients find the spine through
    the data directory (history, seal, verify), and `--spine` alone reads it too."""
    data = tmp_path / "data"
    daemon = subprocess.Popen(
        [*CLI, "--data", str(data), "serve", "--quiet", "--spine", pg_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: (data / "daemon.json").exists() or daemon.poll() is not None, 30)
        assert daemon.poll() is None, daemon.stderr.read() if daemon.stderr else ""
        info = json.loads(wait_for(lambda: (data / "daemon.json").read_text() or None, 10))
        no_leftover_processes.append(info["system_session"])
        assert info["spine"] == pg_url
        assert (data / "daemon.json").stat().st_mode & 0o077 == 0
        out = _run(data, "send", "chat-1", "hello postgres", "--create")
        assert out.returncode == 0 and "[scripted] hello postgres" in out.stdout, out.stderr
        out = _run(data, "history", "chat-1")
        assert out.returncode == 0 and "hello postgres" in out.stdout, out.stderr
        out = _run(data, "seal", "chat-1")
        assert out.returncode == 0 and "sealed seqs 1.." in out.stdout, out.stderr
        out = _run(data, "verify", "chat-1")
        assert out.returncode == 0 and "verified seqs 1.." in out.stdout, out.stderr
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(30)
        finally:
            if daemon.poll() is None:
                daemon.kill()
    assert daemon.returncode == 0
    assert not (data / "spine.db").exists()
    out = _run(tmp_path / "elsewhere", "--spine", pg_url, "history", "chat-1")
    assert out.returncode == 0 and "hello postgres" in out.stdout, out.stderr


def test_an_unknown_spine_url_is_refused_with_a_clear_error(tmp_path: pathlib.Path) -> None:
    """A spine URL of no known backend names the problem instead of a traceback."""
    out = _run(tmp_path, "--spine", "mysql://x/y", "history", "s")
    assert out.returncode == 2 and "unknown log URL" in out.stderr
