"""Tool names on the wire (pure): every wire format takes ``^[A-Za-z0-9_-]{1,64}$`` only,
while a server's tools are named ``server.tool`` in the registry and the log.

A request offers each tool under its wire name and speaks of earlier calls by it; a
response's calls are read back to registry names before anything is stored, so the log
and the transcript show the names the operator configured.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping

import attrs

from .wire import Message, ToolSpec

__all__ = ["WireNames", "wire_name"]

_SAFE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def wire_name(name: str) -> str:
    """``name`` itself when every wire format takes it; else ``.`` as ``__``, any other
    character as ``_``, and a long one cut with a hash of the whole kept."""
    if _SAFE.match(name):
        return name
    safe = _UNSAFE.sub("_", name.replace(".", "__")) or "tool"
    if len(safe) > 64:
        safe = safe[:55] + "_" + hashlib.sha256(name.encode()).hexdigest()[:8]
    return safe


@attrs.frozen
class WireNames:
    """The names of one turn's tools both ways."""

    to_wire: Mapping[str, str]
    from_wire: Mapping[str, str]

    @classmethod
    def of(cls, names: Iterable[str]) -> WireNames:
        to = {n: wire_name(n) for n in names}
        return cls(to, {w: n for n, w in to.items()})

    def specs(self, specs: Iterable[ToolSpec]) -> tuple[ToolSpec, ...]:
        return tuple(attrs.evolve(s, name=self.to_wire.get(s.name, s.name)) for s in specs)

    def messages(self, msgs: Iterable[Message]) -> tuple[Message, ...]:
        out = []
        for m in msgs:
            if m.tool_calls:
                calls = tuple(
                    attrs.evolve(c, name=self.to_wire.get(c.name, c.name)) for c in m.tool_calls
                )
                m = attrs.evolve(m, tool_calls=calls)
            if m.tool_name in self.to_wire:
                m = attrs.evolve(m, tool_name=self.to_wire[m.tool_name])
            out.append(m)
        return tuple(out)

    def registry_name(self, name: str) -> str:
        return self.from_wire.get(name, name)
