"""`Replayed`: a replay's tool calls answered from the replayed turn's stored results.

A replay re-runs a conversation on another model (or the same one) and must do nothing the
first run did not: no tool runs, so no side effect happens twice and no egress leaves. A
call the new model makes that the recorded turn also made (the same tool, the same
arguments as JSON values) gets the stored result, each recorded call at most once, in
order among equals; any other call is refused with a result saying so, which the replay's
comparison reports as the divergence."""

from __future__ import annotations

from collections.abc import Iterable

import orjson

__all__ = ["NOT_RECORDED", "Decisions", "Replayed"]

#: The start of the result a call the recorded turn did not make gets.
NOT_RECORDED = "not run: this is a replay"


def _value(raw: str) -> object:
    try:
        return orjson.loads(raw or "{}")
    except orjson.JSONDecodeError:
        return raw


class Replayed:
    """The recorded calls of one turn, each answered once (`answer`)."""

    __slots__ = ("_left",)

    def __init__(self, recorded: Iterable[tuple[str, str, str, bool]]) -> None:
        self._left = [(tool, _value(raw), result, err) for tool, raw, result, err in recorded]

    def answer(self, tool: str, arguments: str) -> tuple[str, bool]:
        """The stored ``(result, is_error)`` of the first unanswered recorded call equal to
        this one, or a refusal: the replayed turn made no such call, and none is run."""
        args = _value(arguments)
        for i, (name, value, result, err) in enumerate(self._left):
            if name == tool and value == args:
                del self._left[i]
                return result, err
        return (
            f"{NOT_RECORDED}, and the replayed turn made no call of {tool} with these "
            "arguments; a replay runs no tool",
            True,
        )


class Decisions:
    """The human decisions the replayed turn's calls waited for, each served once
    (`take`): an equal call (same tool, equal JSON arguments) is decided as it was then."""

    __slots__ = ("_left",)

    def __init__(self, approvals: Iterable[tuple[str, str, bool, str]]) -> None:
        self._left = [(tool, _value(raw), ok, note) for tool, raw, ok, note in approvals]

    def take(self, tool: str, arguments: str) -> tuple[bool, str] | None:
        """``(approved, note)`` of the first unserved decision on an equal call, or None:
        no human decided such a call then, and one is asked now."""
        args = _value(arguments)
        for i, (name, value, ok, note) in enumerate(self._left):
            if name == tool and value == args:
                del self._left[i]
                return ok, note
        return None
