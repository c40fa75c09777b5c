"""``quiesce inspect PATH``: the edit log and tombstones of a durable log, for
a person (tables) or a program (``--json``); SQLite or JSONL detected by
content; read-only."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from quiesce import Buffer, EditPlan, Entry, JsonlLog, Kind, Prune, SQLiteLog
from quiesce._log.inspect import main


@pytest.fixture(params=["sqlite", "jsonl"])
def log_path(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    # Deliberately misleading names: detection is by content.
    path = tmp_path / ("log.jsonl" if request.param == "sqlite" else "log.db")
    sink = SQLiteLog(path) if request.param == "sqlite" else JsonlLog(path)
    buf = Buffer(log=sink)
    buf.append(Entry("call", Kind.TOOL_CALL, "kubectl describe pod", turn=1))
    buf.append(Entry("out", Kind.TOOL_OUTPUT, "a 900-token dump", refs=("call",), turn=1))
    buf.append(Entry("rule", Kind.CONSTRAINT, "do not modify files under /etc", turn=2))
    buf.append(Entry("step", Kind.REASONING, "the pod is healthy", turn=3))
    buf.append(Entry("idea", Kind.REASONING, "maybe restart it", turn=3))
    buf.mark_stale("step", "superseded", turn=4)
    buf.prune(["call", "out"], reason="stale dump, pod is healthy", actor="pruner", turn=41)
    buf.edit(EditPlan([Prune("rule")], reason="tidy up", actor="editor", turn=42))
    reader = buf.snapshot()
    reader.__enter__()  # a reader that never leaves: the next removal stays staged
    buf.prune(["idea"], reason="superseded", actor="pruner", turn=43)
    buf.flush()
    sink.close()
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


class TestTables:
    def test_log_and_tombstones(self, log_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A summary, the edit log with the documented columns, and the tombstones."""
        code, out, err = _run(capsys, str(log_path))
        assert code == 0, err
        assert "11 records; head version 9: 3 live entries, 2 marked, 2 tombstones" in out
        assert "1 staged removals" in out
        header = out.splitlines()[out.splitlines().index("EDIT LOG") + 1].split()
        assert header == ["seq", "time", "(UTC)", "turn", "actor", "operation", "ids", "reason",
                          "outcome"]  # fmt: skip
        assert "pruner  remove     call,out  stale dump, pod is healthy  applied" in out
        assert "editor  edit       rule      tidy up                     refused" in out
        tombs = out[out.index("TOMBSTONES") :]
        assert "call  tool_call" in tombs and "out   tool_output" in tombs
        assert "idea" not in tombs  # staged, not removed

    def test_filter_by_id(self, log_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--id keeps the records and tombstones that name the entry."""
        code, out, _ = _run(capsys, str(log_path), "--id", "out")
        assert code == 0
        log = out[out.index("EDIT LOG") : out.index("TOMBSTONES")]
        assert "(--id out: 4 of 11)" in log
        ops = [line.split()[5] for line in log.splitlines()[3:] if line]
        assert ops == ["append", "prune", "tombstone", "remove"]
        assert "out  tool_output" in out[out.index("TOMBSTONES") :]
        assert "call " not in out[out.index("TOMBSTONES") :]

    def test_filter_by_op(self, log_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--op keeps one operation; tombstones are shown only for remove."""
        code, out, _ = _run(capsys, str(log_path), "--op", "mark")
        assert code == 0
        assert "(--op mark: 1 of 11)" in out
        assert "superseded" in out
        assert "TOMBSTONES" not in out
        code, out, _ = _run(capsys, str(log_path), "--op", "remove")
        assert "TOMBSTONES" in out

    def test_unknown_op_is_a_usage_error(
        self, log_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        code, _, err = _run(capsys, str(log_path), "--op", "delete")
        assert code == 2
        assert "invalid choice: 'delete'" in err


class TestJson:
    def test_json_document(self, log_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--json prints the summary, full records and tombstones, filtered alike."""
        code, out, _ = _run(capsys, str(log_path), "--json", "--id", "call")
        assert code == 0
        doc = json.loads(out)
        # the file's format: the SQLite layout (2: with checksums), JSONL's header
        assert doc["summary"]["format"] == (2 if doc["summary"]["kind"] == "sqlite" else 1)
        assert doc["summary"]["tombstones"] == 2
        assert [r["op"] for r in doc["records"]] == ["append", "prune", "tombstone", "remove"]
        assert doc["records"][0]["detail"]["entry"]["body"] == "kubectl describe pod"
        assert doc["tombstones"] == [
            {
                "id": "call",
                "kind": "tool_call",
                "content_hash": doc["tombstones"][0]["content_hash"],
                "version": 8,
                "turn": 41,
                "actor": "pruner",
                "reason": "stale dump, pod is healthy",
                "key": None,
            }
        ]


class TestFiles:
    def test_inspect_writes_nothing(
        self, log_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Inspecting leaves the log file's bytes unchanged."""
        before = log_path.read_bytes()
        assert _run(capsys, str(log_path))[0] == 0
        assert log_path.read_bytes() == before

    def test_torn_tail_is_reported(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        path = tmp_path / "log.jsonl"
        buf = Buffer(log=JsonlLog(path))
        buf.append(Entry("a", Kind.REASONING, "x"))
        buf.flush()
        with open(path, "ab") as f:
            f.write(b'{"format":1,"se')
        code, out, _ = _run(capsys, str(path))
        assert code == 0
        assert "torn tail ignored: 15 bytes" in out

    @pytest.mark.parametrize("content", [b"", b"hello\n", b"SQLite format 3\x00" + b"\x00" * 84])
    def test_not_a_log(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes
    ) -> None:
        """A file that is not a quiesce log: exit status 1 and a clear message."""
        path = tmp_path / "x.db"
        path.write_bytes(content)
        code, out, err = _run(capsys, str(path))
        assert code == 1
        assert out == ""
        assert err.startswith("quiesce inspect: error: ")
        assert "not a quiesce edit log" in err
        assert path.read_bytes() == content

    def test_missing_file(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        code, _, err = _run(capsys, str(tmp_path / "missing.db"))
        assert code == 1
        assert "No such file" in err
        assert not (tmp_path / "missing.db").exists()

    def test_command_line(self, log_path: Path) -> None:
        """``python -m quiesce inspect`` runs it (the dispatcher's route)."""
        copy = log_path.with_name("copy")
        shutil.copy(log_path, copy)
        proc = subprocess.run(
            [sys.executable, "-m", "quiesce", "inspect", str(copy), "--op", "remove"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert "stale dump, pod is healthy" in proc.stdout
