"""Snapshots: a pinned reader sees exactly one published version for its whole life."""

from __future__ import annotations

import pytest

from conftest import entry, fill, reasoning
from quiesce import (
    Buffer,
    EditPlan,
    Entry,
    EntryPruned,
    Kind,
    Mark,
    Move,
    Rewrite,
    SnapshotReleased,
    Tombstone,
    UnknownEntry,
)
from quiesce._core.version import CHUNK


class TestPinnedVersion:
    def test_pinned_version_never_changes_while_others_write(self, buf: Buffer) -> None:
        """Appends, marks, prunes and edits after the pin are invisible to the
        snapshot: its version, length, order, entries and marks stay as pinned."""
        fill(buf, reasoning("a"), reasoning("b", "a"), reasoning("c"))
        with buf.snapshot() as snap:
            pinned = snap.version
            before = (list(snap), dict(snap.marks), dict(snap.tombstones))
            buf.append(reasoning("d"))
            buf.mark_stale("a", "old")
            buf.prune(["c"], reason="stale")
            buf.edit(EditPlan([Rewrite("b", "new b"), Move("a")], reason="tidy"))
            assert buf.version > pinned
            assert snap.version == pinned
            assert (list(snap), dict(snap.marks), dict(snap.tombstones)) == before
            assert len(snap) == 3
            assert snap["b"].body == "step b"
            assert not snap.is_stale("a")
            assert "d" not in snap

    def test_snapshot_equals_the_head_it_pinned(self, buf: Buffer) -> None:
        """Entering pins the head: snap.version is the head version at entry."""
        fill(buf, reasoning("a"))
        with buf.snapshot() as snap:
            assert snap.version == buf.version
            assert snap.pinned

    def test_iteration_yields_live_entries_in_window_order(self, buf: Buffer) -> None:
        """iter(snap) yields the live entries in window order; len matches."""
        es = [reasoning("x"), reasoning("a"), reasoning("m")]
        fill(buf, *es)
        with buf.snapshot() as snap:
            assert list(snap) == es
            assert snap.entries() == tuple(es)
            assert len(snap) == 3

    def test_first_iteration_of_a_many_chunk_version_is_its_window_order(self) -> None:
        """Iterating a version whose ordered view spans several chunks, first
        thing after each kind of write (append, move, removal, mark: the view
        derived, its flat tuple not built yet), yields exactly the window
        order; so do a second iteration and ``entries()``."""
        n = 3 * CHUNK + 7
        buf = Buffer()
        order = [f"e{i}" for i in range(n)]
        for i in order:
            buf.append(Entry(i, Kind.REASONING, f"step {i}"))

        def check() -> None:
            with buf.snapshot() as snap:
                first = [e.id for e in snap]
                assert first == order
                assert [e.id for e in snap] == order
                assert [e.id for e in snap.entries()] == order

        check()
        buf.append(Entry("tail", Kind.REASONING, "the tail"))
        order.append("tail")
        check()
        buf.edit(EditPlan([Move("e5", before="e900")], reason="tidy"))
        order.remove("e5")
        order.insert(order.index("e900"), "e5")
        check()
        buf.prune(["e1", f"e{CHUNK}", "e1500"], reason="stale")
        for i in ("e1", f"e{CHUNK}", "e1500"):
            order.remove(i)
        check()
        buf.mark_stale("e2", "old")
        check()

    def test_getitem_returns_the_entry(self, buf: Buffer) -> None:
        """snap[id] is the Entry that was appended."""
        e = Entry("a", Kind.TOOL_CALL, "ls /", key="ls")
        fill(buf, e)
        with buf.snapshot() as snap:
            assert snap["a"] == e
            assert snap.get("a") == e
            assert snap.get("nope") is None


class TestDeletedVersusNeverExisted:
    def test_getitem_of_a_pruned_entry_raises_entry_pruned_with_tombstone(
        self, buf: Buffer
    ) -> None:
        """In a version where the entry is tombstoned, snap[id] raises EntryPruned
        carrying the Tombstone; it is also a KeyError."""
        fill(buf, reasoning("a"))
        buf.prune(["a"], reason="stale", turn=2)
        with buf.snapshot() as snap:
            with pytest.raises(
                EntryPruned, match=r"^entry 'a' was pruned at version \d+: stale$"
            ) as info:
                snap["a"]
            assert info.value.tombstone == snap.tombstones["a"]
            assert isinstance(info.value, KeyError)

    def test_getitem_of_a_never_seen_id_raises_unknown_entry(self, buf: Buffer) -> None:
        """snap[id] of an id never seen raises UnknownEntry (also a KeyError)."""
        with buf.snapshot() as snap:
            with pytest.raises(UnknownEntry, match=r"^no entry 'ghost' in version 0$"):
                snap["ghost"]
            with pytest.raises(KeyError):
                snap["ghost"]

    def test_resolve_distinguishes_deleted_from_never_existed(self, buf: Buffer) -> None:
        """resolve() returns the Entry if live, the Tombstone if removed, and
        raises UnknownEntry if never seen."""
        fill(buf, reasoning("a"), reasoning("b"))
        buf.prune(["a"], reason="stale")
        with buf.snapshot() as snap:
            assert snap.resolve("b") == reasoning("b")
            tomb = snap.resolve("a")
            assert isinstance(tomb, Tombstone)
            assert tomb.id == "a"
            assert tomb.content_hash == reasoning("a").content_hash
            with pytest.raises(UnknownEntry):
                snap.resolve("never")

    def test_tombstone_is_invisible_to_a_snapshot_pinned_before_it(self, buf: Buffer) -> None:
        """A reader pinned before a removal still resolves the Entry; its
        tombstones do not include it."""
        fill(buf, reasoning("a"))
        with buf.snapshot() as snap:
            buf.prune(["a"], reason="stale")
            assert snap.resolve("a") == reasoning("a")
            assert "a" not in snap.tombstones
        with buf.snapshot() as later:
            assert "a" in later.tombstones


class TestSnapshotMarks:
    def test_mark_as_of_the_pinned_version(self, buf: Buffer) -> None:
        """snap.mark/is_stale report the marks of the pinned version only."""
        fill(buf, reasoning("a"), reasoning("b"))
        m = buf.mark_stale("a", "superseded", turn=1)
        with buf.snapshot() as snap:
            buf.mark_stale("b", "later")
            assert snap.mark("a") == m
            assert isinstance(snap.mark("a"), Mark)
            assert snap.is_stale("a")
            assert snap.mark("b") is None
            assert not snap.is_stale("b")


class TestRelease:
    def test_use_after_exit_raises_snapshot_released(self, buf: Buffer) -> None:
        """Every read after the with-block raises SnapshotReleased."""
        fill(buf, reasoning("a"))
        with buf.snapshot() as snap:
            pass
        assert not snap.pinned
        message = r"^snapshot is not pinned: use it inside its 'with buf.snapshot\(\)' block$"
        for use in (
            lambda: snap.version,
            lambda: len(snap),
            lambda: list(snap),
            lambda: snap["a"],
            lambda: snap.resolve("a"),
            lambda: snap.mark("a"),
            lambda: snap.is_stale("a"),
            lambda: snap.tombstones,
        ):
            with pytest.raises(SnapshotReleased, match=message):
                use()

    def test_use_before_enter_raises_snapshot_released(self, buf: Buffer) -> None:
        """A snapshot that was never entered is not pinned: reads raise."""
        fill(buf, reasoning("a"))
        snap = buf.snapshot()
        with pytest.raises(SnapshotReleased):
            snap.version  # noqa: B018
        with pytest.raises(SnapshotReleased):
            snap["a"]

    def test_a_snapshot_is_pinned_once(self, buf: Buffer) -> None:
        """Re-entering a used snapshot raises SnapshotReleased."""
        snap = buf.snapshot()
        with snap:
            pass
        with (
            pytest.raises(
                SnapshotReleased,
                match=r"^a snapshot is pinned once; take a new buffer.snapshot\(\)$",
            ),
            snap,
        ):
            pass

    def test_exit_by_error_unpins(self, buf: Buffer) -> None:
        """A reader that raises inside the block still releases its pin."""
        fill(buf, reasoning("a"))
        with pytest.raises(ZeroDivisionError), buf.snapshot():
            assert buf.stats().pinned == 1
            1 / 0  # noqa: B018
        assert buf.stats().pinned == 0
        assert buf.oldest_pin() is None

    def test_nested_snapshots_pin_independently(self, buf: Buffer) -> None:
        """Two readers at different versions each see their own; both unpin."""
        fill(buf, reasoning("a"))
        with buf.snapshot() as s1:
            buf.append(entry("b"))
            with buf.snapshot() as s2:
                assert (len(s1), len(s2)) == (1, 2)
                assert buf.oldest_pin() == s1.version
                assert buf.stats().pinned == 2
            assert buf.oldest_pin() == s1.version
        assert buf.oldest_pin() is None
