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
from collections.abc import Iterator
from typing import Any

import pytest
from cli_support import CLI, Daemon, Terminal, env, run
from conftest import wait_for

from actors._version import __version__
from actors.cli._commands import COMMANDS
from spine import Event, Kind, LogSpec, Usage, open_log

pytestmark = pytest.mark.timeout(180)

ESC = "\x1b["


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = Daemon(tmp_path_factory.mktemp("cli") / "data").start()
    try:
        yield d
    finally:
        try:
            d.stop()
        finally:
            d.check_no_leftovers()


@pytest.fixture
def own_daemon(tmp_path: pathlib.Path) -> Iterator[Daemon]:
    """A daemon of the test's own, for tests that stop or restart it."""
    d = Daemon(tmp_path / "own")
    try:
        yield d
    finally:
        try:
            d.stop()
        finally:
            d.check_no_leftovers()


def ok(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 0, out.stderr
    return out.stdout


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
    listed = dict(re.findall(r"^    (\w+)\s{2,}(\S.*)$", text, re.M))
    assert set(listed) == {c.name for c in COMMANDS}
    readme = (pathlib.Path(__file__).parent.parent / "README.md").read_text()
    section = readme.split("## The command line", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `vertebra (\w+)[^`]*` \| (.*) \|$", section, re.M))
    assert rows == listed
    # The options a row shows are the command's own.
    for name, synopsis in re.findall(r"^\| `vertebra (\w+)([^`]*)` \|", section, re.M):
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


def test_interrupt_cuts_a_running_turn_off(daemon: Daemon) -> None:
    """interrupt on a hanging turn closes it as cancelled; unknown sessions are exit 4."""
    ok(run(daemon.data, "send", "int-1", "!hang", "--create", "--no-wait"))
    wait_for(lambda: "turn.started" in run(daemon.data, "history", "int-1").stdout, 30)
    assert "interrupted at seq" in ok(run(daemon.data, "interrupt", "int-1"))
    wait_for(lambda: "turn.cancelled" in run(daemon.data, "history", "int-1").stdout, 30)
    assert isinstance(json.loads(ok(run(daemon.data, "interrupt", "int-1", "--json")))["seq"], int)
    fails(run(daemon.data, "interrupt", "nobody"), 4, "unknown session")


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
    """A goal run in flight when the daemon stops goes on when `serve --resume-goals`
    starts, and `wait` prints its answer; one session.started, one convergence."""
    own_daemon.start()
    data = own_daemon.data
    ok(run(data, "submit", "rg-1", "!slow 0.3 a b c d e f", "--create"))
    wait_for(lambda: "turn.started" in run(data, "history", "rg-1").stdout, 30)
    ok(run(data, "stop"))
    assert own_daemon.wait_exited() == 0
    own_daemon.start("--resume-goals")
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
    assert ok(run(daemon.data, "history", "ex-copy", "--json")) == original
    # A seal names its stream: under another id the copy does not pass as the original.
    assert "seals stream 'ex-1'" in run(daemon.data, "verify", "ex-copy").stdout
    # The copy is a session like any other.
    assert "[scripted] more" in ok(run(daemon.data, "send", "ex-copy", "more"))
    lines = path.read_text().splitlines()
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text("\n".join([lines[0], lines[1], lines[3]]) + "\n")
    fails(run(daemon.data, "import", str(damaged), "--session", "d-1"), 1, "line 3", "seq 3")
    fails(run(daemon.data, "import", str(tmp_path / "none")), 2, "no such file")
    done = json.loads(ok(run(daemon.data, "import", str(path), "--session", "ex-2", "--json")))
    assert done == {"session": "ex-2", "events": len(lines) - 1}
    fails(run(daemon.data, "export", "nobody", str(tmp_path / "n")), 4, "unknown session")


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


def test_pending_approve_and_reject_decide_waiting_actions(daemon: Daemon) -> None:
    """A sandboxed session's http_get waits for a human: pending lists it, reject refuses
    it, approve runs the next one once; bad and unknown calls are one-line errors."""
    ok(run(daemon.data, "new", "gov-1", "--meta", "governance.trust=sandboxed"))
    fetch = '!tool http_get {"url": "http://127.0.0.1:9/"}'
    ok(run(daemon.data, "send", "gov-1", fetch, "--no-wait"))

    def waiting() -> list[dict[str, object]]:
        text = ok(run(daemon.data, "pending", "gov-1", "--json"))
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    (first,) = wait_for(waiting, 20)
    assert first["action"] == "http_get" and "127.0.0.1:9" in str(first["input"])
    assert str(first["call"]) in ok(run(daemon.data, "pending", "gov-1"))
    assert "rejected" in ok(run(daemon.data, "reject", "gov-1", str(first["call"]), "--note", "no"))
    fails(run(daemon.data, "approve", "gov-1", str(first["call"])), 2, "already rejected")
    fails(run(daemon.data, "approve", "gov-1", "0"), 2, "positive integer")
    fails(run(daemon.data, "approve", "gov-1", "424242"), 2, "no action 424242")
    wait_for(lambda: not waiting(), 20)
    assert "no action waits" in ok(run(daemon.data, "pending", "gov-1"))
    ok(run(daemon.data, "send", "gov-1", fetch, "--no-wait"))
    (second,) = wait_for(waiting, 20)
    out = json.loads(ok(run(daemon.data, "approve", "gov-1", str(second["call"]), "--json")))
    assert out["decision"] == "approved" and not out["duplicate"]
    again = json.loads(ok(run(daemon.data, "approve", "gov-1", str(second["call"]), "--json")))
    assert again["duplicate"]
    fails(run(daemon.data, "pending", "nobody-here"), 4, "unknown session")


def test_chat_asks_for_approval_inline_and_the_answer_decides(daemon: Daemon) -> None:
    """A waiting action is shown in the chat with its input and asked about: y approves
    (the tool runs), anything else rejects."""
    ok(run(daemon.data, "new", "gov-chat", "--meta", "governance.trust=sandboxed"))
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
