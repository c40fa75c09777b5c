"""Open entries (issue 24): ``Buffer.open_stream`` and ``StreamWriter``.

A reader pinned at any version sees one whole, fixed prefix for its whole
pin; prefixes only grow; versions share the text; close and abort finish
the entry; bad input changes nothing; a prune or edit touching an open
entry is refused while it is open. The reader tests run on asyncio and trio.
"""

from __future__ import annotations

import itertools
import re

import anyio
import anyio.lowlevel
import pytest

from conftest import reasoning
from quiesce import (
    Buffer,
    DanglingReference,
    DuplicateEntry,
    EditPlan,
    Entry,
    InvalidArgument,
    InvalidType,
    Kind,
    Prune,
    Refusal,
    Rewrite,
    Status,
    StreamClosed,
    StreamWriter,
    open_buffer,
)
from quiesce._core.stream import TAIL


class TestOpen:
    def test_open_publishes_an_empty_streaming_entry(self) -> None:
        """open_stream publishes one version holding an open entry with body ''."""
        buf = Buffer()
        buf.append(reasoning("q"))
        w = buf.open_stream("a", Kind.REASONING, refs=("q",), turn=2, key="k", meta={"m": 1})
        assert isinstance(w, StreamWriter)
        assert (w.id, w.closed, w.text) == ("a", False, "")
        assert buf.version == 2
        with buf.snapshot() as snap:
            e = snap["a"]
            assert e.streaming is True
            assert (e.body, e.refs, e.turn, e.key, dict(e.meta)) == ("", ("q",), 2, "k", {"m": 1})
            assert [x.id for x in snap] == ["q", "a"]
            assert not snap["q"].streaming
        buf._check()

    def test_a_used_id_is_refused(self) -> None:
        """A live, open or tombstoned id: DuplicateEntry, nothing changes."""
        buf = Buffer()
        buf.append(reasoning("x"))
        buf.open_stream("s", Kind.REASONING)
        buf.append(reasoning("gone"))
        buf.prune(["gone"], reason="r")
        v = buf.version
        with pytest.raises(DuplicateEntry, match=r"^entry 'x' is already in the buffer$"):
            buf.open_stream("x", Kind.REASONING)
        with pytest.raises(DuplicateEntry, match=r"^entry 's' is open as a stream$"):
            buf.open_stream("s", Kind.REASONING)
        with pytest.raises(
            DuplicateEntry, match=r"^entry 'gone' was pruned at version \d+; ids are not reused$"
        ):
            buf.open_stream("gone", Kind.REASONING)
        with pytest.raises(DuplicateEntry, match=r"^entry 's' is already in the buffer$"):
            buf.append(reasoning("s"))
        assert buf.version == v
        buf._check()

    def test_bad_fields_are_refused(self) -> None:
        """Refs to unknown ids, immutable kinds, tool calls, bad types: nothing changes."""
        buf = Buffer()
        with pytest.raises(DanglingReference, match=r"^entry 'a' cites unknown entry 'nope'$"):
            buf.open_stream("a", Kind.REASONING, refs=("nope",))
        with pytest.raises(
            InvalidArgument,
            match=r"^stream 'a': a CONSTRAINT is never streamed "
            r"\(a protected entry is appended whole\)$",
        ):
            buf.open_stream("a", Kind.CONSTRAINT)
        with pytest.raises(
            InvalidArgument,
            match=r"^stream 'a': a TOOL_CALL is never streamed \(a tool call is appended whole, "
            r"once its arguments are complete\)$",
        ):
            buf.open_stream("a", Kind.TOOL_CALL)
        with pytest.raises(InvalidType, match=r"^refs must be a collection of str ids, not str$"):
            buf.open_stream("a", Kind.REASONING, refs="q")
        with pytest.raises(InvalidType, match=r"^id must be a str, not int$"):
            buf.open_stream(3, Kind.REASONING)  # type: ignore[arg-type]
        assert buf.version == 0
        buf._check()


class TestWrite:
    def test_each_write_publishes_a_version_with_the_longer_prefix(self) -> None:
        buf = Buffer()
        w = buf.open_stream("a", Kind.REASONING)
        seen = []
        for i in range(3 * TAIL + 5):  # through several tail joins
            v = w.write(f"<{i}>")
            assert v == buf.version
            with buf.snapshot() as snap:
                seen.append(snap["a"].body)
        assert all(b.startswith(a) for a, b in itertools.pairwise(seen))
        assert seen[-1] == "".join(f"<{i}>" for i in range(3 * TAIL + 5)) == w.text
        buf._check()

    def test_an_empty_write_publishes_nothing(self) -> None:
        buf = Buffer()
        w = buf.open_stream("a", Kind.REASONING)
        v = w.write("x")
        assert w.write("") == v == buf.version

    def test_a_pinned_reader_keeps_its_prefix(self) -> None:
        """A snapshot taken mid-stream sees the same body, hash and window
        after later writes, a close and a mark."""
        buf = Buffer()
        buf.append(reasoning("q"))
        w = buf.open_stream("a", Kind.REASONING)
        w.write("hello ")
        with buf.snapshot() as early:
            body = early["a"].body
            h = early["a"].content_hash
            for i in range(100):
                w.write(f"w{i} ")
            buf.mark_stale("q", "old")
            w.close()
            assert early["a"].body == body == "hello "
            assert early["a"].content_hash == h
            assert early["a"].streaming
            assert [e.body for e in early] == ["step q", "hello "]
            assert not early.is_stale("q")

    def test_versions_share_the_text(self) -> None:
        """No copy of the text per version: every open entry of a stream
        names the same chunk store."""
        buf = Buffer()
        w = buf.open_stream("a", Kind.REASONING)
        entries = []
        for _ in range(50):
            w.write("abc")
            with buf.snapshot() as snap:
                entries.append(snap["a"])
        stores = {id(e._p[0]) for e in entries}  # type: ignore[attr-defined]
        assert len(stores) == 1

    def test_bad_chunks_change_nothing(self) -> None:
        buf = Buffer()
        w = buf.open_stream("a", Kind.REASONING)
        w.write("ok")
        v = buf.version
        with pytest.raises(InvalidType, match=r"^stream 'a': a chunk must be a str, not bytes$"):
            w.write(b"x")  # type: ignore[arg-type]
        with pytest.raises(
            InvalidArgument,
            match=re.escape(
                "a chunk of stream 'a' contains a lone surrogate '\\ud83d' at index 1 "
                "(text must be encodable as UTF-8)"
            ),
        ):
            w.write("x\ud83d")
        assert buf.version == v and w.text == "ok"
        buf._check()

    def test_closed_and_aborted_streams_take_nothing(self) -> None:
        buf = Buffer()
        a = buf.open_stream("a", Kind.REASONING)
        b = buf.open_stream("b", Kind.REASONING)
        a.write("x")
        a.close()
        b.abort("cut")
        v = buf.version
        with pytest.raises(StreamClosed, match=r"^stream 'a' is closed: it takes no more text$"):
            a.write("y")
        with pytest.raises(StreamClosed, match=r"^stream 'a' is closed already$"):
            a.close()
        with pytest.raises(StreamClosed, match=r"^stream 'b' is aborted already$"):
            b.abort("again")
        with pytest.raises(StreamClosed, match=r"^stream 'b' is aborted: it takes no more text$"):
            b.write("y")
        assert buf.version == v
        buf._check()


class TestFinish:
    def test_close_with_content(self) -> None:
        buf = Buffer()
        w = buf.open_stream("a", Kind.REASONING, meta={"role": "assistant"})
        w.write("Hel")
        w.write("lo")
        v = w.close(content={"type": "text", "text": "Hello"})
        assert v == buf.version and w.closed and not w.aborted
        with buf.snapshot() as snap:
            e = snap["a"]
            assert type(e) is Entry and not e.streaming
            assert e == Entry(
                "a", Kind.REASONING, "Hello", meta={"role": "assistant"},
                content={"type": "text", "text": "Hello"},
            )  # fmt: skip
            same = Entry("a", Kind.REASONING, "Hello", content=e.content)
            assert e.content_hash == same.content_hash
            assert not snap.is_stale("a")
        buf._check()

    def test_abort_keeps_the_text_marked(self) -> None:
        buf = Buffer()
        w = buf.open_stream("a", Kind.REASONING, turn=4, meta={"m": True})
        w.write("partial")
        w.abort("connection reset")
        with buf.snapshot() as snap:
            e = snap["a"]
            assert (e.body, e.streaming, dict(e.meta)) == ("partial", False, {"m": True})
            mark = snap.mark("a")
            assert mark is not None and (mark.reason, mark.turn) == ("connection reset", 4)
        buf._check()

    def test_abort_keeps_an_earlier_mark(self) -> None:
        buf = Buffer()
        w = buf.open_stream("a", Kind.REASONING)
        first = buf.mark_stale("a", "judged early")
        w.abort("cut")
        with buf.snapshot() as snap:
            assert snap.mark("a") == first

    def test_bad_finish_arguments_change_nothing(self) -> None:
        buf = Buffer()
        w = buf.open_stream("a", Kind.REASONING)
        v = buf.version
        with pytest.raises(InvalidArgument, match=r"^reason must be a non-empty str$"):
            w.abort("")
        with pytest.raises(InvalidType, match=r"^content must hold only JSON values, not set$"):
            w.close(content={1, 2})
        assert buf.version == v and not w.closed

    def test_context_manager(self) -> None:
        """Normal exit closes; an exception aborts with its type in the reason."""
        buf = Buffer()
        with buf.open_stream("a", Kind.REASONING) as w:
            w.write("done")
        assert w.closed and not w.aborted
        with pytest.raises(KeyError), buf.open_stream("b", Kind.REASONING) as w2:
            w2.write("half")
            raise KeyError("boom")
        assert w2.aborted
        with buf.snapshot() as snap:
            assert snap["b"].body == "half"
            assert snap.mark("b").reason == "stream interrupted by KeyError"  # type: ignore[union-attr]
        with buf.open_stream("c", Kind.REASONING) as w3:
            w3.close()  # finished inside: the exit does nothing more
        buf._check()


class TestNothingAppliesWhileOpen:
    def test_prune_is_refused(self) -> None:
        buf = Buffer()
        w = buf.open_stream("a", Kind.REASONING)
        w.write("text")
        v = buf.version
        report = buf.prune(["a"], reason="tidy")
        assert report["a"].status is Status.UNCHANGED
        assert report["a"].refusal is Refusal.CONFLICT
        assert buf.version == v
        w.close()
        assert buf.prune(["a"], reason="tidy")["a"].status is Status.PRUNED
        buf._check()

    def test_what_an_open_entry_cites_is_kept(self) -> None:
        buf = Buffer()
        buf.append(reasoning("q"))
        buf.open_stream("a", Kind.REASONING, refs=("q",))
        report = buf.prune(["q"], reason="tidy")
        assert report["q"].refusal is Refusal.REFERENCED

    def test_edit_is_refused(self) -> None:
        buf = Buffer()
        buf.append(reasoning("q"))
        w = buf.open_stream("a", Kind.REASONING)
        w.write("text")
        v = buf.version
        for op in (Prune("a"), Rewrite("a", "other")):
            report = buf.edit(EditPlan([op], reason="tidy"))
            assert not report.applied
            assert report.refusals == (Refusal.CONFLICT,)
        assert buf.version == v
        w.close()
        assert buf.edit(EditPlan([Rewrite("a", "other")], reason="tidy")).applied
        buf._check()

    def test_mark_is_allowed(self) -> None:
        buf = Buffer()
        w = buf.open_stream("a", Kind.REASONING)
        buf.mark_stale("a", "judged")
        w.write("more")
        with buf.snapshot() as snap:
            assert snap.is_stale("a") and snap["a"].body == "more"
        buf._check()

    def test_readmission_at_close_aborts(self) -> None:
        """Streamed content equal to a tombstone's is kept but marked, not
        re-admitted silently (a stream cannot be taken back)."""
        buf = Buffer()
        buf.append(Entry("old", Kind.REASONING, "same words"))
        buf.prune(["old"], reason="stale")
        w = buf.open_stream("new", Kind.REASONING)
        w.write("same words")
        w.close()
        assert w.aborted
        with buf.snapshot() as snap:
            reason = snap.mark("new").reason  # type: ignore[union-attr]
        assert reason.startswith("re-admission refused: the stream's content matches the tombstone")
        assert buf.stats().refusals[Refusal.READMISSION] == 1
        buf._check()


class TestReaders:
    @pytest.mark.anyio
    async def test_readers_see_whole_growing_prefixes(self, anyio_backend: str) -> None:
        """Readers pinned along the way each see one fixed prefix for their
        whole pin (across awaits); successive pins see prefixes that only
        grow; a write is visible to the next reader immediately."""
        final = "".join(f"tok{i} " for i in range(300))
        seen: list[str] = []
        async with open_buffer() as buf:
            w = buf.open_stream("a", Kind.REASONING)

            async def reader() -> None:
                while True:
                    with buf.snapshot() as snap:
                        body = snap["a"].body
                        streaming = snap["a"].streaming
                        await anyio.lowlevel.checkpoint()
                        assert snap["a"].body == body  # fixed for the whole pin
                        assert [e.body for e in snap] == [body]
                    assert final.startswith(body)
                    if seen:
                        assert body.startswith(seen[-1])  # prefixes only grow
                    seen.append(body)
                    if not streaming:
                        return

            async with anyio.create_task_group() as tg:
                tg.start_soon(reader)
                for i in range(300):
                    w.write(f"tok{i} ")
                    with buf.snapshot() as snap:  # the next reader sees it at once
                        assert snap["a"].body.endswith(f"tok{i} ")
                    await anyio.lowlevel.checkpoint()
                w.close()
            assert seen[-1] == final
            assert len(set(seen)) > 10  # the reader ran along the way
            buf._check(expect_no_pins=True)

    @pytest.mark.anyio
    async def test_cancellation_aborts(self, anyio_backend: str) -> None:
        """A stream's ``with`` block cancelled mid-way aborts it: the text
        that arrived stays, marked with the cancellation's type."""
        async with open_buffer() as buf:
            with anyio.move_on_after(0.05):
                with buf.open_stream("a", Kind.REASONING) as w:
                    w.write("before")
                    await anyio.sleep(10)
            assert w.aborted
            with buf.snapshot() as snap:
                assert snap["a"].body == "before"
                reason = snap.mark("a").reason  # type: ignore[union-attr]
            assert reason in (
                "stream interrupted by CancelledError",
                "stream interrupted by Cancelled",
            )

    @pytest.mark.anyio
    async def test_runtime_and_protocol_face(self, anyio_backend: str) -> None:
        """RuntimeBuffer.open_stream and the async face of a plain Buffer are sync."""
        from quiesce._protocol import async_buffer

        async with open_buffer() as rt:
            w = rt.open_stream("a", Kind.REASONING)
            w.write("x")
            w.close()
        plain = Buffer()
        face = async_buffer(plain, "test")
        w2 = face.open_stream("b", Kind.REASONING)
        w2.write("y")
        w2.close()
        with plain.snapshot() as snap:
            assert snap["b"].body == "y"
