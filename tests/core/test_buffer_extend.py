"""``Buffer.extend``: a batch of entries published as one version, all or
nothing, and replayed from a durable log as the same version."""

from __future__ import annotations

from pathlib import Path

import pytest

from quiesce import (
    Buffer,
    DanglingReference,
    DuplicateEntry,
    Entry,
    InvalidArgument,
    InvalidType,
    JsonlLog,
    Kind,
    LogFormatError,
    Override,
    ReadmissionRefused,
    SQLiteLog,
)


def call(i: str) -> Entry:
    return Entry(i, Kind.TOOL_CALL, f"get {i}", key=f"get {i}")


def result(i: str) -> Entry:
    return Entry(f"{i}#result", Kind.TOOL_OUTPUT, f"result of {i}", (i,))


class TestOneVersion:
    def test_a_batch_is_one_version_in_order(self) -> None:
        buf = Buffer()
        buf.append(Entry("a", Kind.INSTRUCTION, "be terse"))
        version = buf.extend([call("c1"), result("c1"), call("c2")])
        assert version == buf.version == 2
        assert [e.id for e in buf.head().entries()] == ["a", "c1", "c1#result", "c2"]
        assert [r.version for r in buf.log if r.op == "append"] == [1, 2, 2, 2]
        buf._check()

    def test_an_empty_batch_publishes_nothing(self) -> None:
        buf = Buffer()
        assert buf.extend([]) == 0 and buf.version == 0

    def test_a_batch_longer_than_a_patch_keeps_window_order(self) -> None:
        buf = Buffer()
        buf.extend([Entry(f"e{n}", Kind.REASONING, f"step {n}") for n in range(100)])
        buf.extend([Entry(f"f{n}", Kind.REASONING, f"more {n}") for n in range(3)])
        ids = [e.id for e in buf.head().entries()]
        assert ids == [f"e{n}" for n in range(100)] + ["f0", "f1", "f2"]
        buf._check()


class TestAllOrNothing:
    @pytest.mark.parametrize(
        ("batch", "error", "match"),
        [
            ([call("c1"), call("c1")], DuplicateEntry, r"^entry 'c1' is already in the buffer$"),
            (
                [call("c2"), result("c9")],
                DanglingReference,
                r"^entry 'c9#result' cites unknown entry 'c9'$",
            ),
            ([call("c0")], DuplicateEntry, r"^entry 'c0' is already in the buffer$"),
        ],
    )
    def test_a_bad_entry_refuses_the_batch(
        self, batch: list[Entry], error: type[Exception], match: str
    ) -> None:
        buf = Buffer()
        buf.append(call("c0"))
        with pytest.raises(error, match=match):
            buf.extend(batch)
        assert buf.version == 1 and len(buf) == 1

    def test_tombstoned_content_needs_its_override(self) -> None:
        buf = Buffer()
        buf.extend([call("c1"), result("c1")])
        buf.prune(["c1", "c1#result"], reason="old")
        again = Entry("c2", Kind.TOOL_CALL, "get c1", key="get c1")
        version = buf.version
        with pytest.raises(ReadmissionRefused, match=r"^entry 'c2' matches tombstone of 'c1'"):
            buf.extend([Entry("x", Kind.REASONING, "fine"), again])
        assert buf.version == version and "x" not in buf.head().live
        assert buf.log[len(buf.log) - 1].op == "refuse"
        buf.extend([Entry("x", Kind.REASONING, "fine"), again], [None, Override("re-run", 3)])
        assert buf.version == version + 1 and "c2" in buf.head().live
        assert buf.stats().readmissions_overridden == 1

    def test_bad_arguments(self) -> None:
        buf = Buffer()
        with pytest.raises(InvalidType, match=r"^extend takes Entries, not str$"):
            buf.extend(["x"])  # type: ignore[list-item]
        with pytest.raises(InvalidArgument, match=r"^overrides must have one item per entry"):
            buf.extend([call("c1")], [])
        assert buf.version == 0


class TestReplay:
    @pytest.mark.parametrize("sink", ["sqlite", "jsonl"])
    def test_a_batch_replays_as_the_same_version(self, tmp_path: Path, sink: str) -> None:
        def log() -> SQLiteLog | JsonlLog:
            return (
                SQLiteLog(tmp_path / "b.db") if sink == "sqlite" else JsonlLog(tmp_path / "b.jsonl")
            )

        first = log()
        buf = Buffer(log=first)
        buf.append(Entry("a", Kind.INSTRUCTION, "be terse"))
        buf.extend([call("c1"), result("c1")])
        buf.extend([call("c2"), result("c2"), Entry("r", Kind.REASONING, "both done")])
        buf.flush()
        first.close()
        again = Buffer(log=log())
        assert again.version == buf.version == 3
        assert [e.id for e in again.head().entries()] == [e.id for e in buf.head().entries()]
        again._check()

    @pytest.mark.parametrize("sink", ["sqlite", "jsonl"])
    def test_a_batch_notes_its_protected_entries_as_replay_does(
        self, tmp_path: Path, sink: str
    ) -> None:
        """A constraint or instruction appended in a batch is in the
        protected-entry ledger (the seq of its own record), live as on
        replay, so a checkpoint claims it and recovery checks it byte for
        byte. Before, ``extend`` left it out: the live ledger differed from
        the replayed one."""
        path = tmp_path / ("b.db" if sink == "sqlite" else "b.jsonl")
        first = SQLiteLog(path) if sink == "sqlite" else JsonlLog(path)
        buf = Buffer(log=first)
        buf.append(Entry("a", Kind.REASONING, "start"))
        buf.extend(
            [
                Entry("k", Kind.CONSTRAINT, "never retry attempt 2"),
                call("c1"),
                Entry("i", Kind.INSTRUCTION, "be terse"),
            ]
        )
        live = dict(buf._st.protected_at)
        assert set(live) == {"k", "i"}
        assert [buf.log[live[i]].op for i in "ki"] == ["append", "append"]
        buf.flush()
        first.close()
        again = Buffer(log=SQLiteLog(path) if sink == "sqlite" else JsonlLog(path))
        assert dict(again._st.protected_at) == live
        again._check()

    def test_a_batch_record_that_follows_no_append_is_refused(self) -> None:
        """``batch: true`` continues the version of the append record just
        before it, nothing else: after a mark it is a version published twice."""
        from quiesce._core.replay import replay

        buf = Buffer()
        buf.extend([call("c1"), call("c2")])
        first, rest = buf.log[0], buf.log[1]
        assert rest.detail["batch"] is True and rest.version == first.version == 1
        other = Buffer()
        other.append(call("c1"))
        other.mark_stale("c1", "old")
        mark = other.log[1]
        forged = [first, mark, rest._replace(seq=2, version=2)]
        with pytest.raises(
            LogFormatError, match=r"^log record 2 \(append\): it publishes version 2 after 2$"
        ):
            replay(Buffer(), forged)


class TestAdaptersAppendOneVersionPerBatch:
    def test_append_and_sync_publish_one_version(self) -> None:
        from quiesce.adapters import openai

        buf = Buffer()
        msgs = [
            {"role": "system", "content": "be terse"},
            {"role": "user", "content": "check"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ]
        assert openai.append_messages(buf, msgs[:2]) == 1
        report = openai.sync_messages(buf, msgs)
        assert report.version == buf.version == 2 and len(buf) == 4
