"""The conversation's shape (pure): steers waiting for a running turn's next safe point,
and the turn tree whose active path is what the model sees.

Imports nothing of the session's state: `state.py` calls these folds with plain values
and takes back the fields they change, so the rules stack without cycles.

The tree is kept cheaply. ``nodes`` maps each turn (the seq of its user message) to the
turn it follows; ``history`` (the state's) holds only the active path; the entries of a
branch the session moved away from are kept in ``stash`` when it moves (an edit, a
regeneration, a switch), split by turn, so moving back rebuilds that path. Folding an
ordinary event costs nothing more than before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spine import Event, Kind

#: ``extra`` keys (the projections' turn tree reads the same ones).
EDITS = "edits"
REGENERATES = "regenerates"
ACTIVATES = "activates"
#: On a ``user.message``: stored as a steer for the running turn, not as a turn of its own.
STEER = "steer"
#: On ``steer.dropped``: what became of it, ``next`` (the next turn's message) or ``refused``.
HANDED = "handed"

#: Metadata key: what a steer that found no safe point becomes (``next`` or ``refuse``).
STEER_DROPPED_KEY = "session.steer_dropped"
STEER_DROPPED_CHOICES = ("next", "refuse")

#: Conversation entries kept in memory for the agent's context (the active path's last).
HISTORY_LIMIT = 200

#: Turns whose stashed entries are kept (the oldest are forgotten first).
STASH_LIMIT = 1000

Entry = tuple[str, str, int]
Changes = dict[str, Any]


def ref(extra: Mapping[str, Any], key: str) -> int:
    """A positive seq named by ``extra[key]``, else 0."""
    v = extra.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


def is_steer(ev: Event) -> bool:
    return ev.kind == Kind.USER_MESSAGE and ev.extra.get(STEER) is True


def path(nodes: Mapping[int, int], leaf: int) -> list[int]:
    """The turns from the first to ``leaf``."""
    out: list[int] = []
    seen: set[int] = set()
    while leaf and leaf not in seen:
        seen.add(leaf)
        out.append(leaf)
        leaf = nodes.get(leaf, 0)
    out.reverse()
    return out


def latest_leaf(nodes: Mapping[int, int], node: int) -> int:
    """The most recently added turn below ``node`` (itself when it has none)."""
    while True:
        below = [k for k, p in nodes.items() if p == node]
        if not below:
            return node
        node = max(below)


def _split(history: tuple[Entry, ...], nodes: Mapping[int, int]) -> dict[int, tuple[Entry, ...]]:
    """The active path's entries by turn: a turn's user message starts its chunk."""
    chunks: dict[int, list[Entry]] = {}
    current = 0
    for entry in history:
        if entry[2] in nodes and entry[0] == "user":
            current = entry[2]
        chunks.setdefault(current, []).append(entry)
    return {k: tuple(v) for k, v in chunks.items() if k}


def _moved(
    history: tuple[Entry, ...],
    nodes: Mapping[int, int],
    stash: Mapping[int, tuple[Entry, ...]],
    leaf: int,
    limit: int,
) -> Changes:
    """The fields after the active path moves to ``leaf`` (the path left is stashed)."""
    kept = {**stash, **_split(history, nodes)}
    if len(kept) > STASH_LIMIT:
        for k in sorted(kept)[: len(kept) - STASH_LIMIT]:
            del kept[k]
    hist: list[Entry] = []
    for t in path(nodes, leaf):
        hist.extend(kept.get(t, ()))
    return {"history": tuple(hist[-limit:]), "stash": kept, "leaf": leaf}


def user(
    history: tuple[Entry, ...],
    nodes: Mapping[int, int],
    stash: Mapping[int, tuple[Entry, ...]],
    leaf: int,
    ev: Event,
    seq: int,
    limit: int,
) -> Changes | None:
    """A user message that branches (an edit or a regeneration of a known turn): the
    fields it changes, its own entry included; None for an ordinary message."""
    base = ref(ev.extra, EDITS) or ref(ev.extra, REGENERATES)
    if not base or base not in nodes:
        return None
    parent = nodes[base]
    grown = _node(nodes, seq, parent)
    changes = _moved(history, grown, stash, parent, limit - 1)
    changes["history"] = (*changes["history"], ("user", ev.text, seq))
    changes["nodes"] = grown
    changes["leaf"] = seq
    return changes


def switched(
    history: tuple[Entry, ...],
    nodes: Mapping[int, int],
    stash: Mapping[int, tuple[Entry, ...]],
    ev: Event,
    limit: int,
) -> Changes:
    """``branch.switched``: the active path now runs through the turn it names."""
    target = ref(ev.extra, ACTIVATES)
    if target not in nodes:
        return {}
    return _moved(history, nodes, stash, latest_leaf(nodes, target), limit)


# -- steers ------------------------------------------------------------------------------


def delivered(turn: int, call: int, steers: tuple[tuple[int, str], ...]) -> tuple[Event, ...]:
    """``steer.delivered`` for each waiting steer: it landed in ``turn`` before the model
    call ``call`` (after the tool batch before it had all its results)."""
    return tuple(
        Event(kind=Kind.STEER_DELIVERED, turn=turn, call=call, text=text, extra={STEER: at})
        for at, text in steers
    )


def dropped(
    steers: tuple[tuple[int, str], ...], turn: int, reason: str, metadata: Mapping[str, str]
) -> list[Event]:
    """``steer.dropped`` for each steer the turn ended without reaching a safe point for;
    the session's policy says whether each becomes the next turn's message or is refused."""
    handed = "refused" if metadata.get(STEER_DROPPED_KEY) == "refuse" else "next"
    return [
        Event(
            kind=Kind.STEER_DROPPED,
            turn=turn,
            text=text,
            reason=reason,
            extra={STEER: at, HANDED: handed},
        )
        for at, text in steers
    ]


# -- the folds `state.py` delegates to (``state`` is its `SessionState`) ------------------

#: Turns kept in ``nodes`` (the oldest are forgotten first: no branch starts there).
NODE_LIMIT = 1000


def push(hist: tuple[Entry, ...], entry: Entry, limit: int = HISTORY_LIMIT) -> tuple[Entry, ...]:
    out = (*hist, entry)
    return out[-limit:] if len(out) > limit else out


def _node(nodes: Mapping[int, int], seq: int, parent: int) -> dict[int, int]:
    grown = {**nodes, seq: parent}
    if len(grown) > NODE_LIMIT:
        for k in sorted(grown)[: len(grown) - NODE_LIMIT]:
            del grown[k]
    return grown


def new_turn(state: Any, text: str, seq: int, limit: int = HISTORY_LIMIT) -> Changes:
    """A message that opens a turn after the active leaf (pending until it starts)."""
    return {
        "pending": (*state.pending, (seq, text)),
        "history": push(state.history, ("user", text, seq), limit),
        "nodes": _node(state.nodes, seq, state.leaf),
        "leaf": seq,
    }


def heard(hist: tuple[Entry, ...], pending: tuple[tuple[int, str], ...]) -> tuple[Entry, ...]:
    """The history as the turn starting for ``pending[0]`` hears it: its message moves
    after everything said while it waited (a message queued behind a running turn must
    not sit between that turn's tool calls and their results)."""
    if not pending:
        return hist
    at, text = pending[0]
    if hist and hist[-1] == ("user", text, at):
        return hist
    return push(tuple(e for e in hist if e[2] != at or e[0] != "user"), ("user", text, at))


def user_message(state: Any, ev: Event, seq: int, limit: int = HISTORY_LIMIT) -> Changes:
    if ev.extra.get(STEER) is True:
        return {"steers": (*state.steers, (seq, ev.text))}
    branch = user(state.history, state.nodes, state.stash, state.leaf, ev, seq, limit)
    if branch is None:
        return new_turn(state, ev.text, seq, limit)
    branch["pending"] = (*state.pending, (seq, ev.text))
    return branch


def _without(steers: tuple[tuple[int, str], ...], ev: Event) -> tuple[tuple[int, str], ...]:
    at = ev.extra.get(STEER)
    return tuple(s for s in steers if s[0] != at)


def steer_delivered(state: Any, ev: Event, seq: int, limit: int = HISTORY_LIMIT) -> Changes:
    # The model hears it where it landed: after the results, before the next call.
    return {
        "steers": _without(state.steers, ev),
        "history": push(state.history, ("user", ev.text, seq), limit),
    }


def steer_dropped(state: Any, ev: Event, seq: int, limit: int = HISTORY_LIMIT) -> Changes:
    changes: Changes = {"steers": _without(state.steers, ev)}
    if ev.extra.get(HANDED) == "next":
        changes.update(new_turn(state, ev.text, seq, limit))
    return changes


def branch_switched(state: Any, ev: Event, seq: int, limit: int = HISTORY_LIMIT) -> Changes:
    return switched(state.history, state.nodes, state.stash, ev, limit)


def said_by(
    history: tuple[Entry, ...], stash: Mapping[int, tuple[Entry, ...]], turn: int
) -> str | None:
    """The text of the user message that opened ``turn``, if still kept."""
    for role, text, at in (*history, *stash.get(turn, ())):
        if at == turn and role == "user":
            return text
    return None
