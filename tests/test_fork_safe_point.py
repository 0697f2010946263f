"""A fork without a seq forks at the parent's last safe point; found from the parent's
snapshot and the events after it, it is the one a read of the whole stream finds (pure,
under any interleaving of messages, steers, tool batches, ends, interrupts and crashes)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from test_session_conversation import _apply, _running

from actors.host.conversation import safe_point, safe_point_after
from actors.session.rules.state import SessionState, fold

_OPS = st.lists(
    st.sampled_from(["steer", "tools", "model", "finish", "interrupt", "crash", "message"]),
    max_size=30,
)


@settings(max_examples=100, deadline=None)
@given(_OPS, st.booleans())
def test_the_safe_point_from_any_snapshot_is_the_whole_streams(ops: list[str], idle: bool) -> None:
    """From a snapshot at every seq: the same safe point, or 0 (read whole) only when the
    session was busy at the snapshot."""
    kit = _running()
    for n, op in enumerate(ops):
        _apply(kit, op, n)
    if idle:
        for _ in range(len(ops) + 2):
            if kit.state.running is None:
                break
            kit.finish(text="end")
    sid = kit.session_id
    events = [r.event() for r in kit.log.read(sid, 0, None)]
    whole = safe_point(events, sid)
    state = SessionState(session_id=sid)
    for k, ev in enumerate(events):
        state = fold(state, [ev])
        found = safe_point_after(state, events[k + 1 :], sid)
        # 0 sends the Host to the whole stream, so it is allowed only where the snapshot
        # cannot tell: busy there (a steer sent to an idle session waits in the fold's
        # queue as an ordinary message, which the stream scan does not count).
        assert found or state.busy, (k, whole)
        if found:
            assert found == whole, (k, found, whole)
