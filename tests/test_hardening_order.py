"""Protocol subscriptions under load: numbered batches, put back in order by the
receiver, give backlog then live in seq order, exactly once."""

from __future__ import annotations

import pathlib
import threading

from actors import messages as m
from actors.host import BatchOrder, Host


def test_batch_order_releases_in_order_once_and_holds_early_ones() -> None:
    """Batches 2 and 3 before 1 are held, then released 1, 2, 3; a repeat is dropped;
    unnumbered batches pass; subscriptions are ordered independently."""

    def b(n: int, sub: str = "a", closed: bool = False) -> m.EventBatch:
        return m.EventBatch(
            session_id="s", subscription_id=sub, records=((n, "k", b"{}"),), closed=closed, batch=n
        )

    order = BatchOrder()
    assert order.offer(b(3)) == [] and order.offer(b(2)) == []
    assert order.pending("a") == 2
    assert order.offer(b(1, "x")) == [b(1, "x")]
    assert [x.batch for x in order.offer(b(1))] == [1, 2, 3]
    assert order.offer(b(2)) == [] and order.pending("a") == 0
    plain = m.EventBatch(session_id="s", subscription_id="a")
    assert order.offer(plain) == [plain]
    assert [x.batch for x in order.offer(b(4, closed=True))] == [4]


def test_a_protocol_subscriber_under_load_gets_every_event_in_order_exactly_once(
    tmp_path: pathlib.Path, no_leftover_processes
) -> None:  # type: ignore[no-untyped-def]
    """While other sessions run turns, one session runs many turns back to back; its
    protocol subscriber, reordering by batch number, sees seqs 1..n once each, in order,
    ending with the closed batch; batch numbers are gap-free."""
    h = Host(tmp_path, base="multiprocTCPBase", timeout=30)
    try:
        sid = h.create("watched")
        others = [h.create(f"load-{i}") for i in range(3)]
        stop = threading.Event()

        def load(other: str) -> None:
            while not stop.is_set():
                ack = h.send(other, "busy " * 20)
                h.wait_turn(other, ack.seq, timeout=60)

        threads = [threading.Thread(target=load, args=(o,), daemon=True) for o in others]
        for t in threads:
            t.start()
        released: list[m.EventBatch] = []
        order = BatchOrder()
        raw_numbers: list[int] = []
        with h._asys.private() as ctx:
            reply = ctx.ask(h._runner, m.Subscribe(request_id="sub", session_id=sid), 30)
            assert isinstance(reply, m.SubscribeReply), reply

            def drive() -> None:
                # On a thread of its own: this one's endpoint is the subscriber's.
                last = 0
                for i in range(40):
                    last = h.send(sid, f"message {i}").seq
                h.wait_turn(sid, last, timeout=120)
                stop.set()
                h.close_session(sid)

            driver = threading.Thread(target=drive, daemon=True)
            driver.start()
            while not (released and released[-1].closed):
                batch = ctx.listen(60)
                assert isinstance(batch, m.EventBatch), batch
                raw_numbers.append(batch.batch)
                released.extend(order.offer(batch))
        for t in [*threads, driver]:
            t.join(60)
        seqs = [r[0] for b in released for r in b.records]
        assert seqs == list(range(1, len(h.history(sid)) + 1))
        assert sorted(raw_numbers) == list(range(1, len(raw_numbers) + 1))
        assert [b.batch for b in released] == sorted(raw_numbers)
    finally:
        h.close()
