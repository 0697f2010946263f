"""``vertebra serve`` (the daemon, alone, as a convention's leader or as a member),
``vertebra stop`` and ``vertebra demo``: the commands that run an actor system."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

from .._version import __version__
from ._access import add_json
from ._daemon import (
    EXIT_NO_DAEMON,
    EXIT_USAGE,
    LOCK_FILE,
    CliError,
    DaemonInfo,
    acquire_lock,
    holds_lock,
    read_daemon,
    remove_daemon,
    wait_stopped,
    write_daemon,
)
from ._format import Style, event_line, json_line
from ._output import JsonOut, Out
from ._parser import positive
from ._serve_options import cluster_role, gateway_bounds

if TYPE_CHECKING:
    from ..host import Host
    from ..policy import SealPolicy


def serve(args: argparse.Namespace, out: Out) -> int:
    """Run the daemon until SIGINT, SIGTERM or `vertebra stop`, printing every event."""
    seal_policy = _seal_policy(args)
    role = cluster_role(args)
    _claim_data_dir(args.data)
    stop = _stop_on_signals()
    out = _log_setup(args, out)
    if role == "member":
        return _serve_member(args, out, stop)
    spine = getattr(args, "spine", None) or None
    bind = _leader_bind(args) if role == "leader" else None
    host = _start_host(args, seal_policy, spine, bind)
    gateway = None
    try:
        _publish(args, host, out, spine)
        gateway = _start_http(args, host, out)
        _greet(args, host, out, bind)
        _wait_for_stop(args, stop)
    finally:
        if gateway is not None:
            gateway.stop()
        host.close()
        # Last, once the actor system is down: `vertebra stop` waits for this.
        remove_daemon(args.data, pid=os.getpid())
    out.line("vertebra daemon: stopped")
    return 0


def _seal_policy(args: argparse.Namespace) -> SealPolicy:
    from ..policy import SealPolicy

    if args.seal_every < 0 or not 0 <= args.seal_interval < float("inf"):
        raise CliError("--seal-every and --seal-interval must be 0 or more", EXIT_USAGE)
    return SealPolicy(every=args.seal_every, interval=args.seal_interval)


def _claim_data_dir(data: str) -> None:
    """Make the data directory this daemon's, owner-only."""
    from spine import private_dir

    private_dir(data)
    if not os.access(data, os.W_OK):
        raise CliError(
            f"the data directory {data!r} is read-only: a daemon writes there (history, "
            f"status, export and check read it as it is)"
        )
    # Held (by this process and, inherited, every actor process) until the last of them
    # exits: a second daemon on the directory is refused, a dead one's leftovers reaped.
    acquire_lock(data)
    # Holding the lock, any daemon.json here is a dead daemon's.
    remove_daemon(data)
    # Whatever the daemon and its actor processes create later (an extra's files
    # included) is owner-only too.
    os.umask(0o077)


def _stop_on_signals() -> threading.Event:
    """An event that SIGINT and SIGTERM set."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def _wait_for_stop(args: argparse.Namespace, stop: threading.Event) -> None:
    deadline = None if args.for_seconds is None else time.monotonic() + args.for_seconds
    while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
        stop.wait(1.0 if deadline is None else min(1.0, deadline - time.monotonic()))


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else ""


def _log_setup(args: argparse.Namespace, out: Out) -> Out:
    """Select the log format and level for this process and the actor processes it starts
    (they read the environment), before the actor system exists."""
    import logging

    from .._runtime.logformat import FORMAT_ENV, LEVEL_ENV

    level = getattr(args, "log_level", None)
    if level:
        if not isinstance(logging.getLevelName(level.upper()), int):
            raise CliError(
                f"bad --log-level {level!r}: use DEBUG, INFO, WARNING or ERROR", EXIT_USAGE
            )
        os.environ[LEVEL_ENV] = level.upper()
    if getattr(args, "log_format", "text") != "json":
        return out
    os.environ[FORMAT_ENV] = "json"
    return JsonOut(Style(color=False), out.stdout, out.stderr)


def _serve_member(args: argparse.Namespace, out: Out, stop: threading.Event) -> int:
    """A member host: an actor system in the leader's convention, until stopped."""
    from ..errors import InvalidRequest
    from ..host.member import MemberHost

    try:
        member = MemberHost(
            args.data,
            leader=args.join,
            name=args.host_name,
            capacity=args.capacity or 10,
            bind=args.bind or "127.0.0.1",
            admin_port=args.port,
            spine=getattr(args, "spine", None),
        )
    except InvalidRequest as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    except Exception as exc:
        raise CliError(
            f"the member could not start: {type(exc).__name__}: {_first_line(exc)}"
        ) from None
    try:
        out.line(
            f"vertebra member {member.name} {__version__}: joined {args.join}, "
            f"admin port {member.admin_port} on {member.bind}; stop with Ctrl-C"
        )
        _wait_for_stop(args, stop)
    finally:
        member.close()
    out.line("vertebra member: stopped")
    return 0


def _leader_bind(args: argparse.Namespace) -> str:
    """The convention leader's private address, checked."""
    from ..errors import InvalidRequest
    from ..host.member import check_address

    try:
        return check_address(args.bind or "127.0.0.1")
    except InvalidRequest as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def _prices(args: argparse.Namespace) -> dict[str, Any] | None:
    """The operator's price table of ``--prices``, checked; None without one."""
    path = getattr(args, "prices", None)
    if not path:
        return None
    import orjson

    from ..session.rules.spend import PriceError, check_prices

    try:
        with open(path, "rb") as f:
            return check_prices(orjson.loads(f.read()))
    except OSError as exc:
        raise CliError(f"--prices {path}: {exc.strerror}", EXIT_USAGE) from None
    except orjson.JSONDecodeError as exc:
        raise CliError(f"--prices {path} is not JSON: {exc}", EXIT_USAGE) from None
    except PriceError as exc:
        raise CliError(f"--prices {path}: {exc}", EXIT_USAGE) from None


def _start_host(
    args: argparse.Namespace, seal_policy: SealPolicy, spine: str | None, bind: str | None
) -> Host:
    from ..host import Host
    from ..policy import SnapshotPolicy

    prices = _prices(args)
    try:
        return Host(
            args.data,
            factory=_factory(args),
            admin_port=args.port,
            idle_timeout=args.idle_timeout,
            timer_lead=args.timer_lead,
            spine=spine,
            auto_seal=seal_policy,
            convention_bind=bind,
            durability=args.durability,
            prices=prices,
            model_servers=_model_servers(args),
            snapshots=SnapshotPolicy(events=args.snapshot_every, size=args.snapshot_bytes),
            spare_sessions=args.spares,
            warm_spares=not args.cold_spares,
        )
    except (CliError, KeyboardInterrupt):
        raise
    except Exception as exc:
        # Whatever the actor system started dies with this process (its watchdog).
        raise CliError(
            f"the daemon could not start: {type(exc).__name__}: {_first_line(exc)}"
        ) from None


def _model_servers(args: argparse.Namespace) -> list[str]:
    """The ``--allow-model-url`` servers, checked: a bad one stops the start naming it."""
    from ..model_servers import server_url

    urls = list(getattr(args, "allow_model_url", None) or [])
    for url in urls:
        try:
            server_url(url)
        except ValueError as exc:
            raise CliError(f"--allow-model-url: {exc}", EXIT_USAGE) from None
    return urls


def _factory(args: argparse.Namespace) -> Any:
    """The agent factory with the operator's provider profiles (None: the default)."""
    from ..agents.profiles import PROFILES_FILE, ProfileError, load_profiles

    path = getattr(args, "providers", None)
    if path is not None and not os.path.isfile(path):
        raise CliError(f"--providers {path}: no such file", EXIT_USAGE)
    try:
        profiles = load_profiles(path or os.path.join(args.data, PROFILES_FILE))
    except ProfileError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    if not profiles:
        return None
    from ..agents import ModelFactory

    return ModelFactory(profiles=profiles)


def _publish(args: argparse.Namespace, host: Any, out: Out, spine: str | None) -> None:
    """Export spans, print events, bring back what was cut, then write the daemon file."""
    # Before the daemon file announces the daemon: no turn a client starts goes unseen.
    _start_otlp(args, host, out)
    if not args.quiet:
        host.add_sink(_event_printer(out))
    # And runs are resumed first: a `wait` that finds the daemon never catches one between.
    for sid in host.recover_cut_off():
        out.line(f"closed the turn of {sid} cut off by the previous daemon")
    for sid in host.resume_all() if args.resume_goals else ():
        out.line(f"resumed the goal run of {sid}")
    write_daemon(
        args.data,
        DaemonInfo(
            pid=os.getpid(),
            admin_port=host.admin_port,
            version=__version__,
            system_session=host.system_session,
            spine=spine or "",
        ),
    )


def _event_printer(out: Out) -> Any:
    """The sink that prints every stored event (a JSON record under ``--log-format json``)."""
    style = out.style

    def show(sid: str, ev: Any, live: Any) -> None:
        if ev is None:
            return
        if isinstance(out, JsonOut):
            out.event(sid, ev, event_line(ev, style))
        else:
            out.line(event_line(ev, style, sid))

    return show


def _greet(args: argparse.Namespace, host: Any, out: Out, bind: str | None) -> None:
    where = "loopback" if bind is None else f"convention leader on {bind}"
    out.line(
        f"vertebra daemon {__version__}: data {args.data}, admin port {host.admin_port} "
        f"({where}); stop with Ctrl-C or `vertebra stop`"
    )


def _start_otlp(args: argparse.Namespace, host: Any, out: Out) -> None:
    """The live span exporter for ``serve --otlp-endpoint URL``; it ends with the system."""
    if not getattr(args, "otlp_endpoint", None):
        return
    try:
        import opentelemetry.exporter.otlp.proto.http  # noqa: F401
    except ImportError as exc:
        raise CliError(
            f"--otlp-endpoint needs the otel extra (pip install 'vertebra[otel]'): {exc}",
            EXIT_USAGE,
        ) from None
    from ..otel import capture_content, start_trace_export

    spine = getattr(args, "spine", None) or ""
    start_trace_export(host, args.otlp_endpoint, capture_content=capture_content(), spine=spine)
    out.line(f"vertebra otel: exporting spans to {args.otlp_endpoint}")


def _start_http(args: argparse.Namespace, host: Any, out: Out) -> Any:
    """The HTTP gateway for ``serve --http ADDR`` (None without it); prints its URL."""
    bounds = gateway_bounds(args)
    if args.http is None:
        return None
    try:
        from ..gateway import GatewayError, start_gateway
    except ImportError as exc:
        raise CliError(
            f"--http needs the http extra (pip install 'vertebra[http]'): {exc}", EXIT_USAGE
        ) from None
    from ..gateway._tokens import ADMIN_FILE

    webhook = _webhook(args)
    try:
        gw = start_gateway(
            args.data,
            args.http,
            allow_remote=args.http_allow_remote,
            host=host,
            webhook=webhook,
            **bounds,
        )
    except GatewayError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    # The admin token is never printed: stdout ends up in service managers' logs. Its
    # file is owner-only; the page link is completed with it by whoever may read it.
    where = os.path.join(args.data, ADMIN_FILE)
    out.line(f"vertebra http: {gw.url}  admin token in {where} (owner-only)")
    out.line(f"vertebra http: open {gw.url}/#token=$(cat {where})")
    return gw


def _webhook(args: argparse.Namespace) -> Any:
    if not args.a2a_webhook:
        return None
    try:
        from ..gateway._a2a_push import Webhook
    except ImportError as exc:
        raise CliError(f"--a2a-webhook needs the a2a extra: {exc}", EXIT_USAGE) from None
    try:
        return Webhook.from_env(args.a2a_webhook, args.a2a_webhook_secret_env)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def stop_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--timeout", type=positive, default=60.0, metavar="S", help="give up after S seconds"
    )
    add_json(p)


def stop(args: argparse.Namespace, out: Out) -> int:
    """Ask the daemon to shut down (SIGTERM) and wait until it has."""
    # Any version: stopping is how an old daemon is replaced.
    info = read_daemon(args.data, check_version=False)
    _signal_daemon(args.data, info.pid)
    if not wait_stopped(args.data, info.pid, args.timeout):
        raise CliError(f"the daemon (pid {info.pid}) did not stop within {args.timeout:g}s")
    if args.json:
        out.line(json_line({"stopped": info.pid}))
    else:
        out.line(f"stopped the daemon of {args.data} (pid {info.pid})")
    return 0


def _signal_daemon(data: str, pid: int) -> None:
    """SIGTERM ``pid`` only once it is proven to be ``data``'s daemon (it holds the
    directory's lock): daemon.json alone may name any process (a reused pid, a copied or
    hand-written file)."""
    pidfd = -1
    with contextlib.suppress(OSError, AttributeError):
        # Pinned before the check: the pid cannot be reused between proof and signal.
        pidfd = os.pidfd_open(pid)
    try:
        if not holds_lock(data, pid):
            raise CliError(
                f"no daemon runs on {data!r}: pid {pid}, named by its daemon.json, does not "
                f"hold {LOCK_FILE}, so it is not this directory's daemon; nothing was "
                f"signalled",
                EXIT_NO_DAEMON,
            )
        try:
            if pidfd >= 0:
                signal.pidfd_send_signal(pidfd, signal.SIGTERM)
            else:
                os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    finally:
        if pidfd >= 0:
            os.close(pidfd)


def demo_args(p: argparse.ArgumentParser) -> None:
    pass


def demo(args: argparse.Namespace, out: Out) -> int:
    from ._demo import run_demo

    return run_demo(args.data, out)


__all__ = ["demo", "demo_args", "serve", "stop", "stop_args"]
