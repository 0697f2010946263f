"""The options of ``vertebra serve`` and the checks on how they combine (one host, a
convention's leader, or a member joining one)."""

from __future__ import annotations

import argparse
from typing import Any

from ._daemon import EXIT_USAGE, CliError
from ._parser import count, positive, tcp_port

#: `actors.policy.DAEMON_SEAL_POLICY`, spelled out so that `--help` imports no attrs (a
#: test keeps the two equal).
SEAL_EVERY = 1000
SEAL_INTERVAL = 60.0
#: `actors.policy.SnapshotPolicy`'s defaults, spelled out for the same reason.
SNAPSHOT_EVERY = 1000
SNAPSHOT_BYTES = 4 * 1024 * 1024


def serve_args(p: argparse.ArgumentParser) -> None:
    # Declared in this order, which is the order `serve --help` lists them in.
    _daemon_options(p)
    _timer_options(p)
    _output_options(p)
    _storage_and_door_options(p)
    _bounds_options(p)
    _convention_options(p)


def _timer_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--timer-lead",
        type=float,
        default=1.0,
        metavar="S",
        help="bring a passivated session back S seconds before its next timer (default 1)",
    )


def _daemon_options(p: argparse.ArgumentParser) -> None:
    """The admin port, passivation, auto-sealing and printing of events."""
    p.add_argument("--port", type=tcp_port, default=None, help="admin port (default: a free one)")
    p.add_argument(
        "--idle-timeout",
        type=positive,
        default=300.0,
        metavar="S",
        help="passivate a session idle for S seconds (default 300)",
    )
    p.add_argument(
        "--seal-every",
        type=int,
        default=SEAL_EVERY,
        metavar="N",
        help=f"sessions seal themselves every N events (default {SEAL_EVERY}; 0: not by count)",
    )
    p.add_argument(
        "--seal-interval",
        type=float,
        default=SEAL_INTERVAL,
        metavar="S",
        help="and within S seconds of the first unsealed event "
        f"(default {SEAL_INTERVAL:g}; 0: not by time)",
    )
    p.add_argument(
        "--prices",
        metavar="FILE",
        default=None,
        help="the operator's price table (JSON: version, currency, models) that prices "
        "every session's spending against governance.max_cost",
    )
    p.add_argument("--quiet", action="store_true", help="do not print events")
    p.add_argument(
        "--providers",
        metavar="FILE",
        default=None,
        help="the provider profiles sessions may choose (default: DATA/providers.toml if present)",
    )
    p.add_argument(
        "--allow-model-url",
        metavar="URL",
        action="append",
        default=[],
        help="a keyless model server (base URL) sessions may name themselves, e.g. a local "
        "llama.cpp or Ollama; repeat for more (default: none, only provider profiles)",
    )
    p.add_argument("--for-seconds", type=positive, default=None, help=argparse.SUPPRESS)


def _output_options(p: argparse.ArgumentParser) -> None:
    """What the daemon serves and logs besides its admin port: HTTP, logs, spans."""
    p.add_argument(
        "--http", metavar="ADDR", default=None, help="also serve HTTP + SSE on HOST:PORT"
    )
    p.add_argument(
        "--http-allow-remote", action="store_true", help="allow a non-loopback --http address"
    )
    p.add_argument(
        "--resume-goals",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="resume the goal runs a previous daemon left in flight, reading every stream "
        "as it starts (default: on; --no-resume-goals leaves them interrupted)",
    )
    p.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="json: every line printed and logged is one JSON object (session, seq, kind)",
    )
    p.add_argument(
        "--log-level",
        default=None,
        metavar="LEVEL",
        help="level of DATA/vertebra.log, Thespian's records included (default WARNING)",
    )
    p.add_argument(
        "--otlp-endpoint",
        default=None,
        metavar="URL",
        help="export spans live over OTLP/HTTP (e.g. http://127.0.0.1:4318/v1/traces; "
        "needs the otel extra)",
    )


def _spare_count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if not 0 <= n <= 64:
        raise argparse.ArgumentTypeError(f"--spares must be a whole number 0-64, not {text!r}")
    return n


def _snapshot_options(p: argparse.ArgumentParser) -> None:
    """When sessions write their snapshots (`actors.policy.SnapshotPolicy`)."""
    p.add_argument(
        "--snapshot-every",
        type=count,
        default=SNAPSHOT_EVERY,
        metavar="N",
        help=f"sessions snapshot their state every N events (default {SNAPSHOT_EVERY}; 0: not "
        "by count), so a restart folds only what follows",
    )
    p.add_argument(
        "--snapshot-bytes",
        type=count,
        default=SNAPSHOT_BYTES,
        metavar="B",
        help=f"or once B bytes were stored since the last (default {SNAPSHOT_BYTES}; 0: not "
        "by size)",
    )


def _storage_and_door_options(p: argparse.ArgumentParser) -> None:
    """How durable the spine is, how often sessions snapshot, the spare processes, where
    the A2A door's notifications go."""
    p.add_argument(
        "--durability",
        choices=("normal", "full"),
        default="normal",
        help="what an acknowledged event survives on a SQLite spine: normal, a crash of any "
        "process; full, a power cut too (a disk sync per commit)",
    )
    _snapshot_options(p)
    p.add_argument(
        "--spares",
        type=_spare_count,
        default=3,
        metavar="N",
        help="session processes kept started ahead of need (default 3; 0: none)",
    )
    p.add_argument(
        "--cold-spares",
        action="store_true",
        help="do not warm spare processes up: about 1 MB less memory per session, a "
        "slower first turn (a goal's children above all)",
    )
    p.add_argument(
        "--a2a-webhook",
        metavar="URL",
        default=None,
        help="POST every A2A task's pauses and ends here, signed (the a2a extra)",
    )
    p.add_argument(
        "--a2a-webhook-secret-env",
        metavar="NAME",
        default="VERTEBRA_A2A_WEBHOOK_SECRET",
        help="the environment variable holding the webhook's signing secret",
    )


#: ``serve`` option -> (the `Limits` field, its type); None: the gateway's default.
_LIMITS = {
    "http_max_connections": ("connections", int),
    "http_header_timeout": ("header", float),
    "http_body_timeout": ("body", float),
    "http_idle_timeout": ("idle", float),
}
#: ``serve`` option -> (the `Quotas` field, its type); None: no bound.
_QUOTAS = {
    "tenant_sessions": ("sessions", int),
    "tenant_turns": ("turns", int),
    "tenant_rate": ("rate", float),
    "tenant_burst": ("burst", int),
    "tenant_max_cost": ("cost", float),
}


def _bounds_options(p: argparse.ArgumentParser) -> None:
    """The HTTP gateway's connection limits and every tenant's quotas."""
    g = p.add_argument_group("HTTP limits and tenant quotas (with --http)")
    helps = {
        "http_max_connections": ("N", "connections held at once (default: half the file limit)"),
        "http_header_timeout": ("S", "seconds to a request head's end (default 10)"),
        "http_body_timeout": ("S", "seconds from the head to the body's end (default 30)"),
        "http_idle_timeout": ("S", "seconds a kept-alive connection may idle (default 5)"),
        "tenant_sessions": ("N", "live sessions each tenant may hold (default: no bound)"),
        "tenant_turns": ("N", "turns each tenant's sessions may run at once (default: no bound)"),
        "tenant_rate": ("R", "requests a second each tenant's tokens may make (default: no bound)"),
        "tenant_burst": ("N", "requests a tenant may make at once within its rate (default 20)"),
        "tenant_max_cost": ("AMOUNT", "what each tenant's sessions may spend together (--prices)"),
    }
    for dest, (metavar, text) in helps.items():
        kind = {**_LIMITS, **_QUOTAS}[dest][1]
        flag = "--" + dest.replace("_", "-")
        g.add_argument(flag, type=positive if kind is float else _count, metavar=metavar, help=text)


def _count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def gateway_bounds(args: argparse.Namespace) -> dict[str, Any]:
    """``limits`` and ``quotas`` for `start_gateway`, from the options given (an option
    given without ``--http`` is refused)."""
    given = {k: v for k in (*_LIMITS, *_QUOTAS) if (v := getattr(args, k, None)) is not None}
    if given and getattr(args, "http", None) is None:
        flag = "--" + next(iter(given)).replace("_", "-")
        raise CliError(f"{flag} needs --http ADDR", EXIT_USAGE)
    if not given:
        return {}
    from ..gateway import Limits, Quotas

    out: dict[str, Any] = {}
    limits = {_LIMITS[k][0]: v for k, v in given.items() if k in _LIMITS}
    quotas = {_QUOTAS[k][0]: v for k, v in given.items() if k in _QUOTAS}
    if limits:
        out["limits"] = Limits(**limits)
    if quotas:
        out["quotas"] = Quotas(**quotas)
    return out


def _convention_options(p: argparse.ArgumentParser) -> None:
    """Leading a convention of hosts, or joining one as a member."""
    hosts = p.add_argument_group("several hosts (a PostgreSQL --spine shared by all)")
    role = hosts.add_mutually_exclusive_group()
    role.add_argument(
        "--convention-leader",
        action="store_true",
        help="lead a convention: run the Runner and projections, place sessions on members",
    )
    role.add_argument(
        "--join", metavar="ADDR:PORT", default=None, help="join the leader's convention as a member"
    )
    hosts.add_argument(
        "--host-name", default=None, metavar="NAME", help="this member's name (with --join)"
    )
    hosts.add_argument(
        "--capacity",
        type=int,
        default=None,
        metavar="N",
        help="sessions this member should carry (with --join; default 10)",
    )
    hosts.add_argument(
        "--bind",
        default=None,
        metavar="ADDR",
        help="the one private address every listener binds (default 127.0.0.1)",
    )


def cluster_role(args: argparse.Namespace) -> str:
    """ "leader", "member" or "" (a single host), after checking the options fit."""
    leader, join = getattr(args, "convention_leader", False), getattr(args, "join", None)
    if not leader and join is None:
        for opt in ("host_name", "capacity", "bind"):
            if getattr(args, opt, None) is not None:
                flag = "--" + opt.replace("_", "-")
                raise CliError(f"{flag} needs --convention-leader or --join", EXIT_USAGE)
        return ""
    if not _shared(getattr(args, "spine", None) or ""):
        raise CliError(
            "several hosts share one PostgreSQL log: give --spine postgresql://...", EXIT_USAGE
        )
    if leader:
        for opt in ("host_name", "capacity"):
            if getattr(args, opt, None) is not None:
                flag = "--" + opt.replace("_", "-")
                raise CliError(f"{flag} is for a member (--join)", EXIT_USAGE)
        return "leader"
    if not args.host_name:
        raise CliError("a member needs --host-name NAME", EXIT_USAGE)
    if args.capacity is not None and args.capacity < 1:
        raise CliError(f"--capacity is at least 1, got {args.capacity}", EXIT_USAGE)
    return "member"


__all__ = ["SEAL_EVERY", "SEAL_INTERVAL", "cluster_role", "gateway_bounds", "serve_args"]


def _shared(spine: str) -> bool:
    """Whether the log at ``spine`` is on a backend that several hosts can share."""
    from spine import InvalidArgumentError, backend

    try:
        return bool(spine) and backend(spine).shared
    except InvalidArgumentError:
        return False
