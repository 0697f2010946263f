"""The command table (`COMMANDS`): one row per command, naming the function that declares
its arguments and the one that runs it.

The commands live in modules by what they do: `_serve_commands` (serve, stop, demo, with
serve's options in `_serve_options`), `_session_commands`, `_reading_commands`,
`_integrity_commands` and `_maintenance_commands`. Adding a command is a pair of functions
there and a row here; adding an option is a line in the command's ``*_args`` function.
Runtime imports happen inside the run functions, so building the parser
(``vertebra --help``) imports none of them.
"""

from __future__ import annotations

from ._conversation_commands import (
    branches,
    branches_args,
    edit,
    edit_args,
    fork,
    fork_args,
    regenerate,
    regenerate_args,
    replay,
    replay_args,
    switch_branch,
    switch_branch_args,
)
from ._daemon import alive
from ._goal_commands import resume, resume_args, submit, submit_args, wait, wait_args
from ._integrity_commands import (
    check,
    check_args,
    recover,
    recover_args,
    seal,
    seal_args,
    verify,
    verify_args,
)
from ._maintenance_commands import (
    EXPORT_FORMAT,
    export,
    export_args,
    import_,
    import_args,
    rebuild,
    rebuild_args,
    revive,
    revive_args,
    token,
    token_args,
)
from ._output import Out
from ._parser import Command
from ._reading_commands import (
    history,
    history_args,
    hosts,
    hosts_args,
    sessions,
    sessions_args,
    stats,
    stats_args,
    status,
    status_args,
    tail,
    tail_args,
    trace,
    trace_args,
)
from ._resolve_command import resolve, resolve_args
from ._serve_commands import demo, demo_args, serve, stop, stop_args
from ._serve_options import serve_args
from ._session_commands import (
    approve,
    chat,
    chat_args,
    close,
    close_args,
    decide_args,
    interrupt,
    interrupt_args,
    new,
    new_args,
    pending,
    pending_args,
    reject,
    send,
    send_args,
)
from ._timer_commands import (
    approve_args,
    budget,
    budget_args,
    schedule,
    schedule_args,
    timers,
    timers_args,
    unschedule,
    unschedule_args,
)

COMMANDS: tuple[Command, ...] = (
    Command(
        "serve",
        "run the daemon: Runner, sessions, the spine (SQLite by default); prints every event",
        ("vertebra serve --data ./vertebra-data --idle-timeout 60",),
        serve_args,
        serve,
    ),
    Command(
        "stop",
        "shut the running daemon down cleanly and wait until it has",
        ("vertebra stop --data ./vertebra-data",),
        stop_args,
        stop,
    ),
    Command(
        "pending",
        "list a session's actions waiting for a human's approval",
        ("vertebra pending chat-1", "vertebra pending chat-1 --json"),
        pending_args,
        pending,
    ),
    Command(
        "approve",
        "approve a waiting action: it runs once, even after a restart",
        (
            "vertebra approve chat-1 17",
            "vertebra approve chat-1 17 --note 'looks right'",
            "vertebra approve chat-1 17 --raise 5  # a call paused for the cost budget",
        ),
        approve_args,
        approve,
    ),
    Command(
        "reject",
        "reject a waiting action: it never runs and the model is told why",
        ("vertebra reject chat-1 17 --note 'not in production'",),
        decide_args,
        reject,
    ),
    Command(
        "resolve",
        "answer a call in doubt with the outcome you know it had: the turn goes on with it",
        ("vertebra resolve chat-1 18 --result 'appended one line' --note 'checked the file'",),
        resolve_args,
        resolve,
    ),
    Command(
        "timers",
        "list a session's timers and schedules, next due first (no daemon needed)",
        ("vertebra timers chat-1", "vertebra timers chat-1 --json"),
        timers_args,
        timers,
    ),
    Command(
        "schedule",
        "set a timer: its firings reach the session as messages or open goal runs "
        "(cron, +10m, or an ISO time)",
        (
            "vertebra schedule chat-1 '0 9 * * 1-5' 'daily report' --tz Europe/Paris",
            "vertebra schedule chat-1 +10m 'check the build'",
            "vertebra schedule chat-1 '0 18 * * 5' 'sum up the week' --goal --max-turns 5",
        ),
        schedule_args,
        schedule,
    ),
    Command(
        "unschedule",
        "cancel a timer",
        ("vertebra unschedule chat-1 t-1a2b3c4d5e6f",),
        unschedule_args,
        unschedule,
    ),
    Command(
        "budget",
        "what a session spent under the operator's prices, its budget, a pause for it",
        ("vertebra budget chat-1", "vertebra budget --tenants"),
        budget_args,
        budget,
    ),
    Command(
        "chat",
        "talk to a session interactively (Ctrl-C interrupts a turn, Ctrl-D leaves)",
        ("vertebra chat", "vertebra chat chat-1 --create"),
        chat_args,
        chat,
    ),
    Command(
        "new",
        "create a session and print its id",
        ("vertebra new chat-1 --meta ore.model.name=scripted --meta objective=demo",),
        new_args,
        new,
    ),
    Command(
        "send",
        "send a message through the daemon and print the turn",
        ("vertebra send chat-1 'hello there' --create", "vertebra send chat-1 '/model big'"),
        send_args,
        send,
    ),
    Command(
        "interrupt",
        "cut a session's running turn off",
        ("vertebra interrupt chat-1",),
        interrupt_args,
        interrupt,
    ),
    Command(
        "regenerate",
        "answer a session's last user message again, on a new branch",
        ("vertebra regenerate chat-1", "vertebra regenerate chat-1 12"),
        regenerate_args,
        regenerate,
    ),
    Command(
        "edit",
        "start a new branch from a past user message with new text",
        ("vertebra edit chat-1 6 'what about Paris?'",),
        edit_args,
        edit,
    ),
    Command(
        "branches",
        "list the branches of a session's turn tree (* marks the active path)",
        ("vertebra branches chat-1", "vertebra branches chat-1 --json"),
        branches_args,
        branches,
    ),
    Command(
        "switch-branch",
        "make the branch through a turn the active path (what the model sees)",
        ("vertebra switch-branch chat-1 6",),
        switch_branch_args,
        switch_branch,
    ),
    Command(
        "fork",
        "copy a session's events up to a seq into a new session, with provenance",
        ("vertebra fork chat-1 --at 40 --id chat-1b",),
        fork_args,
        fork,
    ),
    Command(
        "replay",
        "fork a session and re-run its user messages on another model, comparing answers",
        ("vertebra replay chat-1 --model gpt-4o-mini", "vertebra replay chat-1 --json"),
        replay_args,
        replay,
    ),
    Command(
        "close",
        "close a session (it takes no more messages)",
        ("vertebra close chat-1",),
        close_args,
        close,
    ),
    Command(
        "check",
        "check the spine file's integrity and every session's seals",
        ("vertebra check", "vertebra check --json"),
        check_args,
        check,
    ),
    Command(
        "recover",
        "copy every readable event of a damaged spine into a new one",
        ("vertebra recover vertebra-data recovered.db",),
        recover_args,
        recover,
    ),
    Command(
        "revive",
        "bring back a session that failed past its restart budget",
        ("vertebra revive chat-1 --reason 'disk replaced'",),
        revive_args,
        revive,
    ),
    Command(
        "sessions",
        "list the sessions with their state and last seq",
        ("vertebra sessions", "vertebra sessions --json"),
        sessions_args,
        sessions,
    ),
    Command(
        "hosts",
        "list the hosts of a cluster the daemon leads: alive, capacity, sessions placed",
        ("vertebra hosts", "vertebra hosts --json"),
        hosts_args,
        hosts,
    ),
    Command(
        "submit",
        "open a goal run: the session works on OBJECTIVE until it converges or stalls",
        (
            'vertebra submit research "summarise the spec" --create --max-turns 5 --wait',
            "vertebra submit s1 objective --max-seconds 60 --max-cost 0.5 --json",
        ),
        submit_args,
        submit,
    ),
    Command(
        "wait",
        "print a goal run's answer once it ends (exit 1 if it stalled or is interrupted)",
        ("vertebra wait research", "vertebra wait research --timeout 30 --json"),
        wait_args,
        wait,
    ),
    Command(
        "resume",
        "continue a goal run nothing drives (a daemon started with --no-resume-goals)",
        ("vertebra resume research", "vertebra resume research --json"),
        resume_args,
        resume,
    ),
    Command(
        "history",
        "print a session's stored events (no daemon needed)",
        ("vertebra history chat-1", "vertebra history chat-1 --json | jq .kind"),
        history_args,
        history,
    ),
    Command(
        "tail",
        "follow a session's events live, exactly once, until it closes",
        ("vertebra tail chat-1 --from 10 --kinds assistant.message,tool.call --json",),
        tail_args,
        tail,
    ),
    Command(
        "status",
        "print a session's status projection",
        ("vertebra status chat-1 --json",),
        status_args,
        status,
    ),
    Command(
        "trace",
        "write a session's turns, model and tool calls as OpenTelemetry spans (no daemon needed)",
        (
            "vertebra trace chat-1 --otlp-json chat-1.otlp.json",
            "vertebra trace chat-1 --otlp-endpoint http://127.0.0.1:4318/v1/traces",
        ),
        trace_args,
        trace,
    ),
    Command(
        "stats",
        "print turn, token, session and sink figures in the Prometheus text format",
        ("vertebra stats", "vertebra stats --json"),
        stats_args,
        stats,
    ),
    Command(
        "seal",
        "seal what is new in a session (signed Merkle root)",
        ("vertebra seal chat-1",),
        seal_args,
        seal,
    ),
    Command(
        "verify",
        "verify a session's seals (exit 1 if tampered)",
        ("vertebra verify chat-1",),
        verify_args,
        verify,
    ),
    Command(
        "rebuild",
        "rebuild the projections from zero, showing events/s and ETA",
        ("vertebra rebuild",),
        rebuild_args,
        rebuild,
    ),
    Command(
        "export",
        "write a session's stream to a file as JSON lines, seqs preserved",
        ("vertebra export chat-1 chat-1.jsonl",),
        export_args,
        export,
    ),
    Command(
        "import",
        "store an exported stream as a new session (never overwrites)",
        ("vertebra import chat-1.jsonl", "vertebra import chat-1.jsonl --session copy-1"),
        import_args,
        import_,
    ),
    Command(
        "token",
        "mint an HTTP bearer token scoped to sessions (printed once), list them, revoke one",
        (
            "vertebra token create --session chat-1 --expires 7d",
            "vertebra token create --session a --read-only",
            "vertebra token create --tenant acme",
            "vertebra token list",
            "vertebra token revoke tok_0123456789ab",
        ),
        token_args,
        token,
    ),
    Command(
        "demo",
        "the full runtime: slash command, tool call, approval, blocked egress, a goal run "
        "fanning out to two concurrent children, interrupt, recovery, replay, seal, and "
        "each session's status with the fan-out tree",
        ("vertebra demo --data ./demo-data",),
        demo_args,
        demo,
    ),
)

__all__ = ["COMMANDS", "EXPORT_FORMAT", "Out", "alive"]
