"""The ledger thread: a session's turns as a tree, with an active path.

A turn is a user message and everything that answered it. Editing a message or
regenerating a reply does not overwrite history: it adds a sibling turn under the same
parent and makes it active, so every branch stays in the log and in the tree. `turns()`
returns the active path from the root to the active leaf, which is what the next model
call sees as the conversation.

Edits, regenerations and branch switches are ordinary `Kind.USER_MESSAGE` events whose
``extra`` mapping (top-level JSON fields the spine preserves on a round trip) names the
turn they refer to by the seq of its user message:

- ``{"edits": N}``: a new message replacing the one at seq N; it becomes a sibling of N.
- ``{"regenerates": N}``: answer the message at seq N again; a sibling of N carrying N's
  text (the event's own text, when set, wins).
- ``{"activates": N}``: switch to the branch through turn N (down to its most recently
  added descendants); it adds no turn. The session writes this as ``branch.switched``
  (same ``extra``); the older spelling on a user.message is still read.
- ``{"steer": true}``: a steer for the running turn, not a turn: it answers nothing
  until ``steer.delivered`` (an answer of the active turn) or ``steer.dropped`` (with
  ``handed`` = ``next``, the message of a new turn; refused, nothing).

A reference to a seq that is not a turn is ignored and the message is an ordinary one
appended to the active path. Answering events (turn.started, assistant.message, tool
call and result, turn.completed, turn.cancelled) attach to the active leaf.

`Thread` is the one mutable fold in this package, because a session holds it for its
whole life and a copy per event would make a long session quadratic: apply events with
`apply` and compare threads with ``==``. `thread_from` is the pure replay.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from spine import Event, Kind, Usage

#: ``extra`` keys on a user.message (see the module docstring).
EDITS = "edits"
REGENERATES = "regenerates"
ACTIVATES = "activates"
STEER = "steer"

_ANSWERS = frozenset(
    {
        str(Kind.TURN_STARTED),
        str(Kind.ASSISTANT),
        str(Kind.TOOL_CALL),
        str(Kind.TOOL_RESULT),
        str(Kind.TURN_COMPLETED),
        str(Kind.TURN_CANCELLED),
        str(Kind.STEER_DELIVERED),
    }
)


@attrs.frozen(kw_only=True)
class Turn:
    """One turn: a user message (``id`` is its seq; negative for an event not yet stored)
    and the answer it got.

    ``parent`` is the turn it follows (0 for the first). ``reply`` joins the assistant's
    text (a cancelled turn keeps its partial text); ``answers`` are the seqs of the events
    that answered it; ``state`` is ``open`` until a turn.completed (``done``) or
    turn.cancelled (``cancelled``).
    """

    id: int
    parent: int = 0
    text: str = ""
    reply: str = ""
    answers: tuple[int, ...] = ()
    tool_calls: int = 0
    usage: Usage = attrs.field(factory=Usage)
    stop_reason: str = ""
    state: str = "open"
    edit_of: int = 0
    regenerate_of: int = 0


def _ref(extra: Mapping[str, Any], key: str) -> int:
    v = extra.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


class Thread:
    """A session's turn tree with its active path (see the module docstring)."""

    __slots__ = ("_children", "_turns", "active")

    def __init__(self) -> None:
        self._turns: dict[int, Turn] = {}
        # Children of each turn in the order they were added; key 0 is the root.
        self._children: dict[int, list[int]] = {0: []}
        #: The active leaf's id (0 while the thread is empty).
        self.active = 0

    # -- reading -------------------------------------------------------------------------

    def turns(self) -> list[Turn]:
        """The active path, first turn first."""
        path: list[Turn] = []
        node = self.active
        while node:
            t = self._turns[node]
            path.append(t)
            node = t.parent
        path.reverse()
        return path

    def turn(self, turn_id: int) -> Turn | None:
        return self._turns.get(turn_id)

    def children(self, turn_id: int = 0) -> list[Turn]:
        """The turns following ``turn_id`` (0: the first turns), oldest first: its branches."""
        return [self._turns[c] for c in self._children.get(turn_id, ())]

    def all_turns(self) -> list[Turn]:
        """Every turn of every branch, in the order they were added."""
        return list(self._turns.values())

    def __len__(self) -> int:
        return len(self._turns)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Thread):
            return NotImplemented
        return (
            self.active == other.active
            and self._turns == other._turns
            and self._children == other._children
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Thread(turns={len(self._turns)}, active={self.active})"

    def copy(self) -> Thread:
        t = Thread()
        t._turns = dict(self._turns)
        t._children = {k: list(v) for k, v in self._children.items()}
        t.active = self.active
        return t

    # -- folding -------------------------------------------------------------------------

    def apply(self, ev: Event) -> None:
        """Fold one event in place; kinds that are neither input nor answer change nothing."""
        kind = ev.kind
        if kind == Kind.USER_MESSAGE:
            if ev.extra.get(STEER) is not True:
                self._user_message(ev)
        elif kind in _ANSWERS and self.active:
            self._answer(ev)
        elif kind == Kind.BRANCH_SWITCHED:
            self._user_message(ev)
        elif kind == Kind.STEER_DROPPED and ev.extra.get("handed") == "next":
            self._user_message(attrs.evolve(ev, extra={}))

    def _add(self, turn: Turn) -> None:
        self._turns[turn.id] = turn
        self._children.setdefault(turn.parent, []).append(turn.id)
        self._children.setdefault(turn.id, [])
        self.active = turn.id

    def _user_message(self, ev: Event) -> None:
        activates = _ref(ev.extra, ACTIVATES)
        if activates:
            if activates in self._turns:
                self.active = self._latest_leaf(activates)
            return
        tid = ev.seq
        if tid <= 0:
            # Not stored yet (no seq): a fresh negative id keeps it distinct from the root.
            tid = min(0, *self._turns) - 1 if self._turns else -1
        elif tid in self._turns:
            # A replayed event this thread has already folded.
            return
        edits = _ref(ev.extra, EDITS)
        regen = _ref(ev.extra, REGENERATES)
        if edits and edits in self._turns:
            parent = self._turns[edits].parent
            self._add(Turn(id=tid, parent=parent, text=ev.text, edit_of=edits))
        elif regen and regen in self._turns:
            base = self._turns[regen]
            self._add(
                Turn(id=tid, parent=base.parent, text=ev.text or base.text, regenerate_of=regen)
            )
        else:
            self._add(Turn(id=tid, parent=self.active, text=ev.text))

    def _latest_leaf(self, node: int) -> int:
        while self._children.get(node):
            node = self._children[node][-1]
        return node

    def _answer(self, ev: Event) -> None:
        t = self._turns[self.active]
        kind = ev.kind
        changes: dict[str, Any] = {"answers": (*t.answers, ev.seq)}
        if kind == Kind.TURN_STARTED:
            changes["state"] = "open"
        elif kind == Kind.ASSISTANT and ev.text:
            changes["reply"] = t.reply + ("\n" if t.reply else "") + ev.text
        elif kind == Kind.TOOL_CALL:
            changes["tool_calls"] = t.tool_calls + 1
        elif kind == Kind.TURN_COMPLETED:
            changes["state"] = "done"
            changes["stop_reason"] = ev.stop_reason
            if ev.text:  # a failed turn's partial text
                changes["reply"] = t.reply + ("\n" if t.reply else "") + ev.text
            if ev.usage is not None:
                changes["usage"] = t.usage + ev.usage
        elif kind == Kind.TURN_CANCELLED:
            changes["state"] = "cancelled"
            changes["stop_reason"] = ev.reason
            if ev.text:
                changes["reply"] = t.reply + ("\n" if t.reply else "") + ev.text
            if ev.usage is not None:
                changes["usage"] = t.usage + ev.usage
        self._turns[self.active] = attrs.evolve(t, **changes)


@attrs.frozen(kw_only=True)
class Branch:
    """One branch of a thread: the path from the first turn to the leaf ``leaf``.

    ``fork`` is the first turn of the path that has a sibling (where this branch and
    another part; 0 for a thread that never branched); ``active`` marks the active path.
    """

    leaf: int
    path: tuple[int, ...]
    fork: int
    active: bool
    text: str = ""
    reply: str = ""


def branches(thread: Thread) -> list[Branch]:
    """Every branch of ``thread`` (a path to a leaf), in the order their leaves were added."""
    out: list[Branch] = []
    for t in thread.all_turns():
        if thread.children(t.id):
            continue
        path = tuple(p.id for p in _path_to(thread, t.id))
        fork = next((p for p in path if len(thread.children(_parent(thread, p))) > 1), 0)
        out.append(
            Branch(
                leaf=t.id,
                path=path,
                fork=fork,
                active=t.id == thread.active,
                text=t.text,
                reply=t.reply,
            )
        )
    return out


def _parent(thread: Thread, turn_id: int) -> int:
    t = thread.turn(turn_id)
    return t.parent if t is not None else 0


def _path_to(thread: Thread, leaf: int) -> list[Turn]:
    path: list[Turn] = []
    node = leaf
    while node:
        t = thread.turn(node)
        if t is None:
            break
        path.append(t)
        node = t.parent
    path.reverse()
    return path


def thread_from(events: Iterable[Event], start: Thread | None = None) -> Thread:
    """The thread after ``events`` (a copy of ``start`` when given; it is not modified)."""
    t = start.copy() if start is not None else Thread()
    for ev in events:
        t.apply(ev)
    return t


def turns(events: Iterable[Event]) -> list[Turn]:
    """The active path of the thread ``events`` build."""
    return thread_from(events).turns()
