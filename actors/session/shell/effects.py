"""Effects the session's decisions ask for that run user code or read the log: the
interceptor chain, the seal and the verification computations. Shared by the actor shell
and the test kit, so both carry effects out the same way."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from spine import Log
from spine.seal import KeysLike, NothingToSealError, Seal, SigningKey, prepare_seal, verify_stream

from ...interceptors import Emitter, Interceptor, SessionView, run_chain
from ..rules import commands as c


def intercept(
    interceptors: Sequence[Interceptor], effect: c.RunInterceptors, state: c.Session
) -> c.Intercepted:
    """Run the chain over the effect's ingress; what it made of it, as a command.
    An interceptor that raises propagates: the caller answers it, once."""
    st = state.stored
    view = SessionView(
        st.session_id,
        st.metadata,
        st.last_seq,
        st.turns,
        state.running is not None,
        model_servers=state.model_servers,
    )
    emitter = Emitter()
    res = run_chain(interceptors, effect.ingress, view, emitter)
    return c.Intercepted(
        request_id=effect.request_id,
        key=effect.ingress.key,
        ingress=res.event,
        changes=view.changes,
        emitted=tuple(emitter.items),
        notices=res.notices,
    )


def seal(log: Log, stream: str, key: SigningKey, request_id: str) -> c.Sealed:
    """The seal of what is new in ``stream`` (None when nothing is), as a command."""
    try:
        computed: Seal | None = prepare_seal(log, stream, key)
    except NothingToSealError:
        computed = None
    return c.Sealed(request_id=request_id, seal=computed)


def verification(log: Log, stream: str, keys: KeysLike, request_id: str) -> c.Verified:
    """Every seal of ``stream`` checked (nothing appended), as a command."""
    report = verify_stream(log, stream, keys, append=False)
    return c.Verified(request_id=request_id, report=report, time=datetime.now(UTC))
