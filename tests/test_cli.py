"""The command line, run as users run it: a real daemon (`vertebra serve`), clients as
processes, and the chat on a real terminal. One daemon serves the whole module; tests
that stop or restart a daemon start their own."""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from cli_support import CLI, Daemon, Terminal, env, ok, run, stopped_after
from conftest import wait_for

from actors._version import __version__
from actors.cli._commands import COMMANDS
from spine import Event, Kind, LogSpec, Usage, open_log

pytestmark = pytest.mark.timeout(180)

ESC = "\x1b["


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    # The operator allows one keyless model server, on a port nothing listens on.
    d = Daemon(tmp_path_factory.mktemp("cli") / "data").start("--allow-model-url", CLOSED)
    with stopped_after(d):
        yield d


@pytest.fixture
def own_daemon(tmp_path: pathlib.Path) -> Iterator[Daemon]:
    """A daemon of the test's own, for tests that stop or restart it."""
    d = Daemon(tmp_path / "own")
    with stopped_after(d):
        yield d


def fails(out: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    """The single error line of a failed command, checked for its exit code and words."""
    assert out.returncode == code, (out.returncode, out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vertebra: "), out.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def kinds_of(jsonl: str) -> list[str]:
    return [json.loads(line)["kind"] for line in jsonl.splitlines()]


# -- options, help, version ----------------------------------------------------------------


def test_options_work_before_or_after_the_command_and_from_the_environment(
    daemon: Daemon,
) -> None:
    """--data is accepted before and after the command, and VERTEBRA_DATA is its default."""
    ok(run(daemon.data, "new", "opt-1"))
    before = ok(run(None, "--data", str(daemon.data), "sessions", "--json"))
    after = ok(run(None, "sessions", "--json", "--data", str(daemon.data)))
    from_env = ok(run(None, "sessions", "--json", extra_env={"VERTEBRA_DATA": str(daemon.data)}))
    assert '"session":"opt-1"' in before
    assert before == after == from_env
    # The flag beats the environment.
    out = run(None, "sessions", "--data", str(daemon.data), extra_env={"VERTEBRA_DATA": "nowhere"})
    assert "opt-1" in ok(out)


def test_every_command_has_help_with_an_example_and_the_version_is_printed() -> None:
    """`vertebra C --help` describes C and shows an example for every command; --version."""
    assert ok(run(None, "--version")).strip() == f"vertebra {__version__}"
    for cmd in COMMANDS:
        text = ok(run(None, cmd.name, "--help"))
        assert f"usage: vertebra {cmd.name}" in text and "example" in text, cmd.name
        assert all(e in text for e in cmd.examples), cmd.name


def test_the_readme_command_table_matches_help() -> None:
    """Every command in `vertebra --help` has a README row with the same description, and
    the README lists no command that does not exist."""
    text = ok(run(None, "--help", extra_env={"COLUMNS": "400"}))
    listed = dict(re.findall(r"^    ([\w-]+)\s{2,}(\S.*)$", text, re.M))
    assert set(listed) == {c.name for c in COMMANDS}
    readme = (pathlib.Path(__file__).parent.parent / "README.md").read_text()
    section = readme.split("## The command line", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `vertebra ([\w-]+)[^`]*` \| (.*) \|$", section, re.M))
    assert rows == listed
    # The options a row shows are the command's own.
    for name, synopsis in re.findall(r"^\| `vertebra ([\w-]+)([^`]*)` \|", section, re.M):
        own = ok(run(None, name, "--help"))
        for option in re.findall(r"--[\w-]+", synopsis):
            assert option in own, (name, option)


def test_a_bad_argument_is_one_line_naming_it() -> None:
    """Unknown options, missing arguments and bad values are one line on stderr, exit 2."""
    fails(run(None, "send", "--bogus", "s", "t"), 2, "--bogus", "vertebra send --help")
    fails(run(None, "send"), 2, "required")
    fails(run(None, "tail", "s", "--from", "0"), 2, "seqs start at 1")
    fails(run(None, "serve", "--idle-timeout", "-1"), 2, "above zero")
    fails(run(None, "frobnicate"), 2, "invalid choice")
    assert run(None).returncode == 2


# -- daemon errors ---------------------------------------------------------------------------


def test_commands_without_a_daemon_say_how_to_start_one(tmp_path: pathlib.Path) -> None:
    """No daemon: exit 3 and the command that starts one; a gone daemon is named as such."""
    for args in (("send", "s", "hi"), ("sessions",), ("new",), ("stop",), ("rebuild",)):
        fails(run(tmp_path, *args), 3, "no daemon runs", f"vertebra serve --data {tmp_path}")
    proc = subprocess.Popen(["true"])
    proc.wait()
    (tmp_path / "daemon.json").write_text(
        json.dumps({"pid": proc.pid, "admin_port": 1, "version": __version__})
    )
    fails(run(tmp_path, "sessions"), 3, "is gone", "vertebra serve")


def test_a_daemon_of_another_version_is_refused_with_how_to_restart_it(
    tmp_path: pathlib.Path,
) -> None:
    """Clients do not talk to a daemon of another version: exit 3, naming both versions."""
    (tmp_path / "daemon.json").write_text(
        json.dumps({"pid": os.getpid(), "admin_port": 1, "version": "0.0.1"})
    )
    fails(run(tmp_path, "sessions"), 3, "runs vertebra 0.0.1", __version__, "vertebra stop")


def test_a_second_daemon_on_the_same_data_is_refused(daemon: Daemon) -> None:
    """`serve` on a data directory whose daemon runs fails at once and leaves it serving."""
    fails(run(daemon.data, "serve"), 1, "already runs")
    ok(run(daemon.data, "sessions"))


# -- sessions: new, send, interrupt, close -----------------------------------------------------


def test_new_creates_sessions_with_metadata_and_refuses_bad_ones(daemon: Daemon) -> None:
    """new ID --meta K=V stores the metadata; a fresh id is printed; errors are one line."""
    assert ok(run(daemon.data, "new", "new-1", "--meta", "objective=test", "--meta", "k=a=b"))
    hist = ok(run(daemon.data, "history", "new-1", "--json"))
    props = [json.loads(x) for x in hist.splitlines() if '"session.properties"' in x]
    assert props[0]["properties"] == {"objective": "test", "k": "a=b"}
    fresh = json.loads(ok(run(daemon.data, "new", "--json")))["session"]
    assert fresh != "new-1" and fresh in ok(run(daemon.data, "sessions"))
    fails(run(daemon.data, "new", "new-1"), 1, "already exists")
    fails(run(daemon.data, "new", "bad id"), 2, "bad session id", "whitespace")
    fails(run(daemon.data, "new", "x-1", "--meta", "novalue"), 2, "KEY=VALUE")


def test_send_prints_the_turn_and_reports_unknown_sessions(daemon: Daemon) -> None:
    """send waits for the turn and prints it (as JSON lines with --json); slash commands
    print their notices; an unknown session is exit 4."""
    out = ok(run(daemon.data, "send", "send-1", "hello daemon", "--create"))
    assert "[scripted] hello daemon" in out and "turn.completed" in out
    out = ok(run(daemon.data, "send", "send-1", "/model big"))
    assert "[success] model set to big" in out
    lines = ok(run(daemon.data, "send", "send-1", "again", "--json")).splitlines()
    assert json.loads(lines[0])["consumed"] is False
    assert kinds_of("\n".join(lines[1:]))[-1] == "turn.completed"
    assert "stored at seq" in ok(run(daemon.data, "send", "send-1", "later", "--no-wait"))
    fails(run(daemon.data, "send", "nobody", "hi"), 4, "unknown session 'nobody'")
    fails(run(daemon.data, "send", "a.b", "hi"), 2, "bad session id")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: The model server the module's daemon allows (nothing listens there).
CLOSED = f"http://127.0.0.1:{_free_port()}/v1"


def test_send_exits_1_naming_the_cause_when_the_model_server_refuses_the_connection(
    daemon: Daemon,
) -> None:
    """A turn whose model server refuses the connection fails: exit 1, the cause on stderr."""
    ok(run(daemon.data, "send", "refused-1", f"/provider openai {CLOSED} m", "--create"))
    out = run(daemon.data, "send", "refused-1", "hi")
    line = fails(out, 1, "the turn in refused-1 failed")
    assert "onnect" in line, line


def test_send_exits_1_naming_the_variable_when_the_key_variable_is_missing(
    daemon: Daemon,
) -> None:
    """A turn whose ore.model.api_key_env names an unset variable fails: exit 1 naming it."""
    # The key's variable is the operator's to pair with a server (the CLI is the operator).
    meta = ["ore.model.provider=openai", f"ore.model.base_url={CLOSED}", "ore.model.name=m"]
    meta.append("ore.model.api_key_env=VERTEBRA_NO_SUCH_KEY")
    ok(run(daemon.data, "new", "nokey-1", *(a for kv in meta for a in ("--meta", kv))))
    fails(run(daemon.data, "send", "nokey-1", "hi"), 1, "failed", "VERTEBRA_NO_SUCH_KEY")


def test_a_model_server_the_operator_did_not_allow_is_refused_by_chat_and_by_the_turn(
    daemon: Daemon,
) -> None:
    """``/provider`` naming a server ``serve --allow-model-url`` did not list is refused
    naming the key, nothing stored; the operator's own ``--meta`` is stored, and its
    turn fails naming the key before anything is sent."""
    other = f"http://127.0.0.1:{_free_port()}/v1"
    out = run(daemon.data, "send", "other-1", f"/provider openai {other} m", "--create")
    fails(out, 1, "other-1 answered: ore.model.base_url: its server", "--allow-model-url")
    assert "ore.model.base_url" not in run(daemon.data, "history", "other-1").stdout
    meta = ["ore.model.provider=openai", f"ore.model.base_url={other}", "ore.model.name=m"]
    ok(run(daemon.data, "new", "other-2", *(a for kv in meta for a in ("--meta", kv))))
    fails(run(daemon.data, "send", "other-2", "hi"), 1, "failed", "ore.model.base_url")
    assert "net.egress" in run(daemon.data, "history", "other-2").stdout


def test_serve_refuses_an_allowed_model_url_that_is_no_server(tmp_path: pathlib.Path) -> None:
    out = run(tmp_path / "data", "serve", "--allow-model-url", "ftp://x/v1", "--for-seconds", "1")
    fails(out, 2, "--allow-model-url", "http or https")


def test_send_exits_1_when_its_turn_is_cancelled(daemon: Daemon) -> None:
    """A send whose turn another client interrupts exits 1 saying it was cancelled."""
    ok(run(daemon.data, "new", "cancel-1"))
    proc = subprocess.Popen(
        [*CLI, "--data", str(daemon.data), "send", "cancel-1", "!hang"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
    )
    try:
        wait_for(lambda: "turn.started" in run(daemon.data, "history", "cancel-1").stdout, 30)
        ok(run(daemon.data, "interrupt", "cancel-1"))
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 1, err
    assert err.strip().splitlines() == [
        "vertebra: the turn in cancel-1 was cancelled (interrupted)"
    ], err


def test_send_exits_1_when_a_slash_command_answers_an_error(daemon: Daemon) -> None:
    """A slash command answered with an error notice is exit 1, the notice on stderr."""
    out = run(daemon.data, "send", "slash-1", "/temperature hot", "--create")
    fails(out, 1, "slash-1 answered:")
    out = run(daemon.data, "send", "slash-1", "/nosuch")
    assert "[error] unknown command /nosuch" in out.stdout
    fails(out, 1, "unknown command /nosuch")


def test_send_streams_the_answer_as_it_is_written(daemon: Daemon) -> None:
    """send prints the answer's text deltas as they stream, before the message is stored."""
    ok(run(daemon.data, "new", "stream-1"))
    term = Terminal(
        [*CLI, "--data", str(daemon.data), "send", "stream-1", "!slow 0.3 one two three four"]
    )
    try:
        term.expect("assistant> ")
        at = term.expect("one")
        # The first word is on the screen while the message is not stored yet.
        stored = run(daemon.data, "history", "stream-1").stdout
        assert "assistant.message" not in stored, stored
        term.expect("four", after=at)
        assert term.wait() == 0
    finally:
        term.close()
    assert term.screen.count("one two three four") == 1, term.screen


def test_send_with_the_same_key_twice_stores_one_message(daemon: Daemon) -> None:
    """A retried send with the same --key is recognised: one user message is stored."""
    first = ok(run(daemon.data, "send", "key-1", "only once", "--create", "--key", "k-1"))
    assert "[scripted] only once" in first
    again = run(daemon.data, "send", "key-1", "only once", "--key", "k-1")
    assert again.returncode == 0 and "already stored at seq" in again.stderr, again.stderr
    assert "turn.completed" in again.stdout
    users = [
        line
        for line in ok(run(daemon.data, "history", "key-1", "--json")).splitlines()
        if json.loads(line)["kind"] == "user.message"
    ]
    assert len(users) == 1, users
    done = json.loads(
        ok(run(daemon.data, "send", "key-1", "only once", "--key", "k-1", "--json")).splitlines()[0]
    )
    assert done["duplicate"] is True
    # The same key with another text is a conflict: refused, nothing stored.
    fails(run(daemon.data, "send", "key-1", "x", "--key", "k-1"), 2, "already used")
    fails(run(daemon.data, "send", "key-1", "x", "--key", " "), 2, "--key")


def test_send_says_at_once_when_the_daemon_dies_during_its_turn(own_daemon: Daemon) -> None:
    """SIGKILL of the daemon while send waits for a hanging turn: exit 3 within seconds,
    not after the 60 s turn timeout."""
    import time

    own_daemon.start()
    ok(run(own_daemon.data, "new", "crash-1"))
    proc = subprocess.Popen(
        [*CLI, "--data", str(own_daemon.data), "send", "crash-1", "!hang"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
    )
    try:
        wait_for(lambda: "turn.started" in run(own_daemon.data, "history", "crash-1").stdout, 30)
        assert own_daemon.proc is not None
        killed = time.monotonic()
        own_daemon.proc.kill()
        own_daemon.wait_exited()
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 3, err
    assert "is gone while the turn ran" in err and "vertebra serve" in err, err
    assert took < 10, took


def test_interrupt_cuts_a_running_turn_off(daemon: Daemon) -> None:
    """interrupt on a hanging turn closes it as cancelled; unknown sessions are exit 4."""
    ok(run(daemon.data, "send", "int-1", "!hang", "--create", "--no-wait"))
    wait_for(lambda: "turn.started" in run(daemon.data, "history", "int-1").stdout, 30)
    assert "interrupted at seq" in ok(run(daemon.data, "interrupt", "int-1"))
    wait_for(lambda: "turn.cancelled" in run(daemon.data, "history", "int-1").stdout, 30)
    assert isinstance(json.loads(ok(run(daemon.data, "interrupt", "int-1", "--json")))["seq"], int)
    fails(run(daemon.data, "interrupt", "nobody"), 4, "unknown session")


def test_schedule_goal_opens_a_goal_run_when_it_fires(daemon: Daemon) -> None:
    """schedule --goal sets a timer whose firing opens a goal run (with its budget): timers
    lists it until then, wait prints the run's answer; a bad budget is a usage error."""
    ok(run(daemon.data, "new", "tgoal-1"))
    fails(
        run(daemon.data, "schedule", "tgoal-1", "+1", "x", "--goal", "--max-turns", "0"),
        2,
        "max_turns must be a positive",
    )
    later = ["schedule", "tgoal-1", "+1h", "later", "--goal", "--id", "later", "--max-turns", "2"]
    assert "timer later set: next at" in ok(run(daemon.data, *later))
    rows = [json.loads(x) for x in ok(run(daemon.data, "timers", "tgoal-1", "--json")).splitlines()]
    assert [(r["id"], r["goal"], r["budget"]) for r in rows] == [("later", True, {"max_turns": 2})]
    assert "goal run: later" in ok(run(daemon.data, "timers", "tgoal-1"))
    ok(run(daemon.data, "unschedule", "tgoal-1", "later"))
    ok(run(daemon.data, "schedule", "tgoal-1", "+1", "sum it up", "--goal"))
    # The run opens when the timer fires (its timer ends in the same append).
    wait_for(lambda: ok(run(daemon.data, "timers", "tgoal-1", "--json")) == "", 30)
    assert "[scripted] sum it up" in ok(run(daemon.data, "wait", "tgoal-1", "--timeout", "30"))


def test_submit_and_wait_run_a_goal_and_print_its_answer_or_stall(daemon: Daemon) -> None:
    """submit --wait prints the answer; wait prints it again without the daemon's help;
    a stalled run is exit 1 naming the reason; a session with no run is exit 2."""
    out = ok(run(daemon.data, "submit", "goal-1", "reach the answer", "--create", "--wait"))
    assert "[scripted] reach the answer" in out
    assert "reach the answer" in ok(run(daemon.data, "wait", "goal-1"))
    ok(run(daemon.data, "new", "goal-2", "--meta", "ore.model.max_tool_rounds=1"))
    loop = '!loop calculator {"expression": "1+1"}'
    assert "seq" in ok(run(daemon.data, "submit", "goal-2", loop, "--max-turns", "1"))
    fails(run(daemon.data, "wait", "goal-2", "--timeout", "30"), 1, "budget exceeded")
    line = json.loads(run(daemon.data, "wait", "goal-2", "--json").stdout)
    assert line["outcome"] == "stalled" and "budget exceeded" in line["error"]
    ok(run(daemon.data, "new", "goal-3"))
    fails(run(daemon.data, "wait", "goal-3"), 2, "has run no goal")


def test_close_closes_a_session_and_it_takes_no_more_messages(daemon: Daemon) -> None:
    """close records the end; a later send is refused; an unknown session is exit 4."""
    ok(run(daemon.data, "new", "close-1"))
    assert ok(run(daemon.data, "close", "close-1")).strip() == "closed close-1"
    fails(run(daemon.data, "send", "close-1", "hi"), 1, "is closed")
    assert "closed" in ok(run(daemon.data, "sessions"))
    ok(run(daemon.data, "new", "close-2"))
    assert json.loads(ok(run(daemon.data, "close", "close-2", "--json"))) == {"closed": "close-2"}
    fails(run(daemon.data, "close", "nobody"), 4, "unknown session")


def test_sessions_are_listed_aligned_or_as_json(daemon: Daemon) -> None:
    """The table's columns line up; --json gives one object per session."""
    ok(run(daemon.data, "new", "list-a"))
    ok(run(daemon.data, "new", "list-longer-name"))
    table = ok(run(daemon.data, "sessions")).splitlines()
    assert table[0].split() == ["SESSION", "STATE", "SEQ"]
    cols = {line.index(line.split()[1]) for line in table if line.startswith("list-")}
    assert len(cols) == 1 and cols == {table[0].index("STATE")}
    rows = [json.loads(x) for x in ok(run(daemon.data, "sessions", "--json")).splitlines()]
    assert {"session": "list-a", "state": "live", "seq": 1} in rows


# -- reading: history, tail, status -------------------------------------------------------------


def test_history_prints_the_stored_stream_without_a_daemon(
    daemon: Daemon, tmp_path: pathlib.Path
) -> None:
    """history reads the spine (human or exact stored JSON); unknown session exit 4;
    a directory without a spine says so."""
    ok(run(daemon.data, "send", "hist-1", "hello", "--create"))
    human = ok(run(daemon.data, "history", "hist-1"))
    assert re.search(r"^#2\s+user\.message\s+hello$", human, re.M)
    stored = sqlite3.connect(daemon.data / "spine.db").execute(
        "SELECT payload FROM events WHERE stream = 'hist-1' ORDER BY seq"
    )
    assert ok(run(daemon.data, "history", "hist-1", "--json")).splitlines() == [
        bytes(r[0]).decode() for r in stored
    ]
    fails(run(daemon.data, "history", "nobody"), 4, "unknown session")
    fails(run(tmp_path, "history", "x"), 1, "no spine")


def test_tail_follows_live_from_a_seq_with_kinds_exactly_once(daemon: Daemon) -> None:
    """tail --from/--kinds/--json prints the backlog then live events, each once, and ends
    when the session closes."""
    ok(run(daemon.data, "send", "tail-1", "first", "--create"))
    proc = subprocess.Popen(
        [*CLI, "--data", str(daemon.data), "tail", "tail-1", "--from", "4", "--json",
         "--kinds", "assistant.message,session.lifecycle"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
    )  # fmt: skip
    try:
        ok(run(daemon.data, "send", "tail-1", "second"))
        ok(run(daemon.data, "close", "tail-1"))
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    evs = [json.loads(x) for x in out.splitlines()]
    seqs = [e["seq"] for e in evs]
    assert seqs == sorted(set(seqs)) and min(seqs) >= 4
    assert {e["kind"] for e in evs} == {"assistant.message", "session.lifecycle"}
    assert [e["text"] for e in evs if e["kind"] == "assistant.message"] == [
        "[scripted] first",
        "[scripted] second",
    ]
    assert evs[-1]["phase"] == "closed"
    fails(run(daemon.data, "tail", "tail-1", "--kinds", "assistant.mesage"), 2, "unknown kind")
    fails(run(daemon.data, "tail", "nobody"), 4, "unknown session")


def test_tail_exits_130_on_ctrl_c(daemon: Daemon) -> None:
    """Ctrl-C (SIGINT) ends a tail with exit 130, as the README's exit codes say."""
    ok(run(daemon.data, "send", "tail-int", "hello", "--create"))
    proc = subprocess.Popen(
        [*CLI, "--data", str(daemon.data), "tail", "tail-int"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
    )
    try:
        assert proc.stdout is not None
        assert "user.message" in proc.stdout.readline() + proc.stdout.readline()
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 130


def test_offline_stats_names_an_unreadable_row_and_counts_the_rest(
    daemon: Daemon, tmp_path: pathlib.Path
) -> None:
    """stats without a daemon over a spine with one row that does not decode names its
    session and seq on stderr and still prints every other figure."""
    ok(run(daemon.data, "send", "stats-1", "hello", "--create"))
    path = tmp_path / "stats-1.jsonl"
    ok(run(daemon.data, "export", "stats-1", str(path)))
    data = tmp_path / "offline"
    ok(run(data, "import", str(path)))
    c = sqlite3.connect(data / "spine.db", isolation_level=None)
    c.execute("DROP TRIGGER IF EXISTS events_append_only_update")
    c.execute("UPDATE events SET payload = substr(payload, 1, 20) WHERE seq = 2")
    (total,) = c.execute("SELECT count(*) FROM events").fetchone()
    c.close()
    out = run(data, "stats")
    assert out.returncode == 0, out.stderr
    assert "left out stats-1 seq 2, which does not decode" in out.stderr, out.stderr
    events = re.search(r"^vertebra_log_events_total(?:\{[^}]*\})? (\d+)$", out.stdout, re.M)
    assert events is not None and int(events.group(1)) == total - 1, out.stdout


def test_trace_prints_each_parent_span_above_its_children(daemon: Daemon) -> None:
    """trace's human listing starts each trace at depth 0 and goes one level deeper at a
    time: every child span is under its parent."""
    ok(run(daemon.data, "send", "trace-1", '!tool calculator {"expression": "2+2"}', "--create"))
    lines = ok(run(daemon.data, "trace", "trace-1")).splitlines()
    assert lines
    last: dict[str, int] = {}
    for line in lines:
        trace, rest = line.split(" ", 1)
        depth = (len(rest) - len(rest.lstrip(" "))) // 2
        assert depth <= last.get(trace, -1) + 1, lines
        last[trace] = depth


def test_hosts_on_a_single_daemon_lists_none(daemon: Daemon) -> None:
    """hosts on a daemon that leads no cluster says so; --json prints no rows."""
    out = run(daemon.data, "hosts")
    assert out.returncode == 0 and out.stdout == "" and "no member hosts" in out.stderr
    assert ok(run(daemon.data, "hosts", "--json")) == ""


def test_hosts_lists_the_members_of_a_convention_the_daemon_leads(
    tmp_path: pathlib.Path, pg_url: str, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """hosts on a convention leader lists each member: name, alive, capacity, sessions."""
    from actors._runtime.system import free_port
    from actors._runtime.transport_auth import share_secret

    port = free_port()
    leader = Daemon(tmp_path / "lead")
    member = None
    try:
        leader.start(
            "--spine", pg_url, "--convention-leader", "--bind", "127.0.0.1", "--port", str(port)
        )
        no_leftover_processes.extend(leader.systems)
        share_secret(tmp_path / "lead", tmp_path / "m")
        member = subprocess.Popen(
            [
                *CLI,
                *("--data", str(tmp_path / "m"), "serve", "--spine", pg_url),
                *("--join", f"127.0.0.1:{port}", "--host-name", "m1", "--capacity", "7"),
                *("--bind", "127.0.0.1"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env(),
        )

        def rows() -> list[dict[str, Any]]:
            out = ok(run(tmp_path / "lead", "hosts", "--json"))
            return [json.loads(line) for line in out.splitlines()]

        got = wait_for(lambda: [r for r in rows() if r["alive"]], 60, 0.2)
        assert got == [{"host": "m1", "alive": True, "capacity": 7, "sessions": 0}]
        table = ok(run(tmp_path / "lead", "hosts")).splitlines()
        assert table[0].split() == ["HOST", "STATE", "CAPACITY", "SESSIONS"]
        assert table[1].split() == ["m1", "alive", "7", "0"]
    finally:
        if member is not None:
            member.send_signal(signal.SIGTERM)
            try:
                member.wait(30)
            finally:
                if member.poll() is None:
                    member.kill()
                    member.wait(10)
        leader.stop()


def test_tail_survives_a_daemon_restart(own_daemon: Daemon) -> None:
    """A tail keeps following across `vertebra stop` and a new `serve`: nothing lost,
    nothing twice."""
    own_daemon.start()
    data = own_daemon.data
    ok(run(data, "send", "rs-1", "before", "--create"))
    proc = subprocess.Popen(
        [*CLI, "--data", str(data), "tail", "rs-1", "--json", "--kinds", "user.message"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
    )  # fmt: skip
    try:
        assert "stopped" in json.loads(ok(run(data, "stop", "--json")))
        assert own_daemon.wait_exited() == 0
        own_daemon.start()
        ok(run(data, "send", "rs-1", "after"))
        ok(run(data, "close", "rs-1"))
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert [json.loads(x)["text"] for x in out.splitlines()] == ["before", "after"], err


def test_serve_resume_goals_continues_a_run_the_last_daemon_left(own_daemon: Daemon) -> None:
    """A goal run in flight when the daemon stops goes on when the next `serve` starts
    (resuming is the default), and `wait` prints its answer; one session.started, one
    convergence."""
    own_daemon.start()
    data = own_daemon.data
    ok(run(data, "submit", "rg-1", "!slow 0.3 a b c d e f", "--create"))
    wait_for(lambda: "turn.started" in run(data, "history", "rg-1").stdout, 30)
    ok(run(data, "stop"))
    assert own_daemon.wait_exited() == 0
    own_daemon.start()
    assert ok(run(data, "wait", "rg-1", "--timeout", "60")).strip().endswith("a b c d e f")
    lines = ok(run(data, "history", "rg-1", "--json")).splitlines()
    kinds = [json.loads(x)["kind"] for x in lines]
    assert kinds.count("session.converged") == 1
    assert sum(1 for x in lines if '"goal"' in x and "session.started" in x) == 1


def test_status_prints_the_projection(daemon: Daemon) -> None:
    """status gives aligned fields or JSON; unknown session exit 4."""
    ok(run(daemon.data, "send", "st-1", "hello", "--create"))
    fields = json.loads(ok(run(daemon.data, "status", "st-1", "--json")))
    assert fields["session"] == "st-1" and fields["turns"] == 1
    assert re.search(r"^turns\s+1$", ok(run(daemon.data, "status", "st-1")), re.M)
    fails(run(daemon.data, "status", "nobody"), 4, "unknown session")


def test_status_shows_admitted_rejected_pending_and_egress(daemon: Daemon) -> None:
    """status (text and JSON) shows what the README says the projection holds: admitted,
    completed and rejected actions, the actions waiting for approval, and the egress
    counts and ledger."""
    sandboxed = ["--meta", "governance.trust=sandboxed", "--meta", EGRESS_LOOPBACK]
    ok(run(daemon.data, "new", "st-gov", *sandboxed))
    fetches = [
        '!tool http_get {"url": "http://169.254.169.254/"}',
        '!tool http_get {"url": "http://127.0.0.1:9/"}',
    ]
    ok(run(daemon.data, "send", "st-gov", "\n".join(fetches), "--no-wait"))

    def waiting() -> dict[str, Any] | None:
        f = json.loads(ok(run(daemon.data, "status", "st-gov", "--json")))
        return f if f["pending"] else None

    fields = wait_for(waiting, 20)
    assert fields["rejected"] == 1 and fields["admitted"] >= 1
    assert (fields["egress_allowed"], fields["egress_blocked"]) == (0, 1)
    assert fields["egress"] == [{"host": "169.254.169.254", "allowed": False, "reason": "metadata"}]
    (w,) = fields["pending"]
    assert w["action"] == "http_get" and w["input"] == {"url": "http://127.0.0.1:9/"}
    text = ok(run(daemon.data, "status", "st-gov"))
    for pattern in (
        r"^admitted\s+\d+$",
        r"^rejected\s+1$",
        r"^pending\s+1$",
        r"^egress_blocked\s+1$",
    ):
        assert re.search(pattern, text, re.M), text
    assert f"call {w['call']} http_get" in text and "169.254.169.254 blocked (metadata)" in text
    ok(run(daemon.data, "reject", "st-gov", str(w["call"])))


def test_status_json_spells_usage_with_the_seeds_names(tmp_path: pathlib.Path) -> None:
    """status --json reads the spine alone and names the tokens as the seed does
    (usage.inputTokens, outputTokens, cacheReadTokens, cacheWriteTokens), with the cache
    hit rate of the status route."""
    data = tmp_path / "data"
    data.mkdir()
    log = open_log(LogSpec.sqlite(str(data / "spine.db")))
    try:
        u = Usage(input_tokens=100, output_tokens=7, cache_read_tokens=80, cache_write_tokens=3)
        log.append("u-1", [Event(kind=Kind.TURN_COMPLETED, turn=1, usage=u)])
    finally:
        log.close()
    fields = json.loads(ok(run(data, "status", "u-1", "--json")))
    assert fields["usage"] == {
        "inputTokens": 100,
        "outputTokens": 7,
        "cacheReadTokens": 80,
        "cacheWriteTokens": 3,
    }
    assert fields["cacheHitRate"] == 0.8 and "input_tokens" not in fields
    text = ok(run(data, "status", "u-1"))
    assert re.search(r"^usage\s+inputTokens 100  outputTokens 7", text, re.M)
    assert re.search(r"^cacheHitRate\s+80%$", text, re.M)


def test_status_says_where_the_context_window_stands(tmp_path: pathlib.Path) -> None:
    """status reports the context from the projection: the window and where it came from,
    the last request's input tokens and what is left, the compactions and the span the
    summary in force stands for."""
    data = tmp_path / "data"
    data.mkdir()
    log = open_log(LogSpec.sqlite(str(data / "spine.db")))
    try:
        measured = {"context": {"chars": 1200, "inputTokens": 300}}
        log.append(
            "ctx-1",
            [
                Event(kind=Kind.PROPERTIES, properties={"ore.model.context_window": "1000"}),
                Event(kind=Kind.USER_MESSAGE, text="hi"),
                Event(kind=Kind.ACTION_COMPLETED, action="model", call=1, extra=measured),
                Event(kind=Kind.CONTEXT_COMPACTED, text="s", extra={"fromSeq": 2, "toSeq": 3}),
            ],
        )
        log.append("plain-1", [Event(kind=Kind.USER_MESSAGE, text="hi")])
    finally:
        log.close()
    fields = json.loads(ok(run(data, "status", "ctx-1", "--json")))
    assert fields["context"] == {
        "window": 1000,
        "source": "setting",
        "used": 300,
        "remaining": 700,
        "fill": 0.3,
        "compactions": 1,
        "covered": {"fromSeq": 2, "toSeq": 3},
    }
    text = ok(run(data, "status", "ctx-1"))
    assert re.search(r"^context\s+window 1000  source setting  used 300  remaining 700", text, re.M)
    assert "covered events 2-3" in text
    assert "context" not in json.loads(ok(run(data, "status", "plain-1", "--json")))


# -- seal, verify, rebuild ---------------------------------------------------------------------


def test_seal_and_verify_through_the_daemon(daemon: Daemon) -> None:
    """seal then verify pass (text and JSON); an unknown session is exit 4."""
    ok(run(daemon.data, "send", "seal-1", "hello", "--create"))
    assert "sealed seqs 1.." in ok(run(daemon.data, "seal", "seal-1"))
    again = json.loads(ok(run(daemon.data, "seal", "seal-1", "--json")))
    assert again["first"] == again["last"] == again["seq"] - 1 and again["root"]
    assert "verified seqs 1.." in ok(run(daemon.data, "verify", "seal-1"))
    assert json.loads(ok(run(daemon.data, "verify", "seal-1", "--json")))["ok"] is True
    fails(run(daemon.data, "seal", "nobody"), 4, "unknown session")
    fails(run(daemon.data, "verify", "nobody"), 4, "unknown session")


def test_a_spine_other_than_the_daemons_is_refused_by_commands_through_the_daemon(
    daemon: Daemon, tmp_path: pathlib.Path
) -> None:
    """--spine naming another log than the daemon's is exit 2 naming both (never an answer
    about the daemon's own spine); the daemon's own spine named explicitly is fine; check
    reads the other spine offline and finds the edit there."""
    ok(run(daemon.data, "send", "sp-1", "hello", "--create"))
    ok(run(daemon.data, "seal", "sp-1"))
    path = tmp_path / "sp-1.jsonl"
    ok(run(daemon.data, "export", "sp-1", str(path)))
    other = tmp_path / "other.db"
    ok(run(daemon.data, "--spine", str(other), "import", str(path)))
    db = sqlite3.connect(other)
    db.execute("DROP TRIGGER events_append_only_update")
    db.execute("UPDATE events SET payload = replace(payload, 'hello', 'HELLO') WHERE seq = 2")
    db.commit()
    db.close()
    assert "HELLO" in ok(run(daemon.data, "--spine", str(other), "history", "sp-1"))
    for cmd in (("verify", "sp-1"), ("seal", "sp-1"), ("send", "sp-1", "x"), ("sessions",)):
        line = fails(run(daemon.data, "--spine", str(other), *cmd), 2, "--spine", "other.db")
        assert "spine.db" in line and f"`{cmd[0]}` goes through the daemon" in line, line
    own = str(daemon.data / "spine.db")
    assert "verified seqs 1.." in ok(run(daemon.data, "--spine", own, "verify", "sp-1"))
    checked = run(daemon.data, "--spine", str(other), "check")
    assert checked.returncode == 1 and "sp-1: 1 seal(s), TAMPERED at seq 2" in checked.stdout
    stats = run(daemon.data, "--spine", str(other), "stats")
    assert stats.returncode == 0 and "the daemon serves another spine" in stats.stderr


def test_check_verifies_every_seal_of_a_postgres_spine(
    daemon: Daemon, tmp_path: pathlib.Path, pg_url: str
) -> None:
    """check --spine postgresql://... verifies each session's seals and rows there (the
    pages are the server's to check), and finds an edited event by seq."""
    ok(run(daemon.data, "send", "pgc-1", "hello", "--create"))
    ok(run(daemon.data, "seal", "pgc-1"))
    path = tmp_path / "pgc-1.jsonl"
    ok(run(daemon.data, "export", "pgc-1", str(path)))
    ok(run(daemon.data, "--spine", pg_url, "import", str(path)))
    out = ok(run(daemon.data, "--spine", pg_url, "check"))
    assert "integrity: not checked here (postgresql" in out and "pgc-1: 1 seal(s), ok" in out
    done = json.loads(ok(run(daemon.data, "--spine", pg_url, "check", "--json")))
    assert done["ok"] is True and [r["session"] for r in done["sessions"]] == ["pgc-1"]
    import psycopg

    with psycopg.connect(pg_url) as conn:
        conn.execute("DROP TRIGGER IF EXISTS spine_events_append_only ON spine_events")
        conn.execute(
            "UPDATE spine_events SET payload = convert_to(replace(convert_from(payload, 'UTF8'),"
            " 'hello', 'HELLO'), 'UTF8') WHERE seq = 2"
        )
    out = run(daemon.data, "--spine", pg_url, "check")
    assert out.returncode == 1 and "pgc-1: 1 seal(s), TAMPERED at seq 2" in out.stdout


def test_rebuild_folds_every_event_again_with_a_progress_display(daemon: Daemon) -> None:
    """rebuild reports the events it folded; on a terminal it draws events/s and ETA."""
    ok(run(daemon.data, "send", "rb-1", "hello", "--create"))
    total = sqlite3.connect(daemon.data / "spine.db").execute("SELECT count(*) FROM events")
    count = total.fetchone()[0]
    done = json.loads(ok(run(daemon.data, "rebuild", "--json")))
    assert done["events"] >= count
    term = Terminal([*CLI, "--data", str(daemon.data), "rebuild"])
    try:
        term.expect("rebuilt the projections:")
        assert term.wait() == 0
    finally:
        term.close()
    assert re.search(r"\[#+\] 100%  [\d,]+/[\d,]+ events  [\d,]+ events/s  ETA", term.screen)


# -- export, import -------------------------------------------------------------------------


def test_export_then_import_keeps_every_stored_byte_and_never_overwrites(
    daemon: Daemon, tmp_path: pathlib.Path
) -> None:
    """An exported session imported under another id has the same stored events, byte for
    byte (so its seals still verify); importing over an existing stream is refused and
    leaves it alone; a damaged file is named."""
    ok(run(daemon.data, "send", "ex-1", '!tool search {"q": "x"}', "--create"))
    ok(run(daemon.data, "seal", "ex-1"))
    path = tmp_path / "ex-1.jsonl"
    assert "9 events" in ok(run(daemon.data, "export", "ex-1", str(path))) or path.exists()
    fails(run(daemon.data, "export", "ex-1", str(path)), 1, "exists", "--force")
    ok(run(daemon.data, "export", "ex-1", str(path), "--force"))
    original = ok(run(daemon.data, "history", "ex-1", "--json"))
    fails(run(daemon.data, "import", str(path)), 1, "already has", "never overwrites")
    assert ok(run(daemon.data, "history", "ex-1", "--json")) == original
    assert "imported ex-copy" in ok(run(daemon.data, "import", str(path), "--session", "ex-copy"))
    copied = ok(run(daemon.data, "history", "ex-copy", "--json")).splitlines()
    assert copied[:-1] == original.splitlines()
    assert json.loads(copied[-1])["properties"]["import.stream"] == "ex-1"
    # A seal names its stream: the copy verifies as imported from it, not as the original.
    assert "imported from stream 'ex-1'" in ok(run(daemon.data, "verify", "ex-copy"))
    # The copy is a session like any other.
    assert "[scripted] more" in ok(run(daemon.data, "send", "ex-copy", "more"))
    lines = path.read_text().splitlines()
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text("\n".join([lines[0], lines[1], lines[3]]) + "\n")
    fails(run(daemon.data, "import", str(damaged), "--session", "d-1"), 1, "line 3", "seq 3")
    fails(run(daemon.data, "import", str(tmp_path / "none")), 2, "no such file")
    done = json.loads(ok(run(daemon.data, "import", str(path), "--session", "ex-2", "--json")))
    assert done == {"session": "ex-2", "events": len(lines) - 1, "from": "ex-1"}
    fails(run(daemon.data, "export", "nobody", str(tmp_path / "n")), 4, "unknown session")


def test_an_imported_sealed_session_verifies_as_a_copy_and_check_stays_green(
    daemon: Daemon, own_daemon: Daemon, tmp_path: pathlib.Path
) -> None:
    """A sealed session exported and imported into a fresh data directory (and under
    another id): check exits 0, verify says it was imported from the original stream, the
    provenance names source, seals and keys, and auto-seal goes on sealing new writes."""
    ok(run(daemon.data, "send", "ex-seal", "hello", "--create"))
    ok(run(daemon.data, "seal", "ex-seal"))
    path = tmp_path / "ex-seal.jsonl"
    ok(run(daemon.data, "export", "ex-seal", str(path)))
    header = json.loads(path.read_text().splitlines()[0])
    assert len(header["keys"]) == 1
    fresh = own_daemon.data
    assert "imported ex-seal" in ok(run(fresh, "import", str(path)))
    ok(run(fresh, "import", str(path), "--session", "ex-renamed"))
    checked = json.loads(ok(run(fresh, "check", "--json")))
    assert checked["ok"] and all(r["ok"] and r["seals"] == 1 for r in checked["sessions"])
    assert "TAMPERED" not in ok(run(fresh, "check"))
    own_daemon.start("--seal-every", "3")
    for sid in ("ex-seal", "ex-renamed"):
        hist = [json.loads(x) for x in ok(run(fresh, "history", sid, "--json")).splitlines()]
        prov = next(e for e in hist if e["kind"] == "session.properties")["properties"]
        assert prov["import.stream"] == "ex-seal" and prov["import.seals"] == "1"
        assert prov["import.keys"] == next(iter(header["keys"]))
        said = ok(run(fresh, "verify", sid))
        assert "verified" in said and "imported from stream 'ex-seal'" in said
        before = len(hist)
        ok(run(fresh, "send", sid, "after the import"))
        wait_for(
            lambda sid=sid, before=before: any(
                json.loads(x)["kind"] == "record.sealed" and json.loads(x)["seq"] > before
                for x in ok(run(fresh, "history", sid, "--json")).splitlines()
            ),
            30,
        )
    own_daemon.stop()
    checked = json.loads(ok(run(fresh, "check", "--json")))
    assert checked["ok"] and all(r["seals"] >= 2 for r in checked["sessions"])


# -- output -----------------------------------------------------------------------------------


def test_human_output_is_colored_only_on_a_terminal_without_no_color(daemon: Daemon) -> None:
    """Piped output is plain; a terminal gets color unless NO_COLOR is set; --color
    forces either way."""
    ok(run(daemon.data, "send", "col-1", "hello", "--create"))
    assert ESC not in ok(run(daemon.data, "history", "col-1"))
    assert ESC in ok(run(daemon.data, "history", "col-1", "--color", "always"))
    for extra, colored in (({}, True), ({"NO_COLOR": "1"}, False)):
        term = Terminal([*CLI, "--data", str(daemon.data), "history", "col-1"], extra)
        try:
            assert term.wait() == 0
        finally:
            term.close()
        assert "user.message" in term.screen
        assert (ESC in term.raw) is colored, term.raw


# -- stop -------------------------------------------------------------------------------------


def test_stop_shuts_the_daemon_down_and_waits_until_it_has(own_daemon: Daemon) -> None:
    """stop returns once the daemon exited cleanly and its file is gone; sessions come
    back on the next start."""
    own_daemon.start()
    ok(run(own_daemon.data, "send", "stop-1", "hello", "--create"))
    assert "stopped the daemon" in ok(run(own_daemon.data, "stop"))
    assert not (own_daemon.data / "daemon.json").exists()
    assert own_daemon.wait_exited(10) == 0
    fails(run(own_daemon.data, "stop"), 3, "no daemon runs")
    own_daemon.start()
    assert "[scripted] again" in ok(run(own_daemon.data, "send", "stop-1", "again"))


# -- chat ------------------------------------------------------------------------------------


def _chat(data: pathlib.Path, *args: str) -> Terminal:
    return Terminal([*CLI, "--data", str(data), "chat", *args])


def _ctrl_c(term: Terminal, seen: Any) -> Any:
    """Press Ctrl-C until ``seen()`` holds. A Ctrl-C that lands just as ``input()`` draws
    its prompt is held by the interpreter's readline loop until the next key (CPython
    checks for signals only when its select wakes), so a user may need a second press;
    the chat is not involved."""
    for _ in range(4):
        term.type("\x03")
        try:
            return seen()
        except AssertionError:
            continue
    return seen()


def test_chat_talks_streams_interrupts_and_leaves_on_a_second_ctrl_c(daemon: Daemon) -> None:
    """In a terminal: a message gets its answer, the up arrow recalls it, a slash command
    its notice, a slow answer streams in word by word and Ctrl-C cuts it off; Ctrl-C at
    the prompt asks again and a second one leaves."""
    term = _chat(daemon.data, "chat-1", "--create")
    try:
        at = term.expect("you> ")
        term.type("hello\r")
        at = term.expect("[scripted] hello", after=at)
        at = term.expect("you> ", after=at)
        term.type("\x1b[A\r")  # readline: the previous line again
        at = term.expect("[scripted] hello", after=at)
        at = term.expect("you> ", after=at)
        term.type("/model big\r")
        at = term.expect("[success] model set to big", after=at)
        at = term.expect("you> ", after=at)
        term.type("!slow 0.3 one two three four five six seven eight nine ten\r")
        at = term.expect("[big] one two", after=at)  # streamed before the turn ends
        term.type("\x03")
        at = term.expect("turn cancelled", after=at)
        at = term.expect("you> ", after=at)
        at = _ctrl_c(term, lambda: term.expect("Ctrl-C again", timeout=3, after=at))
        term.expect("you> ", after=at)
        assert _ctrl_c(term, lambda: term.wait(timeout=3)) == 0
    finally:
        term.close()
    assert "ten" not in term.screen.rsplit("[big] one", 1)[1]
    hist = ok(run(daemon.data, "history", "chat-1", "--json"))
    users = [json.loads(x)["text"] for x in hist.splitlines() if '"user.message"' in x]
    # The slash command was consumed by the session's interceptor: stored as metadata.
    assert users == ["hello", "hello", users[-1]] and users[-1].startswith("!slow")
    assert "ore.model.name" in hist
    assert kinds_of(hist).count("turn.cancelled") == 1


def test_chat_sends_a_line_typed_while_a_turn_runs_as_a_steer(daemon: Daemon) -> None:
    """With --steer, a line typed while a slow answer streams is stored at once as a steer;
    the turn has no safe point (no tool), so it ends first, the steer is handed to the
    next turn, and the chat follows that turn's answer too before the prompt returns."""
    term = _chat(daemon.data, "steer-chat", "--create", "--steer")
    try:
        at = term.expect("you> ")
        term.type("!slow 0.2 one two three four five six seven eight\r")
        at = term.expect("[scripted] one", after=at)
        term.type("and in French\r")
        at = term.expect("(sent while the turn runs: seq", after=at)
        at = term.expect("eight", after=at)
        at = term.expect("[scripted] and in French", after=at)
        term.expect("you> ", after=at)
    finally:
        term.close()
    hist = [
        json.loads(x) for x in ok(run(daemon.data, "history", "steer-chat", "--json")).splitlines()
    ]
    steer = next(e for e in hist if e.get("text") == "and in French")
    assert steer["kind"] == "user.message" and steer.get("steer") is True
    dropped = [e for e in hist if e["kind"] == "steer.dropped"]
    assert [(e["steer"], e["handed"]) for e in dropped] == [(steer["seq"], "next")]
    assert [e["kind"] for e in hist].count("turn.completed") == 2


def test_chat_shows_other_clients_messages_and_answers_live_at_the_prompt(
    daemon: Daemon,
) -> None:
    """While the chat waits for input, another client's message and its answer appear at
    once (no Enter needed), and the half-typed line is drawn again below them, intact."""
    term = _chat(daemon.data, "live-1", "--create")
    try:
        at = term.expect("you> ")
        term.type("half ")
        at = term.expect("half ", after=at)
        ok(run(daemon.data, "send", "live-1", "from elsewhere"))
        at = term.expect("(elsewhere) > from elsewhere", after=at)
        at = term.expect("[scripted] from elsewhere", after=at)
        at = term.expect("you> half ", after=at)
        term.type("done\r")
        at = term.expect("[scripted] half done", after=at)
        term.expect("you> ", after=at)
        term.type("\x04")
        assert term.wait() == 0
    finally:
        term.close()
    hist = ok(run(daemon.data, "history", "live-1", "--json"))
    users = [json.loads(x)["text"] for x in hist.splitlines() if '"user.message"' in x]
    assert users == ["from elsewhere", "half done"]


def test_chat_leaves_on_ctrl_d_and_starts_a_new_session_without_an_id(daemon: Daemon) -> None:
    """chat without an id creates a session; Ctrl-D leaves at once with exit 0; other
    clients' messages appear before the next prompt."""
    term = _chat(daemon.data)
    try:
        term.expect("you> ")
        sid = re.search(r"chat with (\S+)", term.screen)
        assert sid is not None
        ok(run(daemon.data, "send", sid.group(1), "from elsewhere", "--no-wait"))
        term.type("hi\r")
        term.expect("(elsewhere) > from elsewhere")
        at = term.expect("[scripted] hi")
        term.expect("you> ", after=at)
        term.type("\x04")
        assert term.wait() == 0
    finally:
        term.close()


def test_chat_on_an_unknown_session_without_create_is_an_error(daemon: Daemon) -> None:
    """chat SESSION needs --create for a new id: exit 4, naming the flag; bad ids exit 2;
    a closed session is refused."""
    fails(run(daemon.data, "chat", "nobody-chat"), 4, "unknown session", "--create")
    fails(run(daemon.data, "chat", "bad*id"), 2, "bad session id")
    ok(run(daemon.data, "new", "chat-closed"))
    ok(run(daemon.data, "close", "chat-closed"))
    fails(run(daemon.data, "chat", "chat-closed"), 1, "is closed")


# -- demo -------------------------------------------------------------------------------------


def test_the_demo_runs_to_the_end_and_leaves_a_gapless_stream(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """The quick start's demo completes: the kill and recovery of its session, a goal run
    whose two children run at the same time and fold back, a late replay, a seal, and the
    status projections with the fan-out drawn as a tree."""
    out = run(tmp_path / "d", "demo")
    assert out.returncode == 0, out.stderr
    assert "seqs gapless: True" in out.stdout and "restarts: 1" in out.stdout
    assert "approval needed: action" in out.stdout and "blocked (metadata)" in out.stdout
    assert out.stdout.count("child.spawned") == 2 and out.stdout.count("child.completed") == 2
    assert "children ran concurrently: True" in out.stdout
    assert "converged: spawn returned [scripted] the first half" in out.stdout
    assert "a late subscriber to planner replayed seqs 1.." in out.stdout
    assert "verified planner: True" in out.stdout
    tree = out.stdout[out.stdout.index("    planner\n") :].splitlines()[:7]
    assert tree[1].startswith("    ├── planner-toolu_1_0_1  done  turns 1  trust standard")
    assert tree[1].endswith("blocked 0  seal verified")
    assert tree[2].startswith("    │     objective: !slow 0.04 the first half")
    assert tree[3].startswith("    │     result:    [scripted] the first half")
    assert tree[4].startswith("    └── planner-toolu_1_0_2  done  turns 1")
    assert "guarded: 1 turns" in out.stdout and "egress blocked 1" in out.stdout
    assert os.path.exists(tmp_path / "d" / "spine.db")
    # Again on the same data directory: a run of its own, the first one's left alone.
    before = ok(run(tmp_path / "d", "history", "planner", "--json"))
    again = run(tmp_path / "d", "demo")
    assert again.returncode == 0, again.stderr
    assert "verified planner-2: True" in again.stdout and "guarded-2: 1 turns" in again.stdout
    assert "children ran concurrently: True" in again.stdout
    assert ok(run(tmp_path / "d", "history", "planner", "--json")) == before
    # `vertebra status` draws the same tree from the stream, and lists it as JSON.
    status = run(tmp_path / "d", "status", "planner")
    assert status.returncode == 0, status.stderr
    assert "  ├── planner-toolu_1_0_1  done  turns 1" in status.stdout
    status = run(tmp_path / "d", "status", "planner", "--json")
    nodes = json.loads(status.stdout)["fanout"]
    assert [(n["id"], n["parent"], n["state"], n["seal"]) for n in nodes] == [
        ("planner-toolu_1_0_1", "planner", "done", "verified"),
        ("planner-toolu_1_0_2", "planner", "done", "verified"),
    ]


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
        out = run(data, "send", "chat-1", "hello postgres", "--create")
        assert out.returncode == 0 and "[scripted] hello postgres" in out.stdout, out.stderr
        out = run(data, "history", "chat-1")
        assert out.returncode == 0 and "hello postgres" in out.stdout, out.stderr
        out = run(data, "seal", "chat-1")
        assert out.returncode == 0 and "sealed seqs 1.." in out.stdout, out.stderr
        out = run(data, "verify", "chat-1")
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
    out = run(tmp_path / "elsewhere", "--spine", pg_url, "history", "chat-1")
    assert out.returncode == 0 and "hello postgres" in out.stdout, out.stderr


def test_an_unknown_spine_url_is_refused_with_a_clear_error(tmp_path: pathlib.Path) -> None:
    """A spine URL of no known backend names the problem instead of a traceback."""
    out = run(tmp_path, "--spine", "mysql://x/y", "history", "s")
    assert out.returncode == 2 and "unknown log URL" in out.stderr, out.stderr


def test_chat_reads_lines_from_a_pipe_and_ends_at_the_end_of_input(daemon: Daemon) -> None:
    """Without a terminal, chat takes one message per line, prints each turn plainly, and
    exits 0 at the end of input."""
    out = run(
        daemon.data,
        "chat",
        "piped-1",
        "--create",
        stdin='hello\n!tool calculator {"expression": "6*7"}\n',
    )
    text = ok(out)
    assert ESC not in text
    assert text.index("[scripted] hello") < text.index("calculator")
    assert "calculator returned 42" in text


#: The fetches below dial loopback: allowed, or the gate refuses them before any approval.
EGRESS_LOOPBACK = "governance.egress_allow=127.0.0.1"


def test_pending_approve_and_reject_decide_waiting_actions(daemon: Daemon) -> None:
    """A sandboxed session's http_get waits for a human: pending lists it, reject refuses
    it, approve runs the next one once; bad and unknown calls are one-line errors."""
    sandboxed = ["--meta", "governance.trust=sandboxed", "--meta", EGRESS_LOOPBACK]
    ok(run(daemon.data, "new", "gov-1", *sandboxed))
    fetch = '!tool http_get {"url": "http://127.0.0.1:9/"}'
    ok(run(daemon.data, "send", "gov-1", fetch, "--no-wait"))

    def waiting() -> list[dict[str, object]]:
        text = ok(run(daemon.data, "pending", "gov-1", "--json"))
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    (first,) = wait_for(waiting, 20)
    assert first["action"] == "http_get" and first["input"] == {"url": "http://127.0.0.1:9/"}
    assert str(first["call"]) in ok(run(daemon.data, "pending", "gov-1"))
    # A result by hand is for a call in doubt; this one never ran.
    call = str(first["call"])
    fails(run(daemon.data, "resolve", "gov-1", call, "--result", "done"), 2, "not in doubt")
    fails(run(daemon.data, "resolve", "gov-1", call), 2, "--result")
    assert "rejected" in ok(run(daemon.data, "reject", "gov-1", str(first["call"]), "--note", "no"))
    fails(run(daemon.data, "approve", "gov-1", str(first["call"])), 2, "already rejected")
    fails(run(daemon.data, "approve", "gov-1", "0"), 2, "positive integer")
    fails(run(daemon.data, "approve", "gov-1", "424242"), 2, "no action 424242")
    wait_for(lambda: not waiting(), 20)
    assert "no action waits" in ok(run(daemon.data, "pending", "gov-1"))
    ok(run(daemon.data, "send", "gov-1", fetch, "--no-wait"))
    (second,) = wait_for(waiting, 20)
    # --answer is a server's question's answer: a JSON object, and never for an approval.
    call = str(second["call"])
    fails(run(daemon.data, "approve", "gov-1", call, "--answer", "[1]"), 2, "JSON object")
    fails(run(daemon.data, "approve", "gov-1", call, "--answer", '{"a": 1}'), 2, "no content")
    out = json.loads(ok(run(daemon.data, "approve", "gov-1", str(second["call"]), "--json")))
    assert out["decision"] == "approved" and not out["duplicate"]
    again = json.loads(ok(run(daemon.data, "approve", "gov-1", str(second["call"]), "--json")))
    assert again["duplicate"]
    fails(run(daemon.data, "pending", "nobody-here"), 4, "unknown session")


def test_chat_asks_for_approval_inline_and_the_answer_decides(daemon: Daemon) -> None:
    """A waiting action is shown in the chat with its input and asked about: y approves
    (the tool runs), anything else rejects."""
    sandboxed = ["--meta", "governance.trust=sandboxed", "--meta", EGRESS_LOOPBACK]
    ok(run(daemon.data, "new", "gov-chat", *sandboxed))
    fetch = '!tool http_get {"url": "http://127.0.0.1:9/"}'
    lines = f"{fetch}\ny\n{fetch}\nn\n"
    text = ok(run(daemon.data, "chat", "gov-chat", stdin=lines))
    assert text.count("approval needed: action") == 2
    assert "approved" in text and "rejected" in text
    hist = [
        json.loads(x) for x in ok(run(daemon.data, "history", "gov-chat", "--json")).splitlines()
    ]
    faults = [e.get("fault") for e in hist if e["kind"] == "action.rejected"]
    assert faults == ["approval_rejected"]
    assert any(e["kind"] == "net.egress" for e in hist)  # the approved fetch ran (and was refused)


# -- the README's examples ---------------------------------------------------------------------

README = pathlib.Path(__file__).parent.parent / "README.md"
#: A block whose first line says this is left out (it names what it needs).
NOT_RUN = "# not run by the README test:"


def readme_commands(text: str) -> list[str]:
    """The README's shell commands in order: every ```sh block but those marked
    `NOT_RUN`, continuation lines joined, comment lines left out."""
    commands: list[str] = []
    for block in re.findall(r"^```sh\n(.*?)^```$", text, re.M | re.S):
        if block.startswith(NOT_RUN):
            continue
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                commands.append(line)
    return commands


def test_the_readme_examples_run_in_order_on_one_data_directory(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """Every shell example of the README not marked as needing something else runs, top
    to bottom, in one directory: the installs are this checkout, `vertebra serve` is a
    daemon the test starts (its HTTP gateway on a free port, not 8080) and stops at the
    end, and no command fails or answers an HTTP error."""
    pytest.importorskip("starlette", reason="the HTTP examples need the http extra (starlette)")
    pytest.importorskip("uvicorn", reason="the HTTP examples need the http extra (uvicorn)")
    from actors._runtime.system import free_port

    port = free_port()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "vertebra"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -m actors.cli "$@"\n')
    wrapper.chmod(0o755)
    repo = README.parent
    environ = env(
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        PYTHONPATH=f"{repo}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    )
    work = tmp_path / "work"
    work.mkdir()
    daemon = Daemon(work / "vertebra-data")
    script: list[str] = []
    outputs: list[str] = []

    def run_script() -> None:
        if not script:
            return
        body = "\n".join(script)
        script.clear()
        done = subprocess.run(
            ["bash", "-c", body],
            cwd=work,
            env=environ,
            capture_output=True,
            text=True,
            timeout=240,
            stdin=subprocess.DEVNULL,
        )
        outputs.append(done.stdout)
        assert done.returncode == 0, (done.stdout, done.stderr)

    try:
        for command in readme_commands(README.read_text()):
            command = command.replace(".venv/bin/vertebra", "vertebra")
            command = command.replace("127.0.0.1:8080", f"127.0.0.1:{port}")
            # The installs are this checkout's; the steps that only install are dropped.
            steps = [
                s.strip()
                for s in command.split("&&")
                if "pip install" not in s and "-m venv" not in s
            ]
            if not steps:
                continue
            command = " && ".join(steps)
            if re.match(r"vertebra( --data \S+)? serve\b", command):
                if daemon.proc is None:
                    run_script()
                    daemon.start("--http", f"127.0.0.1:{port}")
                    no_leftover_processes.extend(daemon.systems)
                continue
            # Each command must succeed; an example ended by --max-time ends by timing out.
            allowed = " -a $rc -ne 28" if "--max-time" in command else ""
            quoted = command.replace("'", "'\"'\"'")
            script.append(
                f"{command}\nrc=$?\nif [ $rc -ne 0{allowed} ]; then "
                f"echo 'README command failed ('$rc'): {quoted}' >&2; exit 1; fi"
            )
        run_script()
        assert daemon.proc is not None, "the README starts no daemon"
    finally:
        daemon.stop()
        daemon.check_no_leftovers()
    out = "\n".join(outputs)
    # The gateway's errors are {"error": CODE, "message": ...} (a 409 on a reused id...).
    assert not re.search(r'\{"error":\s*"[^"]+",\s*"message"', out), out
    assert "verified planner: True" in out and "[scripted] hello" in out
    assert "already stored at seq" not in out  # said on stderr; stdout shows the turn
    assert '"seq":2,"duplicate":false' in out.replace(" ", ""), out
    assert '"state":"converged"' in out.replace(" ", ""), out
    users = run(work / "vertebra-data", "history", "chat-1", "--json").stdout
    assert [json.loads(x)["text"] for x in users.splitlines() if '"user.message"' in x] == ["hello"]
