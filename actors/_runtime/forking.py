"""`on_fresh_chunk`: run an actor process with room on CPython's frame stack.

Thespian forks an actor's process inside ``createActor``, so the child runs its whole life
on top of the frames its parent had at that moment. CPython (3.11 and later) keeps a
thread's frames in 16 KiB chunks: a call that does not fit in the current chunk maps a new
one, and the return from it unmaps it again. When the boundary of a chunk falls inside the
frames a process calls over and over (a session's handlers under Thespian's loop), every
such call costs an ``mmap``, a ``munmap`` and four page faults. Where the boundary falls
depended on how deep the Runner happened to be: one refactoring of the Runner's classes
moved it, and a session's turn went from about 40 such pairs to 130 (0.7 ms more CPU per
turn). Every actor process now enters Thespian's child start (`actors._runtime.system`'s hook on
it) through a frame too big for any 16 KiB chunk: that frame sits at the base of a chunk
of 64 KiB of its own, and the actor's loop and handlers run inside that chunk, away from
any boundary, whatever the depth of the parent that forked it.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["on_fresh_chunk"]

T = TypeVar("T")

#: Value-stack slots reserved by the padded frame: 4,096 slots of 8 bytes need a chunk of
#: 64 KiB (the next power of two above them), leaving about 30 KiB above the frame for the
#: child's own frames.
_PAD_SLOTS = 4096


def _call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return fn(*args, **kwargs)


def _padded(call: Callable[..., Any]) -> Callable[..., Any]:
    try:
        code = call.__code__.replace(co_stacksize=_PAD_SLOTS)
        return types.FunctionType(code, call.__globals__, "_padded_call")
    except (AttributeError, TypeError, ValueError):  # an interpreter without code.replace
        return call


_padded_call = _padded(_call)


def on_fresh_chunk(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, called from a frame at the base of a frame-stack chunk of
    its own (see the module's docstring)."""
    result: T = _padded_call(fn, args, kwargs)
    return result
