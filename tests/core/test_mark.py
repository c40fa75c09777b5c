"""``Buffer.mark_stale``: the sync fast path; idempotent, monotone, never blocks."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from conftest import entry, fill, reasoning
from quiesce import Buffer, EntryPruned, Kind, Mark, ProtectedEntry, UnknownEntry


class TestMarkStale:
    def test_mark_publishes_a_version_and_returns_the_mark(self, buf: Buffer) -> None:
        """A first mark publishes a new version; the Mark names it, and the head
        shows the entry stale with its bytes in place."""
        fill(buf, reasoning("a"))
        v = buf.version
        m = buf.mark_stale("a", "superseded", turn=3)
        assert m == Mark("a", "superseded", 3, v + 1)
        assert buf.version == v + 1
        with buf.snapshot() as snap:
            assert snap.is_stale("a")
            assert snap.mark("a") == m
            assert snap["a"] == reasoning("a")

    def test_first_mark_stands(self, buf: Buffer) -> None:
        """Marking again returns the first Mark unchanged and publishes nothing."""
        fill(buf, reasoning("a"))
        first = buf.mark_stale("a", "one", turn=1)
        v, n = buf.version, len(buf.log)
        again = buf.mark_stale("a", "two", turn=2)
        assert again == first
        assert buf.version == v
        assert len(buf.log) == n

    def test_mark_is_logged(self, buf: Buffer) -> None:
        """Each first mark appends one 'mark' record with its reason and turn."""
        fill(buf, reasoning("a"))
        m = buf.mark_stale("a", "superseded", turn=7)
        rec = buf.log[-1]
        assert (rec.op, rec.ids, rec.reason, rec.turn, rec.version) == (
            "mark",
            ("a",),
            "superseded",
            7,
            m.version,
        )

    def test_marks_commute(self) -> None:
        """Marking a then b or b then a yields the same set of marks."""
        b1, b2 = Buffer(), Buffer()
        for b in (b1, b2):
            fill(b, reasoning("a"), reasoning("b"))
        b1.mark_stale("a", "r")
        b1.mark_stale("b", "r")
        b2.mark_stale("b", "r")
        b2.mark_stale("a", "r")
        with b1.snapshot() as s1, b2.snapshot() as s2:
            assert set(s1.marks) == set(s2.marks) == {"a", "b"}

    def test_negative_and_prohibition_may_be_marked(self, buf: Buffer) -> None:
        """Protected-but-mutable kinds can be marked (marking keeps the bytes)."""
        fill(buf, entry("n", Kind.NEGATIVE), entry("p", Kind.PROHIBITION))
        buf.mark_stale("n", "old")
        buf.mark_stale("p", "old")
        with buf.snapshot() as snap:
            assert set(snap.marks) == {"n", "p"}

    @pytest.mark.parametrize("kind", [Kind.CONSTRAINT, Kind.INSTRUCTION])
    def test_immutable_kinds_raise_protected_entry(self, buf: Buffer, kind: Kind) -> None:
        """CONSTRAINT and INSTRUCTION are never marked: ProtectedEntry, version unchanged."""
        fill(buf, entry("c", kind, "do not modify files under /etc"))
        v = buf.version
        with pytest.raises(
            ProtectedEntry, match=rf"^entry 'c' is a {kind.name}: immutable, never marked$"
        ):
            buf.mark_stale("c", "old")
        assert buf.version == v

    def test_unknown_id_raises_unknown_entry(self, buf: Buffer) -> None:
        """An id never seen raises UnknownEntry; the version is unchanged."""
        fill(buf, reasoning("a"))
        v = buf.version
        with pytest.raises(UnknownEntry, match=r"^no entry 'zz' in version \d+$"):
            buf.mark_stale("zz", "r")
        assert buf.version == v

    def test_removed_id_raises_entry_pruned(self, buf: Buffer) -> None:
        """A tombstoned id raises EntryPruned carrying its tombstone."""
        fill(buf, reasoning("a"))
        buf.prune(["a"], reason="stale")
        with pytest.raises(EntryPruned) as info:
            buf.mark_stale("a", "r")
        assert info.value.tombstone.id == "a"


class TestMarkableIndex:
    """``append`` queues a new id for the markable index (a list append); the
    next write that asks the index folds the queue in. Marks, prunes and
    edits see appended entries at once, and the index stays exact."""

    def test_appended_entries_are_markable_at_once(self, buf: Buffer) -> None:
        fill(buf, reasoning("a"), reasoning("b"), entry("c", Kind.CONSTRAINT, "never"))
        assert buf._st.unmarked_new == ["a", "b"]  # queued, not yet folded
        assert buf.mark_stale("b", "old").version == buf.version
        assert buf._st.unmarked_new == [] and buf._st.unmarked == {"a"}
        fill(buf, reasoning("d"))
        assert buf.prune(["d"], reason="noise")["d"].status.name == "PRUNED"
        assert buf._st.markable() == {"a"}

    def test_a_refusal_is_not_chained_to_the_index_miss(self, buf: Buffer) -> None:
        """The slow path raises from inside the index miss: the error a caller
        sees carries no internal KeyError."""
        fill(buf, entry("c", Kind.CONSTRAINT, "never"))
        with pytest.raises(ProtectedEntry) as info:
            buf.mark_stale("c", "old")
        assert info.value.__suppress_context__ and info.value.__cause__ is None
        with pytest.raises(UnknownEntry) as unknown:
            buf.mark_stale("zz", "old")
        assert unknown.value.__suppress_context__


class TestMarkNeverWaits:
    def test_mark_does_not_change_a_pinned_snapshot(self, buf: Buffer) -> None:
        """A mark made while a reader is pinned is invisible to that reader."""
        fill(buf, reasoning("a"))
        with buf.snapshot() as snap:
            buf.mark_stale("a", "r")
            assert not snap.is_stale("a")
            assert snap.mark("a") is None
            assert dict(snap.marks) == {}

    def test_mark_while_another_thread_holds_a_pin(self, buf: Buffer) -> None:
        """A mark from this thread completes while a reader in another thread is
        pinned (it never waits for readers)."""
        fill(buf, reasoning("a"))
        pinned, release = threading.Event(), threading.Event()

        def reader() -> None:
            with buf.snapshot():
                pinned.set()
                release.wait()

        t = threading.Thread(target=reader)
        t.start()
        try:
            assert pinned.wait(10)
            m = buf.mark_stale("a", "r")
            assert buf.stats().pinned == 1
            assert m.version == buf.version
        finally:
            release.set()
            t.join()


class TestMarkRuns:
    """Runs of marks, read back: every pinned version shows exactly the
    marks made up to it, whatever order its readers come in, and across
    runs broken by other writes (a check for any lazy or shared layout of
    the marks maps)."""

    def test_every_pinned_version_sees_exactly_its_marks_in_any_read_order(self) -> None:
        import random

        buf = Buffer()
        ids = [f"e{i}" for i in range(60)]
        for i in ids:
            buf.append(reasoning(i))
        rng = random.Random(7)
        order = ids[:]
        rng.shuffle(order)
        pins = []  # (snapshot, the ids marked up to its version)
        marked: list[str] = []
        for n, i in enumerate(order):
            buf.mark_stale(i, f"r{n}", turn=n)
            marked.append(i)
            if n % 7 == 3:
                # another kind of write ends the run; later marks start a new one
                buf.append(reasoning(f"x{n}"))
            snap = buf.snapshot()
            snap.__enter__()
            pins.append((snap, tuple(marked)))
        try:
            reads = list(range(len(pins)))
            rng.shuffle(reads)
            for k in reads + reads[::-1]:
                snap, expect = pins[k]
                got = {i for i in ids if snap.is_stale(i)}
                assert got == set(expect), k
                assert {i: snap.mark(i).reason for i in expect} == {
                    i: f"r{order.index(i)}" for i in expect
                }
        finally:
            for snap, _ in pins:
                snap.__exit__(None, None, None)
        buf._check(expect_no_pins=True)

    def test_an_old_version_read_after_the_head_built_its_map(self) -> None:
        """The newest built prefix is past an older version: that version is
        built from the run's base, not from the newer map."""
        buf = Buffer()
        for i in "abcd":
            buf.append(reasoning(i))
        with buf.snapshot() as s0:
            buf.mark_stale("a", "one")
            with buf.snapshot() as s1:
                buf.mark_stale("b", "two")
                buf.mark_stale("c", "three")
                with buf.snapshot() as s3:
                    assert {i for i in "abcd" if s3.is_stale(i)} == {"a", "b", "c"}
                    assert {i for i in "abcd" if s1.is_stale(i)} == {"a"}
                    assert {i for i in "abcd" if s0.is_stale(i)} == set()


class TestMarkRunCost:
    """The lazy marks maps' work, counted in marks set (not timed): a version
    of a run reads its map at a bounded cost, whatever the run's length and
    the order its readers come in (the layout reverted in 8429d44 rebuilt
    an old version's map from the run's base: O(run) per read)."""

    R = 4_000  #: marks in the run
    EVERY = 40  #: a pin every EVERY marks

    @staticmethod
    def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
        from quiesce._core import version

        sets = [0]
        apply = version._apply

        def counted(m: Any, marks: list[Mark]) -> Any:
            sets[0] += len(marks)
            return apply(m, marks)

        monkeypatch.setattr(version, "_apply", counted)
        return sets

    def _pinned_run(self, sets: list[int]) -> tuple[Buffer, list[tuple[Any, int]], list[str]]:
        buf = Buffer()
        ids = [f"run-e{i}" for i in range(self.R)]
        buf.extend([reasoning(i) for i in ids])
        assert len(buf._st.head.marks) == 0  # the run's base, built
        pins: list[tuple[Any, int]] = []  # (snapshot, marks up to its version)
        for n, i in enumerate(ids):
            buf.mark_stale(i, f"r{n}")
            if n % self.EVERY == self.EVERY - 1:
                snap = buf.snapshot()
                snap.__enter__()
                pins.append((snap, n + 1))
        assert sets[0] == 0, "mark_stale and pinning do no map work"
        return buf, pins, ids

    @pytest.mark.parametrize("order", ["newest first", "oldest first", "shuffled"])
    def test_reading_every_pinned_version_costs_the_run_plus_seg_per_read(
        self, monkeypatch: pytest.MonkeyPatch, order: str
    ) -> None:
        import random

        from quiesce._core.version import SEG

        sets = self._counting(monkeypatch)
        buf, pins, ids = self._pinned_run(sets)
        reads = list(range(len(pins)))
        if order == "newest first":
            reads.reverse()
        elif order == "shuffled":
            random.Random(3).shuffle(reads)
        try:
            for k in reads:
                snap, upto = pins[k]
                marks = snap.marks
                assert len(marks) == upto
                assert ids[upto - 1] in marks and (upto == len(ids) or ids[upto] not in marks)
                assert snap.mark(ids[upto - 1]).reason == f"r{upto - 1}"
            bound = self.R + SEG * len(pins)
            # the reverted layout: about R / 2 per read, 100x this bound here
            assert sets[0] <= bound, (sets[0], bound)
            # read again, in reverse: the maps are built, nothing is set
            done = sets[0]
            for k in reversed(reads):
                snap, upto = pins[k]
                assert len(snap.marks) == upto
            assert sets[0] == done
            # the head: its segment's start and its prefix
            assert len(buf._st.head.marks) == self.R
            assert sets[0] <= done + 2 * SEG
        finally:
            for snap, _ in pins:
                snap.__exit__(None, None, None)
        buf._check(expect_no_pins=True)

    def test_the_head_read_after_every_mark_costs_one_set_per_mark(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        sets = self._counting(monkeypatch)
        buf = Buffer()
        ids = [f"run-h{i}" for i in range(500)]
        buf.extend([reasoning(i) for i in ids])
        for n, i in enumerate(ids):
            buf.mark_stale(i, "r")
            with buf.snapshot() as snap:
                assert snap.is_stale(i)
                assert len(snap.marks) == n + 1
        assert sets[0] == len(ids)

    def test_released_segments_are_dropped(self) -> None:
        """Memory: once no pin holds an old version and the head's map is
        built, the run's older segments (their marks and maps) are garbage."""
        import gc

        from quiesce._core.version import SEG, MarkSeg

        buf, pins, _ids = self._pinned_run([0])
        for snap, _ in pins:
            snap.__exit__(None, None, None)
        pins.clear()
        _ = buf._st.head.marks
        gc.collect()

        def alive() -> int:
            return sum(
                1
                for o in gc.get_objects()
                if type(o) is MarkSeg and o.marks and o.marks[0].id.startswith("run-e")
            )

        assert self.R // SEG > 10
        assert alive() <= 2
        buf._check(expect_no_pins=True)

    def test_worker_threads_read_pinned_versions_while_the_head_marks(self) -> None:
        """Builds race (worker threads read pinned versions as the head
        appends to the same segments): every read sees exactly its marks."""
        import random

        buf = Buffer()
        ids = [f"run-t{i}" for i in range(3_000)]
        buf.extend([reasoning(i) for i in ids])
        pins: list[tuple[Any, int]] = []
        for n, i in enumerate(ids[:1_500]):
            buf.mark_stale(i, f"r{n}")
            if n % 7 == 0:
                snap = buf.snapshot()
                snap.__enter__()
                pins.append((snap, n + 1))
        errors: list[BaseException] = []
        start = threading.Barrier(4)

        def reader(seed: int) -> None:
            try:
                order = list(range(len(pins)))
                random.Random(seed).shuffle(order)
                start.wait()
                for k in order:
                    snap, upto = pins[k]
                    assert snap.is_stale(ids[upto - 1]), k
                    assert not snap.is_stale(ids[upto]), k
                    assert len(snap.marks) == upto, k
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=reader, args=(s,)) for s in range(3)]
        for t in threads:
            t.start()
        start.wait()
        for n, i in enumerate(ids[1_500:], 1_500):
            buf.mark_stale(i, f"r{n}")
        for t in threads:
            t.join()
        try:
            assert not errors, errors[0]
            for snap, upto in pins:
                assert dict(snap.marks) == {i: buf._st.head.marks[i] for i in ids[:upto]}
        finally:
            for snap, _ in pins:
                snap.__exit__(None, None, None)
        buf._check(expect_no_pins=True)
