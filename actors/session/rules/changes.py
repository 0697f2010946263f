"""What an ingress changes in the session's metadata (pure), and the refusals that store
none of it: a key the one asking may not set (`actors.authority`), or a credential."""

from __future__ import annotations

from typing import Any

from projections import secret_problem
from spine import Kind

from ...authority import Authority
from ...authority import refusal as authority_refusal
from .commands import Decision, Intercepted, Live, Session
from .refusals import failed
from .state import metadata_diff

__all__ = ["changes_of"]


def changes_of(s: Session, cmd: Intercepted) -> tuple[dict[str, Any], Decision | None]:
    """The metadata an ingress changes, or the refusal that stores none of it."""
    st, ing = s.stored, cmd.ingress
    changes = metadata_diff(st.metadata, cmd.changes)
    # What interceptors change, they change on the session's behalf (slash commands).
    servers = s.model_servers
    problem = authority_refusal(changes, st.metadata, Authority.SESSION, servers)
    if ing is not None and ing.kind == Kind.PROPERTIES:
        asked = ing.properties
        problem = problem or authority_refusal(asked, st.metadata, ing.authority, servers)
        changes.update(metadata_diff({**st.metadata, **changes}, ing.properties))  # type: ignore[dict-item]
    if problem is not None:
        # Nothing of this ingress is stored, and the conduits hear why.
        notice = Live(after_seq=st.last_seq, kind="notice", severity="error", text=problem)
        reply = failed(s, cmd.request_id, "NotAuthorized", problem)
        return changes, Decision(state=s, reply=reply, live=(notice,))
    problem = secret_problem(changes)
    if problem is not None:
        # Nothing of this ingress is stored: a credential must never reach the log.
        return changes, Decision(
            state=s, reply=failed(s, cmd.request_id, "InvalidRequest", problem)
        )
    return changes, None
