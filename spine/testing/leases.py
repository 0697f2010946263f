"""`LeaseContract`: fencing for a backend whose writers take leases on streams."""

from __future__ import annotations

import pathlib
import threading
from collections.abc import Callable

import pytest

from .. import FencedError, Log
from .events import WAIT, ev, snapshot, texts


class LeaseContract:
    """Fencing for a backend whose writers take leases on streams (`take_lease`)."""

    def new_log(self, tmp_path: pathlib.Path) -> Log:
        raise NotImplementedError

    def opener(self, tmp_path: pathlib.Path) -> Callable[[], Log]:
        raise NotImplementedError

    def test_a_stale_writer_is_refused_once_another_takes_the_stream_over(
        self, tmp_path: pathlib.Path
    ) -> None:
        """After a takeover the old holder's appends raise FencedError and store nothing;
        the new holder appends on; streams without a lease are not fenced."""
        opener = self.opener(tmp_path)
        old, new = opener(), opener()
        try:
            e1 = old.take_lease("s", "host-a")  # type: ignore[attr-defined]
            old.append("s", [ev("a")], expected_seq=0)
            e2 = new.take_lease("s", "host-b")  # type: ignore[attr-defined]
            assert e2 == e1 + 1
            with pytest.raises(FencedError) as info:
                old.append("s", [ev("stale")])
            assert (info.value.held_epoch, info.value.current_epoch) == (e1, e2)
            assert "s" in str(info.value)
            new.append("s", [ev("b")], expected_seq=1)
            old.append("other", [ev("unfenced")])
            assert texts(new.read("s")) == ["a", "b"]
            # The refused append rolled back whole: positions stay gap-free.
            assert [r.position for r in snapshot(new)] == [1, 2, 3]
            assert new.lease("s") == (e2, "host-b")  # type: ignore[attr-defined]
        finally:
            old.close()
            new.close()

    def test_a_takeover_waits_for_an_append_in_flight_and_then_fences(
        self, tmp_path: pathlib.Path
    ) -> None:
        """Appends racing a takeover either land before it or are refused: none after."""
        opener = self.opener(tmp_path)
        old, new = opener(), opener()
        try:
            old.take_lease("s", "a")  # type: ignore[attr-defined]
            results: list[str] = []
            go = threading.Event()

            def spam() -> None:
                go.wait(WAIT)
                for i in range(200):
                    try:
                        old.append("s", [ev(f"old-{i}")])
                        results.append("ok")
                    except FencedError:
                        results.append("fenced")

            t = threading.Thread(target=spam)
            t.start()
            go.set()
            epoch = new.take_lease("s", "b")  # type: ignore[attr-defined]
            cut = new.last_seq("s")
            t.join(WAIT)
            assert not t.is_alive()
            # Everything the old writer stored is below the takeover point, and after its
            # first refusal it never stores again.
            assert new.last_seq("s") == cut
            assert results.count("ok") == cut
            if "fenced" in results:
                first = results.index("fenced")
                assert set(results[first:]) == {"fenced"}
            new.append("s", [ev("new")], expected_seq=cut)
            assert new.lease("s") == (epoch, "b")  # type: ignore[attr-defined]
        finally:
            old.close()
            new.close()
