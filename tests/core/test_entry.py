"""Entries and ``Buffer.append``: construction, content hash, duplicate ids and
dangling references (re-admission lives in core/test_readmission.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any, ClassVar

import pytest

from conftest import fill, reasoning, window
from quiesce import (
    Buffer,
    DanglingReference,
    DuplicateEntry,
    Entry,
    InvalidArgument,
    InvalidType,
    Kind,
    Override,
    Rewrite,
    Tombstone,
)
from quiesce._core.entry import MAX_DEPTH, content_hash, thaw


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


class TestContent:
    """Structured content (issue 12): frozen, JSON-encodable, hashed, given back."""

    BLOCK: ClassVar[dict[str, Any]] = {
        "type": "image",
        "source": {"type": "base64", "data": "aGk="},
        "n": [1, 2.5, None],
    }

    def test_content_is_frozen_and_thaws_back_unchanged(self) -> None:
        """The caller's dict is copied deep; thaw gives back plain, equal JSON."""
        block = {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}
        e = Entry("a", Kind.REASONING, "hi", content=block)
        block["cache_control"]["type"] = "changed"
        assert thaw(e.content) == {
            "type": "text",
            "text": "hi",
            "cache_control": {"type": "ephemeral"},
        }
        with pytest.raises(TypeError):
            e.content["text"] = "x"
        assert isinstance(e.content["cache_control"], Mapping)

    def test_content_is_part_of_the_hash(self) -> None:
        """Two entries with one body and different content hash differently;
        without content the hash is seed 002's sha256(body)."""
        a = Entry("a", Kind.REASONING, "[image]", content=self.BLOCK)
        b = Entry("b", Kind.REASONING, "[image]", content={**self.BLOCK, "n": []})
        plain = Entry("c", Kind.REASONING, "[image]")
        assert len({a.content_hash, b.content_hash, plain.content_hash}) == 3
        assert plain.content_hash == content_hash("[image]")
        assert Entry("d", Kind.REASONING, "[image]", content=self.BLOCK).content_hash == (
            a.content_hash
        )

    def test_dict_round_trip_with_content(self) -> None:
        """to_dict is plain JSON; from_dict gives an equal entry and hash; a
        dict written before content existed still loads."""
        e = Entry("a", Kind.REASONING, "x", meta={"m": [1, {"k": "v"}]}, content=self.BLOCK)
        d = e.to_dict()
        assert json.loads(json.dumps(d)) == d
        back = Entry.from_dict(d)
        assert back == e and back.content_hash == e.content_hash
        old = {
            "id": "o",
            "kind": "reasoning",
            "body": "x",
            "refs": [],
            "turn": None,
            "key": None,
            "meta": {},
        }
        assert Entry.from_dict(old).content is None
        assert "content" not in Entry.from_dict(old).to_dict()

    def test_meta_is_deep_frozen(self) -> None:
        """Nested meta is copied and read-only (lists become tuples)."""
        inner = {"tags": ["a"]}
        e = Entry("a", Kind.REASONING, "x", meta={"inner": inner})
        inner["tags"].append("b")
        assert thaw(e.meta) == {"inner": {"tags": ["a"]}}
        with pytest.raises(TypeError):
            e.meta["inner"]["tags"] = []

    def test_a_rewrite_drops_content_a_refs_change_keeps_it(self) -> None:
        """replace(body=new) describes new bytes: the old blocks go."""
        e = Entry("a", Kind.REASONING, "x", content=self.BLOCK)
        assert e.replace(body="y").content is None
        assert e.replace(refs=()).content == e.content
        assert e.replace(body="x").content == e.content

    @pytest.mark.parametrize(
        ("meta", "error", "match"),
        [
            ({(1, 2): "x"}, InvalidType, r"^meta keys must be str, not tuple \(\(1, 2\)\)$"),
            ({"x": float("nan")}, InvalidArgument, r"^meta must be finite JSON numbers, not nan$"),
            ({"x": float("inf")}, InvalidArgument, r"^meta must be finite JSON numbers, not inf$"),
            ({"x": {1, 2}}, InvalidType, r"^meta must hold only JSON values, not set$"),
            ({"x": b"raw"}, InvalidType, r"^meta must hold only JSON values, not bytes$"),
            ({"x": "\ud83d"}, InvalidArgument, r"^meta contains a lone surrogate '\\ud83d' at"),
            ({"\udc00": 1}, InvalidArgument, r"^a key in meta contains a lone surrogate"),
        ],
    )
    def test_bad_meta_is_refused_at_construction(
        self, meta: dict[Any, Any], error: type[Exception], match: str
    ) -> None:
        """What a log could not encode never gets into an entry."""
        with pytest.raises(error, match=match):
            Entry("a", Kind.REASONING, "x", meta=meta)
        with pytest.raises(error, match=match.replace("meta", "content", 1)):
            Entry("a", Kind.REASONING, "x", content=meta)

    def test_depth_limit(self) -> None:
        """MAX_DEPTH levels are accepted; one more is refused (meta ~990 deep
        used to wedge the log at flush)."""

        def nest(n: int) -> object:
            v: object = 1
            for _ in range(n):
                v = [v]
            return v

        Entry("a", Kind.REASONING, "x", content=nest(MAX_DEPTH))
        with pytest.raises(InvalidArgument, match=rf"^content nests deeper than {MAX_DEPTH}"):
            Entry("a", Kind.REASONING, "x", content=nest(MAX_DEPTH + 1))
        with pytest.raises(InvalidArgument, match=rf"^meta nests deeper than {MAX_DEPTH}"):
            Entry("a", Kind.REASONING, "x", meta={"k": nest(990)})

    @pytest.mark.parametrize("field", ["id", "body", "key", "ref"])
    def test_lone_surrogates_are_refused_in_every_text_field(self, field: str) -> None:
        """One rule for all text: a lone surrogate is InvalidArgument."""
        bad = "cut emoji \ud83d"
        kwargs: dict[str, Any] = {"id": "a", "kind": Kind.REASONING, "body": "x"}
        if field == "ref":
            kwargs["refs"] = (bad,)
        else:
            kwargs[field] = bad
        with pytest.raises(InvalidArgument, match=r"contains a lone surrogate '\\ud83d'"):
            Entry(**kwargs)

    def test_lone_surrogates_refused_in_reasons_actors_and_rewrites(self, buf: Buffer) -> None:
        """Marks, prunes, overrides and rewrites follow the same rule; the
        head is unchanged."""
        fill(buf, reasoning("a"))
        v = buf.version
        with pytest.raises(InvalidArgument, match=r"^reason contains a lone surrogate"):
            buf.mark_stale("a", "bad \udfff")
        with pytest.raises(InvalidArgument, match=r"^actor contains a lone surrogate"):
            buf.prune(["a"], reason="r", actor="\ud800")
        with pytest.raises(InvalidArgument, match=r"^rewrite body contains a lone surrogate"):
            Rewrite("a", "x\ud800")
        with pytest.raises(InvalidArgument, match=r"^override reason contains a lone surrogate"):
            Override("\ud800", 1)
        assert buf.version == v

    def test_sealed_is_derived_from_content(self) -> None:
        """thinking, redacted_thinking and reasoning with encrypted_content are sealed."""

        def sealed(content: object) -> bool:
            return Entry("a", Kind.REASONING, "x", content=content).sealed

        assert sealed({"type": "thinking", "thinking": "t", "signature": "s"})
        assert sealed({"type": "redacted_thinking", "data": "d"})
        assert sealed({"type": "reasoning", "id": "rs", "summary": [], "encrypted_content": "e"})
        assert not sealed({"type": "reasoning", "id": "rs", "summary": []})
        assert not sealed({"type": "text", "text": "t"})
        assert not sealed(["thinking"])
        assert not Entry("a", Kind.REASONING, "x").sealed
