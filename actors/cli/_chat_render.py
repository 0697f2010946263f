"""How `vertebra chat` shows a stored event."""

from __future__ import annotations

from spine import Event, Kind

from ._format import QUIET_KINDS, Style, detail, event_line

RESULT_WIDTH = 200
#: Kinds the chat does not show: the user sees the turn itself.
QUIET = frozenset({Kind.TURN_STARTED, Kind.SESSION_STARTED})


def render(ev: Event, style: Style, own: bool) -> str | None:
    """How the chat shows a stored event (None: not at all). ``own``: the user typed it
    here, so it is on the screen already."""
    kind = ev.kind
    if kind == Kind.USER_MESSAGE:
        return None if own else style.paint("cyan", f"(elsewhere) > {ev.text}")
    if kind == Kind.INTERRUPT:
        return None if own else style.paint("magenta", f"  (interrupted elsewhere: {ev.reason})")
    if kind in QUIET:
        return None
    if kind == Kind.LIFECYCLE:
        # "done" after every turn and the like are bookkeeping; endings matter.
        if ev.phase not in ("closed", "failed", "poisoned", "restarted", "recovered"):
            return None
        return style.paint(
            "blue", f"  session {ev.phase}" + (f": {ev.reason}" if ev.reason else "")
        )
    if kind == Kind.ASSISTANT:
        return ev.text
    if kind == Kind.TOOL_CALL:
        return style.paint("yellow", f"  tool {ev.tool} {ev.input}")
    if kind == Kind.TOOL_RESULT:
        result = ev.result if len(ev.result) <= RESULT_WIDTH else ev.result[:RESULT_WIDTH] + "…"
        return style.paint("yellow", f"  -> {result}")
    if kind == Kind.TURN_COMPLETED:
        if ev.error:
            return style.paint("red", f"  turn failed: {ev.error}")
        u = ev.usage
        if u is None:
            return None
        return style.paint("dim", f"  [in {u.input_tokens} / out {u.output_tokens} tokens]")
    if kind == Kind.TURN_CANCELLED:
        return style.paint("magenta", f"  turn cancelled ({ev.reason or 'interrupted'})")
    if kind in QUIET_KINDS:
        return None  # governance bookkeeping; refusals and waits are shown
    if kind == Kind.ACTION_PENDING:
        return None  # asked about by on_event
    if kind == Kind.ACTION_REJECTED:
        return style.paint("red", f"  {ev.action or 'action'} refused: {ev.fault}")
    if kind == Kind.EGRESS:
        verdict = "allowed" if ev.allowed else "blocked"
        return style.paint(
            "dim" if ev.allowed else "red", f"  egress {ev.host} {verdict} ({ev.reason})"
        )
    if kind in (Kind.PROPERTIES, Kind.SESSION_SWITCH):
        return style.paint("dim", f"  {kind}: {detail(ev)}")
    return style.paint("dim", "  " + event_line(ev, style))
