"""Pure formatting for the command line: colors, event lines, tables, progress, parsing.

Nothing here touches a terminal, a file or the runtime; the commands decide where text goes.
Event-like values are read by attribute (``kind``, ``seq``, ``text``...) so this module
imports neither the spine nor the actor layer (``vertebra --help`` must start fast).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

#: ANSI SGR codes by role.
_CODES = {
    "bold": "1",
    "dim": "2",
    "red": "31",
    "green": "32",
    "yellow": "33",
    "blue": "34",
    "magenta": "35",
    "cyan": "36",
}

#: The color of an event kind's name in human output.
KIND_COLORS = {
    "user.message": "cyan",
    "assistant.message": "green",
    "tool.call": "yellow",
    "tool.result": "yellow",
    "turn.started": "dim",
    "turn.completed": "dim",
    "turn.cancelled": "magenta",
    "session.lifecycle": "blue",
    "session.properties": "blue",
    "record.sealed": "magenta",
    "record.verified": "magenta",
}


def use_color(mode: str, is_tty: bool, environ: Mapping[str, str]) -> bool:
    """Whether to color: ``always``, ``never``, or on ``auto`` only on a terminal that is
    not ``TERM=dumb`` and without ``NO_COLOR`` set (https://no-color.org: any value)."""
    if mode == "always":
        return True
    if mode == "never":
        return False
    return is_tty and "NO_COLOR" not in environ and environ.get("TERM") != "dumb"


class Style:
    """Wraps text in ANSI colors, or leaves it alone when color is off."""

    def __init__(self, color: bool) -> None:
        self.color = color

    def paint(self, role: str, text: str) -> str:
        code = _CODES.get(role)
        if not self.color or code is None or not text:
            return text
        return f"\x1b[{code}m{text}\x1b[0m"

    def kind(self, kind: str, width: int = 0) -> str:
        # Pad before painting: escape codes would throw the alignment off.
        return self.paint(KIND_COLORS.get(kind, ""), kind.ljust(width))

    def prompt(self, text: str) -> str:
        """A readline prompt: escapes wrapped in \\001/\\002 so line editing measures the
        visible width only."""
        if not self.color:
            return text
        return f"\001\x1b[1m\002{text}\001\x1b[0m\002"


def detail(ev: Any) -> str:
    """The one-line gist of an event: its text, tool call, properties, phase or reason."""
    if getattr(ev, "properties", None):
        out = ", ".join(f"{k}={v}" for k, v in ev.properties.items())
    elif ev.kind == "tool.call":
        out = f"{ev.tool} {ev.input}"
    elif ev.kind == "tool.result":
        out = f"{ev.tool} -> {ev.result}"
    elif ev.kind.startswith("action."):
        # Governance: the action, its call id, and the fault or the human's note.
        out = f"{ev.action} call {ev.call}"
        if ev.kind == "action.approval":
            out += " approved" if ev.allowed else " rejected"
        if ev.fault:
            out += f" fault {ev.fault}"
        asked = (ev.extra or {}).get("elicitation")
        if isinstance(asked, dict):
            out += _asked(asked)
        elif ev.reason:
            out += f": {ev.reason}"
    elif ev.kind == "net.egress":
        out = f"{ev.host} {'allowed' if ev.allowed else 'blocked'} ({ev.reason})"
    elif ev.kind == "child.spawned":
        out = f"{ev.child}: {ev.text}"
    elif ev.kind == "child.completed":
        out = f"{ev.child} {'failed' if ev.is_error else 'done'}: {ev.result}"
    elif ev.kind.startswith("context."):
        out = _context_detail(ev)
    else:
        out = (
            ev.text
            or ev.error
            or ev.reason
            or ev.stop_reason
            or getattr(ev, "phase", "")
            or getattr(ev, "session", "")
        )
    if ev.error and out != ev.error:
        out = f"{out} error: {ev.error}" if out else f"error: {ev.error}"
    usage = ev.usage
    if usage is not None:
        out += f"  [in {usage.input_tokens} / out {usage.output_tokens} tokens]"
    return " ".join(str(out).split("\n"))


KIND_WIDTH = 20

#: Governance bookkeeping a conversation view leaves out (refusals and waits are shown).
QUIET_KINDS = frozenset(
    {"action.admitted", "action.started", "action.completed", "action.approval"}
)


def _asked(x: dict[str, Any]) -> str:
    """A server's question (on ``action.pending``) or its answer (on ``action.approval``)."""
    if "message" in x:
        return f": {x.get('server')}.{x.get('tool')} asks {json.dumps(x['message'])}"
    content = x.get("content")
    return f" ({x.get('action')}{' ' + json.dumps(content) if content else ''})"


def _context_detail(ev: Any) -> str:
    x = ev.extra or {}
    if ev.kind == "context.window":
        return f"{x.get('tokens')} tokens ({x.get('source')})"
    if ev.kind == "context.uncompacted":
        return f"compaction #{ev.call} taken back"
    span = f"#{x.get('fromSeq')}-#{x.get('toSeq')}"
    # The covered events are all still stored: history --after shows them.
    gist = f"summary: {ev.text}" if ev.text else "left out, no summary could be written"
    return f"{span} {gist}"


def event_line(ev: Any, style: Style, session: str = "") -> str:
    """``[session] #seq kind detail``, columns aligned."""
    prefix = f"{session} " if session else ""
    return f"{prefix}#{ev.seq:<5} {style.kind(ev.kind, KIND_WIDTH)} {detail(ev)}".rstrip()


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], style: Style) -> list[str]:
    """Rows aligned under bold headers, two spaces between columns."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    head = "  ".join(style.paint("bold", h.ljust(w)) for h, w in zip(headers, widths, strict=True))
    lines = [head.rstrip()]
    for row in cells:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return lines


def _short(text: str, width: int = 60) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def span_tree(spans: Sequence[Any], start: Callable[[Any], int]) -> list[tuple[int, Any]]:
    """The spans depth first with their depth: each parent above its children (indented
    under it), siblings by ``start``; the traces in the order their first span comes."""
    ids = {s.span_id for s in spans}
    children: dict[str, list[Any]] = {}
    roots: list[Any] = []
    for s in spans:
        if s.parent_span_id in ids and s.parent_span_id != s.span_id:
            children.setdefault(s.parent_span_id, []).append(s)
        else:
            roots.append(s)
    first = {t: i for i, t in reversed(list(enumerate(s.trace_id for s in spans)))}
    roots.sort(key=lambda s: (first[s.trace_id], start(s)))
    out: list[tuple[int, Any]] = []
    seen: set[str] = set()
    stack = [(0, s) for s in reversed(roots)]
    while stack:
        depth, s = stack.pop()
        if s.span_id in seen:  # a cycle of parents would otherwise never end
            continue
        seen.add(s.span_id)
        out.append((depth, s))
        kids = sorted(children.get(s.span_id, ()), key=lambda c: start(c))
        stack.extend((depth + 1, c) for c in reversed(kids))
    return out


def fanout_tree(root: str, children: Sequence[Any], style: Style) -> list[str]:
    """The fan-out tree of ``root`` drawn as a tree: each child (a `FanoutChild`, read by
    attribute) under the goal that spawned it, in spawn order, with its objective, state,
    turns, result, trust, blocked count and seal state. The tree is stored flat (a parent
    id on each node), so grandchildren are found by their parent."""
    by_parent: dict[str, list[Any]] = {}
    for c in children:
        by_parent.setdefault(c.parent or root, []).append(c)
    colors = {"done": "green", "failed": "red", "running": "yellow"}
    lines = [style.paint("bold", root)]

    def walk(parent: str, indent: str, seen: frozenset[str]) -> None:
        kids = by_parent.get(parent, [])
        for i, c in enumerate(kids):
            last = i == len(kids) - 1
            branch, more = ("└── ", "    ") if last else ("├── ", "│   ")
            state = str(c.state)
            lines.append(
                f"{indent}{branch}{c.id}  {style.paint(colors.get(state, 'bold'), state)}"
                f"  turns {c.turns}  trust {c.trust or '-'}  blocked {c.blocked}"
                f"  seal {c.seal}"
            )
            lines.append(f"{indent}{more}  objective: {_short(c.objective)}")
            if c.result:
                lines.append(f"{indent}{more}  result:    {_short(c.result)}")
            if c.id not in seen:
                walk(c.id, indent + more, seen | {c.id})

    walk(root, "", frozenset({root}))
    return lines


def json_line(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def parse_meta(items: Sequence[str]) -> dict[str, str]:
    """``K=V`` pairs to a dict; a malformed pair raises ValueError naming it."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--meta takes KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    return out


def parse_kinds(text: str, known: Iterable[str]) -> tuple[str, ...]:
    """A comma-separated list of kinds, each one ``known`` (a typo would silently filter
    every event out); ValueError names the unknown one."""
    known_set = set(known)
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    if not kinds:
        raise ValueError("--kinds needs at least one kind")
    for k in kinds:
        if k not in known_set:
            raise ValueError(f"unknown kind {k!r} (known: {', '.join(sorted(known_set))})")
    return kinds


class Rate:
    """Events per second and time left, from (time, count) samples over a sliding window."""

    def __init__(self, window: float = 3.0) -> None:
        self.window = window
        self._samples: list[tuple[float, int]] = []

    def add(self, now: float, done: int) -> None:
        self._samples.append((now, done))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window:
            self._samples.pop(0)

    def per_second(self) -> float:
        if len(self._samples) < 2:
            return 0.0
        (t0, n0), (t1, n1) = self._samples[0], self._samples[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0

    def eta(self, total: int) -> float | None:
        """Seconds until ``total`` at the current rate; None while it is unknown."""
        rate = self.per_second()
        if rate <= 0 or not self._samples:
            return None
        return max(0.0, (total - self._samples[-1][1]) / rate)


def duration(seconds: float | None) -> str:
    """``4s``, ``2m05s``, ``1h02m``; ``?`` when unknown."""
    if seconds is None:
        return "?"
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def progress_line(done: int, total: int, rate: float, eta: float | None, width: int = 30) -> str:
    """``[#####.....]  45%  12,345/27,000 events  8,100 events/s  ETA 2s``."""
    frac = min(1.0, done / total) if total > 0 else 1.0
    filled = int(frac * width)
    bar = "#" * filled + "." * (width - filled)
    return (
        f"[{bar}] {frac * 100:3.0f}%  {done:,}/{total:,} events  "
        f"{rate:,.0f} events/s  ETA {duration(eta)}"
    )


__all__ = [
    "KIND_COLORS",
    "KIND_WIDTH",
    "QUIET_KINDS",
    "Rate",
    "Style",
    "detail",
    "duration",
    "event_line",
    "fanout_tree",
    "json_line",
    "parse_kinds",
    "parse_meta",
    "progress_line",
    "span_tree",
    "table",
    "use_color",
]


def context_fields(c: Any) -> dict[str, Any]:
    """The status projection's context part as ``status`` prints it (empty when the
    session manages no context: no window known, no compaction, no request measured)."""
    if not (c.window or c.compactions or c.used):
        return {}
    out: dict[str, Any] = c.report()
    covered = out.pop("covered")
    out["covered"] = f"events {covered['fromSeq']}-{covered['toSeq']}" if covered else "none"
    return out


def status_lines(out: Any, fields: dict[str, Any], sections: dict[str, list[str]]) -> None:
    """``status`` as text: aligned fields, then each non-empty section's lines."""
    width = max(len(k) for k in fields)
    for k, v in fields.items():
        if isinstance(v, dict):
            v = "  ".join(f"{name} {n}" for name, n in v.items())
        elif isinstance(v, float):
            v = f"{v:.0%}"
        out.line(f"{out.style.paint('bold', k.ljust(width))}  {v}")
    for title, lines in sections.items():
        if lines:
            out.line(out.style.paint("bold", title))
            for line in lines:
                out.line("  " + line)
