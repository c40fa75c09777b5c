"""Entries and ``Buffer.append``: construction, content hash, duplicate ids and
dangling references (re-admission lives in test_readmission.py)."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest

from conftest import fill, reasoning, window
from quiesce import (
    Buffer,
    DanglingReference,
    DuplicateEntry,
    Entry,
    Kind,
    Tombstone,
)


class TestEntry:
    def test_content_hash_is_first_16_hex_digits_of_sha256_of_the_body(self) -> None:
        """content_hash = sha256(body as UTF-8).hexdigest()[:16], as in seed 002."""
        e = Entry("a", Kind.REASONING, "endpoint X is read-only — ✓")
        expected = hashlib.sha256("endpoint X is read-only — ✓".encode()).hexdigest()[:16]
        assert e.content_hash == expected
        assert len(e.content_hash) == 16

    def test_entry_is_frozen(self) -> None:
        """An entry cannot be changed after construction."""
        e = reasoning("a")
        with pytest.raises(dataclasses.FrozenInstanceError):
            e.body = "other"  # type: ignore[misc]

    def test_meta_is_copied_read_only(self) -> None:
        """meta is copied: mutating the caller's dict does not change the entry,
        and the entry's meta cannot be mutated."""
        meta = {"tool": "kubectl"}
        e = Entry("a", Kind.TOOL_OUTPUT, "dump", meta=meta)
        meta["tool"] = "other"
        assert e.meta["tool"] == "kubectl"
        with pytest.raises(TypeError):
            e.meta["tool"] = "x"  # type: ignore[index]

    def test_refs_become_a_tuple_in_order(self) -> None:
        """refs given as a list are kept, in order, as a tuple."""
        e = Entry("c", Kind.REASONING, "x", ["b", "a"])  # type: ignore[arg-type]
        assert e.refs == ("b", "a")

    def test_dict_round_trip(self) -> None:
        """Entry.from_dict(e.to_dict()) == e."""
        e = Entry("o", Kind.TOOL_OUTPUT, "out", ("c",), turn=3, key="k", meta={"m": 1})
        assert Entry.from_dict(e.to_dict()) == e


class TestAppend:
    def test_append_publishes_a_new_version(self, buf: Buffer) -> None:
        """Buffer() starts empty at version 0; each append returns the new,
        strictly greater head version and the entry is at the end of the window."""
        assert buf.version == 0
        assert len(buf) == 0
        v1 = buf.append(reasoning("a"))
        v2 = buf.append(reasoning("b", "a"))
        assert 0 < v1 < v2 == buf.version
        assert window(buf) == ["a", "b"]

    def test_duplicate_live_id(self, buf: Buffer) -> None:
        """A live id cannot be appended again; the version is unchanged."""
        fill(buf, reasoning("a"))
        v = buf.version
        with pytest.raises(DuplicateEntry, match=r"^entry 'a' is already in the buffer$"):
            buf.append(reasoning("a", body="different"))
        assert buf.version == v

    def test_duplicate_tombstoned_id(self, buf: Buffer) -> None:
        """A tombstoned id is never reused; the version is unchanged."""
        fill(buf, reasoning("a"))
        buf.prune(["a"], reason="stale")
        v = buf.version
        with pytest.raises(
            DuplicateEntry, match=r"^entry 'a' was pruned at version \d+; ids are not reused$"
        ):
            buf.append(reasoning("a", body="brand new body"))
        assert buf.version == v

    def test_dangling_reference_to_unknown(self, buf: Buffer) -> None:
        """A ref to an id never seen raises DanglingReference with no tombstone."""
        with pytest.raises(
            DanglingReference, match=r"^entry 'b' cites unknown entry 'zz'$"
        ) as info:
            buf.append(reasoning("b", "zz"))
        assert info.value.ref == "zz"
        assert info.value.tombstone is None
        assert buf.version == 0

    def test_dangling_reference_to_tombstone_carries_it(self, buf: Buffer) -> None:
        """A ref to a removed entry raises DanglingReference carrying its Tombstone."""
        fill(buf, reasoning("a"))
        buf.prune(["a"], reason="stale", turn=4, actor="pruner")
        v = buf.version
        with pytest.raises(
            DanglingReference, match=r"^entry 'b' cites 'a', pruned at version \d+: stale$"
        ) as info:
            buf.append(reasoning("b", "a"))
        tomb = info.value.tombstone
        assert isinstance(tomb, Tombstone)
        assert (tomb.id, tomb.reason, tomb.turn, tomb.actor) == ("a", "stale", 4, "pruner")
        assert tomb == buf.tombstones["a"]
        assert buf.version == v
