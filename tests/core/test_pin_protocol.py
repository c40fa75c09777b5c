"""The lock-free pin protocol: a pin is registered, then validated against the
head (like a hazard pointer); a write that lands in between makes the reader
withdraw and pin the new head. These tests force that race deterministically,
then let threads race for real."""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from quiesce import Buffer, Entry, Kind, Snapshot, Status


def e(i: str, *refs: str) -> Entry:
    return Entry(i, Kind.REASONING, f"body of {i}", refs)


class OneWrite:
    """``write``, run once, by whichever lookup below comes first."""

    def __init__(self, write: Callable[[], object]) -> None:
        self.write: Callable[[], object] | None = write

    def __call__(self) -> None:
        write, self.write = self.write, None
        if write is not None:
            write()


class RacingPins(dict):  # type: ignore[type-arg]
    """``buf._st.pins`` that runs the write the first time a pin looks up its
    set there (the slow path): after the reader read the head, before it
    registered."""

    def __init__(self, pins: dict[int, Any], write: OneWrite) -> None:
        super().__init__(pins)
        self.write = write

    def get(self, key: Any, default: Any = None) -> Any:
        self.write()
        return super().get(key, default)


class RacingHeadSet:
    """The registry's head set (``(version, set)``, unpacked by the fast path)
    that runs the write when a pin is about to find the head there (its
    version is the head the reader just read): after the reader read the
    head, before it registered. A pin that will not find it there goes on
    to the slow path, whose lookup in :class:`RacingPins` runs the write."""

    def __init__(self, buf: Buffer, write: OneWrite) -> None:
        self.buf = buf
        self.pair = buf._registry.head_set
        self.write = write

    def __iter__(self) -> Iterator[Any]:
        if self.pair[0] is self.buf._st.head:
            self.write()
        return iter(self.pair)

    def __getitem__(self, i: int) -> Any:
        return self.pair[i]  # forget_head_set's read: no write


def racing(buf: Buffer, write: Callable[[], object]) -> None:
    """Run ``write`` the first time a pin looks up the head's set, on its
    fast path (the head set) or its slow path (``pins``)."""
    once = OneWrite(write)
    buf._st.pins = RacingPins(buf._st.pins, once)
    buf._registry.head_set = RacingHeadSet(buf, once)  # type: ignore[assignment]


class TestValidation:
    def test_a_write_between_reading_the_head_and_registering_pins_the_new_head(
        self,
    ) -> None:
        buf = Buffer()
        buf.append(e("a"))
        before = buf.version
        racing(buf, lambda: buf.append(e("b")))
        with buf.snapshot() as snap:
            assert snap.version == before + 1  # not the head it first read
            assert "b" in snap
            assert set(buf._st.pins) == {snap.version}  # the withdrawn set is gone
        buf._check(expect_no_pins=True)

    def test_a_removal_between_reading_the_head_and_registering_is_not_hidden(
        self,
    ) -> None:
        """The reader read the head while "a" was live and unmarked; the prune
        lands before the reader registers, and (no reader is pinned yet)
        removes "a" at once. Without the validation the reader would stay
        pinned at the old version and see "a" after its removal (invariant 5):
        it must instead pin the version that removed it."""
        buf = Buffer()
        buf.append(e("a"))
        report: list[Status] = []
        racing(buf, lambda: report.append(buf.prune(["a"], reason="stale")["a"].status))
        with buf.snapshot() as snap:
            assert report == [Status.PRUNED]
            assert "a" not in snap
            assert snap.resolve("a") == buf.tombstones["a"]
            buf._check()
        buf._check(expect_no_pins=True)

    def test_a_withdrawn_pin_does_not_hold_back_a_removal(self) -> None:
        """Another reader holds the removal back; the racing reader's
        withdrawn registration at the old version must not: when the other
        reader leaves, the removal is applied."""
        buf = Buffer()
        buf.append(e("a"))
        buf.append(e("b"))
        with buf.snapshot() as old:
            racing(buf, lambda: buf.prune(["a"], reason="stale"))
            with buf.snapshot() as new:
                assert new.version > old.version
                assert new.is_stale("a")
                assert buf.staged() == {"a": new.version}
                assert buf.oldest_pin() == old.version
        assert "a" in buf.tombstones
        buf._check(expect_no_pins=True)


class TestFreeThreading:
    def test_a_buffer_refuses_to_run_without_the_gil(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The protocol's steps are atomic only under the GIL: a free-threaded
        interpreter with the GIL off gets a clear error, not silent races."""
        monkeypatch.setattr(sys, "_is_gil_enabled", lambda: False, raising=False)
        with pytest.raises(RuntimeError, match="PYTHON_GIL=1"):
            Buffer()
        monkeypatch.setattr(sys, "_is_gil_enabled", lambda: True, raising=False)
        Buffer()


class TestCleanup:
    def test_the_heads_set_is_kept_and_older_sets_are_freed(self) -> None:
        buf = Buffer()
        buf.append(e("a"))
        for _ in range(3):
            with buf.snapshot():
                pass
        h = buf.version
        assert dict(buf._st.pins) == {h: {}}  # kept for the next reader of the head
        buf.mark_stale("a", "stale")
        with buf.snapshot():
            pass
        # pinning the new head walked the order: the old empty set is gone
        assert set(buf._st.pins) == {h + 1}
        assert list(buf._st.pin_order) == [h + 1]
        buf._check(expect_no_pins=True)

    def test_a_reader_of_an_old_version_frees_its_set_when_it_leaves(self) -> None:
        buf = Buffer()
        buf.append(e("a"))
        snap = buf.snapshot()
        snap.__enter__()
        v = snap.version
        buf.append(e("b"))
        snap.__exit__(None, None, None)
        assert v not in buf._st.pins
        assert buf.oldest_pin() is None
        buf._check(expect_no_pins=True)

    def test_the_head_set_serves_the_heads_readers_and_forgets_old_versions(self) -> None:
        """The registry's head set is the head's ``(version, set)`` once a pin
        of the head was validated, the very set ``pins`` holds; a version
        that is no longer the head leaves it when its set is freed (by its
        last reader, or by a walk), so no finished version is kept alive."""
        buf = Buffer()
        buf.append(e("a"))
        assert buf._registry.head_set[0] is None  # no pin yet
        with buf.snapshot() as first:
            head = buf._st.head
            assert buf._registry.head_set == (head, buf._st.pins[first.version])
            with buf.snapshot() as second:  # the fast path: the same set
                assert buf._st.pins[second.version] == {first: None, second: None}
            old = buf.snapshot()
            old.__enter__()
        buf.append(e("b"))
        assert buf._registry.head_set[0] is head  # its reader is still pinned
        old.__exit__(None, None, None)  # the last reader frees the old set
        assert buf._registry.head_set[0] is None
        with buf.snapshot() as snap:
            assert buf._registry.head_set[0] is buf._st.head
            pinned = snap.version
        buf.mark_stale("b", "stale")
        w = buf.open_stream("s", Kind.REASONING)
        w.write("x")  # walks the pin order: the head set's version is finished
        assert buf._registry.head_set[0] is None
        assert pinned not in buf._st.pins
        buf._check(expect_no_pins=True)

    def test_the_pin_order_stays_bounded_under_many_versions(self) -> None:
        buf = Buffer()
        for k in range(2_000):
            buf.append(e(f"x{k}"))
            with buf.snapshot():
                pass
        assert len(buf._st.pin_order) <= 2
        assert len(buf._st.pins) <= 2
        buf._check(expect_no_pins=True)

    def test_a_stream_write_frees_the_version_it_replaced(self) -> None:
        """A stream writer walks the pin order after it publishes: the version
        it replaced, with no reader left, leaves the order and the reader
        sets, so the next reader's first pin finds nothing to free; a version
        a reader still holds stays."""
        buf = Buffer()
        buf.append(e("a"))
        w = buf.open_stream("s", Kind.REASONING)
        with buf.snapshot():
            pass
        h = buf.version
        assert list(buf._st.pin_order) == [h]
        w.write("x")
        assert list(buf._st.pin_order) == [] and buf._st.pins == {}
        with buf.snapshot():
            pass
        assert list(buf._st.pin_order) == [h + 1]
        with buf.snapshot() as held:
            w.write("y")
            assert list(buf._st.pin_order) == [h + 1] and buf._st.pins == {h + 1: {held: None}}
        w.write("z")
        assert list(buf._st.pin_order) == [] and buf._st.pins == {}
        buf._check(expect_no_pins=True)


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Switch threads every microsecond, so pins interleave with writes."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


@pytest.mark.usefixtures("fast_switching")
class TestThreadsRace:
    READERS = 4
    ROUNDS = 3_000

    def test_no_reader_sees_an_entry_removed_while_it_is_pinned(self) -> None:
        """Readers in threads pin and unpin in a tight loop while a writer
        thread appends, marks and prunes. A reader notes ids it saw live and
        unmarked, and the head number just before it unpins: none of those
        ids may have been removed at or before that head (it was pinned all
        the while). At the end no pin leaks and every invariant holds."""
        buf = Buffer()
        for k in range(20):
            buf.append(e(f"seed{k}"))
        done = threading.Event()
        errors: list[BaseException] = []
        violations: list[str] = []
        pins = [0] * self.READERS

        def reader(k: int) -> None:
            rng = random.Random(k)
            try:
                while not done.is_set():
                    snap: Snapshot
                    with buf.snapshot() as snap:
                        v = snap.version
                        ids = [x.id for x in snap.entries()]
                        seen = [
                            i for i in rng.sample(ids, min(5, len(ids))) if not snap.is_stale(i)
                        ]
                        end = buf.version
                    pins[k] += 1
                    tombs = buf.tombstones
                    for i in seen:
                        t = tombs.get(i)
                        if t is not None and t.version <= end:
                            violations.append(
                                f"{i!r} removed at {t.version} while a reader pinned at "
                                f"{v} (saw it unmarked) was pinned until at least {end}"
                            )
            except BaseException as exc:
                errors.append(exc)

        def writer() -> None:
            rng = random.Random(99)
            live = [f"seed{k}" for k in range(20)]
            try:
                for r in range(self.ROUNDS):
                    op = rng.randrange(4)
                    if op == 0 or len(live) < 5:
                        buf.append(e(f"w{r}"))
                        live.append(f"w{r}")
                    elif op == 1:
                        buf.mark_stale(rng.choice(live), "stale")
                    else:
                        victims = rng.sample(live, 2)
                        report = buf.prune(victims, reason="prune")
                        for i in victims:
                            if report[i].status in (Status.PRUNED, Status.DEFERRED):
                                live.remove(i)
            except BaseException as exc:
                errors.append(exc)
            finally:
                done.set()

        threads = [threading.Thread(target=reader, args=(k,)) for k in range(self.READERS)]
        threads.append(threading.Thread(target=writer))
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        assert not violations, violations[:5]
        assert all(pins), pins
        # every deferred removal was applied by the last blocking unpin
        assert not buf.has_due()
        buf.apply_due()
        buf._check(expect_no_pins=True)
        assert not buf.staged()
        assert len(buf._st.pin_order) <= 1
