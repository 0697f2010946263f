"""The command line's pure parts, without processes: parsing, formatting, progress, exports."""

from __future__ import annotations

import io
import pathlib

import pytest

from actors.cli._commands import COMMANDS, EXPORT_FORMAT
from actors.cli._daemon import CliError
from actors.cli._format import (
    Rate,
    Style,
    duration,
    event_line,
    fanout_tree,
    parse_kinds,
    parse_meta,
    progress_line,
    table,
    use_color,
)
from actors.cli._parser import build_parser, data_dir
from actors.cli._transfer import read_export
from spine import Event, Kind, encode_event


def parse(*argv: str):  # type: ignore[no-untyped-def]
    return build_parser(COMMANDS).parse_args(list(argv))


def test_a_global_option_after_the_command_wins_and_one_before_is_kept() -> None:
    """--data before the command, after it, or both (the later one wins)."""
    assert parse("--data", "a", "sessions").data == "a"
    assert parse("sessions", "--data", "b").data == "b"
    assert parse("--data", "a", "sessions", "--data", "b").data == "b"
    assert parse("sessions").data is None
    assert parse("--color", "never", "sessions").color == "never"
    assert parse("sessions", "--color", "always").color == "always"


def test_the_data_directory_comes_from_the_flag_then_the_environment_then_the_default() -> None:
    """data_dir: --data, else VERTEBRA_DATA, else ./vertebra-data."""
    assert data_dir(parse("--data", "x", "sessions"), {"VERTEBRA_DATA": "y"}) == "x"
    assert data_dir(parse("sessions"), {"VERTEBRA_DATA": "y"}) == "y"
    assert data_dir(parse("sessions"), {}) == "vertebra-data"


def test_a_bad_argument_raises_one_usage_error_naming_the_command() -> None:
    """Leftover arguments and bad values become a CliError with exit 2 and the help hint."""
    with pytest.raises(CliError) as err:
        parse("tail", "s", "--bogus")
    assert err.value.code == 2 and "`vertebra tail --help`" in str(err.value)
    with pytest.raises(CliError, match="seqs start at 1"):
        parse("tail", "s", "--from", "0")
    with pytest.raises(CliError, match="not allowed with"):
        parse("tail", "s", "--from", "2", "--after", "3")
    with pytest.raises(CliError, match="--spares must be a whole number 0-64, not '-1'"):
        parse("serve", "--spares", "-1")


def test_serve_keeps_three_warm_spares_unless_told_otherwise() -> None:
    assert (parse("serve").spares, parse("serve").cold_spares) == (3, False)
    cold = parse("serve", "--spares", "0", "--cold-spares")
    assert (cold.spares, cold.cold_spares) == (0, True)


def test_color_is_used_only_on_a_terminal_without_no_color() -> None:
    """auto colors a terminal unless NO_COLOR (any value) or TERM=dumb; flags force it."""
    assert use_color("auto", True, {})
    assert not use_color("auto", False, {})
    assert not use_color("auto", True, {"NO_COLOR": ""})
    assert not use_color("auto", True, {"TERM": "dumb"})
    assert use_color("always", False, {"NO_COLOR": "1"})
    assert not use_color("never", True, {})


def test_tables_align_columns_whatever_the_cell_widths() -> None:
    """Every column starts at the same offset in every row, plain or colored header."""
    lines = table(("A", "BB"), [("long-value", 1), ("x", 22)], Style(False))
    assert lines == ["A           BB", "long-value  1", "x           22"]
    colored = table(("A",), [("x",)], Style(True))
    assert colored[0] == "\x1b[1mA\x1b[0m" and colored[1] == "x"


def test_event_lines_pad_the_kind_before_coloring_it() -> None:
    """Colored and plain event lines have the text at the same visible column."""
    ev = Event(kind=Kind.USER_MESSAGE, text="hi", seq=3)
    plain = event_line(ev, Style(False))
    colored = event_line(ev, Style(True))
    assert plain == "#3     user.message         hi"
    assert colored.replace("\x1b[36m", "").replace("\x1b[0m", "") == plain


def test_meta_pairs_and_kind_lists_are_checked() -> None:
    """K=V keeps '=' in values and refuses a pair without one; kinds must be known."""
    assert parse_meta(["a=1", "b=x=y", "c="]) == {"a": "1", "b": "x=y", "c": ""}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_meta(["novalue"])
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_meta(["=v"])
    assert parse_kinds("a, b", ["a", "b", "c"]) == ("a", "b")
    with pytest.raises(ValueError, match="unknown kind 'd'"):
        parse_kinds("a,d", ["a", "b"])
    with pytest.raises(ValueError, match="at least one"):
        parse_kinds(",", ["a"])


def test_the_rate_and_eta_follow_the_recent_samples() -> None:
    """events/s over the window and the time left at that rate; unknown before two samples."""
    r = Rate(window=10.0)
    r.add(0.0, 0)
    assert r.per_second() == 0.0 and r.eta(100) is None
    r.add(2.0, 50)
    assert r.per_second() == 25.0 and r.eta(100) == 2.0
    assert duration(None) == "?" and duration(4.4) == "4s" and duration(125) == "2m05s"
    assert duration(3720) == "1h02m"
    line = progress_line(50, 100, 25.0, 2.0, width=10)
    assert line == "[#####.....]  50%  50/100 events  25 events/s  ETA 2s"
    assert progress_line(0, 0, 0.0, None, width=4).startswith("[####] 100%")


def _export(*events: Event, session: str = "s-1", count: int | None = None) -> io.StringIO:
    head = f'{{"format":"{EXPORT_FORMAT}","session":"{session}","events":{count or len(events)}}}'
    body = [encode_event(ev).decode() for ev in events]
    return io.StringIO("\n".join([head, *body]) + "\n")


def test_an_export_is_read_back_and_every_problem_is_named() -> None:
    """read_export returns the session and events; a wrong header, a gap in seqs, a count
    mismatch or an undecodable line is a ValueError naming the line."""
    a = Event(kind=Kind.USER_MESSAGE, text="hi", seq=1)
    b = Event(kind=Kind.ASSISTANT, text="ho", seq=2)
    sid, evs = read_export(_export(a, b), EXPORT_FORMAT)
    assert sid == "s-1" and [e.text for e in evs] == ["hi", "ho"]
    with pytest.raises(ValueError, match="line 2: seq 2 where 1"):
        read_export(_export(b), EXPORT_FORMAT)
    with pytest.raises(ValueError, match="announces 3"):
        read_export(_export(a, b, count=3), EXPORT_FORMAT)
    with pytest.raises(ValueError, match=r"not a vertebra\.export/1 header"):
        read_export(io.StringIO('{"format":"other"}\n'), EXPORT_FORMAT)
    with pytest.raises(ValueError, match="empty file"):
        read_export(io.StringIO(""), EXPORT_FORMAT)
    bad = _export(a)
    bad.seek(0, 2)
    bad.write("{not json\n")
    bad.seek(0)
    with pytest.raises(ValueError, match="line 3"):
        read_export(bad, EXPORT_FORMAT)


def test_help_loads_neither_the_actor_system_nor_the_spine() -> None:
    """`vertebra --help` and a command's help import no runtime module: startup stays at
    tens of milliseconds (docs/performance.md has the figures)."""
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "from actors.cli import main\n"
        "for argv in (['--help'], ['chat', '--help'], ['--version']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = ('thespian', 'spine', 'projections', 'actors.host', 'actors.agents', 'attrs')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m in heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_the_actors_package_still_offers_its_public_names_and_submodules() -> None:
    """The lazy package __init__ resolves every exported name and plain submodules."""
    import actors

    for name in actors.__all__:
        assert getattr(actors, name) is not None, name
    assert actors.agents.ScriptedFactory is actors.ScriptedFactory
    with pytest.raises(AttributeError):
        _ = actors.no_such_thing


def test_the_fan_out_is_drawn_as_a_tree_with_grandchildren_under_their_parent() -> None:
    """Flat nodes with parent ids become a tree: children in spawn order under the root,
    a grandchild under its own parent, each with state, turns, trust, blocked, seal,
    objective and (once folded) result."""
    from projections import FanoutChild, FanoutState, RecordState

    nodes = [
        FanoutChild(
            id="p-a",
            parent="p",
            objective="first",
            state=FanoutState.DONE,
            turns=2,
            result="A",
            trust="standard",
            seal=RecordState.SEALED,
        ),
        FanoutChild(
            id="p-b", parent="p", objective="second", turns=1, trust="sandboxed", blocked=1
        ),
        FanoutChild(
            id="p-b-c",
            parent="p-b",
            objective="deeper",
            state=FanoutState.FAILED,
            result="cancelled",
        ),
    ]
    assert fanout_tree("p", nodes, Style(False)) == [
        "p",
        "├── p-a  done  turns 2  trust standard  blocked 0  seal sealed",
        "│     objective: first",
        "│     result:    A",
        "└── p-b  running  turns 1  trust sandboxed  blocked 1  seal recording",
        "      objective: second",
        "    └── p-b-c  failed  turns 0  trust -  blocked 0  seal recording",
        "          objective: deeper",
        "          result:    cancelled",
    ]


def test_a_daemon_on_its_way_out_removes_only_its_own_daemon_file(tmp_path: pathlib.Path) -> None:
    """A daemon exiting after another has started on the directory leaves the new file."""
    from actors.cli._daemon import DAEMON_FILE, DaemonInfo, remove_daemon, write_daemon

    data = str(tmp_path)
    write_daemon(data, DaemonInfo(pid=4242, admin_port=1, version="x", system_session=0, spine=""))
    remove_daemon(data, pid=1234)
    assert (tmp_path / DAEMON_FILE).exists()
    remove_daemon(data, pid=4242)
    assert not (tmp_path / DAEMON_FILE).exists()
    remove_daemon(data, pid=4242)  # already gone: nothing to do


def test_spans_are_listed_parents_first_with_children_indented_under_them() -> None:
    """A child that starts before its parent (or is stored before it) still comes after
    it, one level deeper; siblings go by start; traces by their first span."""
    from types import SimpleNamespace

    from actors.cli._format import span_tree

    def span(sid: str, parent: str, start: int, trace: str = "t1") -> SimpleNamespace:
        return SimpleNamespace(span_id=sid, parent_span_id=parent, start=start, trace_id=trace)

    spans = [
        span("tool", "turn", 5),
        span("model", "turn", 1),
        span("turn", "", 2),
        span("other", "", 0, trace="t2"),
        span("nested", "tool", 6),
    ]
    tree = [(depth, s.span_id) for depth, s in span_tree(spans, lambda s: s.start)]
    assert tree == [(0, "turn"), (1, "model"), (1, "tool"), (2, "nested"), (0, "other")]


def test_check_of_a_spine_that_holds_nothing_yet_says_so_and_creates_nothing(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from actors.cli import main

    missing = tmp_path / "never.db"
    assert main(["--data", str(tmp_path / "d"), "--spine", str(missing), "check"]) == 1
    err = capsys.readouterr().err
    assert f"no spine at {str(missing)!r} (nothing stored there yet)" in err
    assert main(["--data", str(tmp_path / "d"), "check"]) == 1
    assert "no spine in" in capsys.readouterr().err
    assert not missing.exists()


def test_check_of_a_sound_sqlite_spine_runs_its_integrity_check(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from actors.cli import main
    from spine import open_log

    path = tmp_path / "one.db"
    with open_log(path) as log:
        log.append("s-1", [Event(kind=Kind.SESSION_STARTED)])
    assert main(["--data", str(tmp_path), "--spine", str(path), "check"]) == 0
    out = capsys.readouterr().out
    assert "integrity: ok" in out and "s-1" in out


def test_submit_takes_a_money_budget_above_zero() -> None:
    assert parse("submit", "s1", "x", "--max-cost", "0.25").max_cost == 0.25
    assert parse("submit", "s1", "x").max_cost is None
    with pytest.raises(Exception, match="must be above zero: '0'"):
        parse("submit", "s1", "x", "--max-cost", "0")
    assert parse("schedule", "s1", "+10m", "x", "--goal", "--max-cost", "2").max_cost == 2.0


def test_serve_resumes_goal_runs_unless_told_not_to() -> None:
    """Goal runs a previous daemon left in flight resume by default; the flag turns it off."""
    assert parse("serve").resume_goals is True
    assert parse("serve", "--resume-goals").resume_goals is True
    assert parse("serve", "--no-resume-goals").resume_goals is False
