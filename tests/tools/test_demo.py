"""``quiesce demo``: quiesce shows none of the seeds' failures, the naive
buffer shows each of them, deterministically, on asyncio and on trio."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from quiesce.__main__ import main as cli
from quiesce.demo import app as _demo
from quiesce.demo.checker import FAILURES, Checker
from quiesce.demo.stories import replay_seeds
from quiesce.demo.worlds import NaiveWorld

FAST = ["--tick", "0", "--turns", "40", "--plain"]


def run(tmp_path: Path, *args: str) -> tuple[int, str, dict[str, Any]]:
    report = tmp_path / "report.json"
    out = io.StringIO()
    rc = _demo.main([*FAST, "--json", str(report), *args], out=out)
    return rc, out.getvalue(), json.loads(report.read_text())


def comparable(data: dict[str, Any]) -> dict[str, Any]:
    """The report minus what legitimately differs between runs (timing, the
    log's path, the backend's name, and how many escalations the supervisor
    task had consumed when it was stopped; the log's count is compared)."""
    out = {k: v for k, v in data.items() if k not in ("elapsed", "log", "backend")}
    out["quiesce"] = {k: v for k, v in out["quiesce"].items() if k != "escalations_received"}
    return out


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_quiesce_zero_naive_nonzero(tmp_path: Path, backend: str) -> None:
    """Same workload, same checker: every count is zero on quiesce and
    nonzero on the naive list; the seeds' stories all come out safe."""
    rc, text, data = run(tmp_path, "--backend", backend, "--seed", "3")
    assert rc == 0
    assert data["ok"] is True and data["backend"] == backend
    assert set(data["counts"]["quiesce"]) == set(FAILURES)
    assert all(n == 0 for n in data["counts"]["quiesce"].values()), data["counts"]
    assert all(n > 0 for n in data["counts"]["naive"].values()), data["counts"]
    assert [s["safe"] for s in data["seeds"]] == [True] * 5
    assert data["log"]["kind"] == "sqlite" and data["log"]["recovery_matches"] is True
    assert data["quiesce"]["tombstone_to_edit_ratio"] == 1.0
    assert data["quiesce"]["escalations_by_kind"].get("REFUSED_EDIT", 0) >= 3
    assert "OK: quiesce 0 failures" in text
    assert "Report: the same workload, the same checker" in text


def test_the_answers_stream(tmp_path: Path) -> None:
    """The assistant's answers stream into both buffers: on the naive list a
    verifier reads text that is extended under it; on quiesce every pin keeps
    its prefix (zero), and the streams are durable (the reopened log matches)."""
    rc, text, data = run(tmp_path, "--seed", "3")
    assert rc == 0
    q = data["quiesce"]
    assert q["streamed_answers"] >= 5 and q["stream_writes"] == 5 * q["streamed_answers"]
    assert data["counts"]["quiesce"]["text changed mid-read"] == 0
    assert data["counts"]["naive"]["text changed mid-read"] > 0
    changed = data["details"]["naive"]["text_changed"]
    assert any(
        re.match(r"^t\d+ verifier: read answer-\d+ as \d+ words, it held \d+", t) for t in changed
    )
    assert data["details"]["quiesce"]["text_changed"] == []
    assert data["log"]["recovery_matches"] is True
    assert "streaming: " in text and "answers streamed in" in text


def test_deterministic_across_runs_and_backends(tmp_path: Path) -> None:
    """``--seed`` makes the whole report reproducible, on either backend."""
    _, _, a = run(tmp_path, "--seed", "11")
    _, _, b = run(tmp_path, "--seed", "11")
    _, _, c = run(tmp_path, "--seed", "11", "--backend", "trio")
    assert comparable(a) == comparable(b) == comparable(c)


def test_log_path_is_kept(tmp_path: Path) -> None:
    """``--log PATH`` writes the durable log where asked."""
    path = tmp_path / "demo.sqlite"
    rc, text, data = run(tmp_path, "--log", str(path))
    assert rc == 0 and path.exists()
    assert data["log"]["path"] == str(path)
    assert f"quiesce inspect {path}" in text
    assert f"quiesce view {path} -o report.html" in text


def test_cli_dispatch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``quiesce demo`` goes through the command dispatcher."""
    assert cli(["demo", *FAST, "--json", str(tmp_path / "r.json")]) == 0
    assert "OK: quiesce 0 failures" in capsys.readouterr().out


def test_too_few_turns_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exc:
        _demo.main(["--turns", "5"], out=io.StringIO())
    assert exc.value.code == 2


def test_seed_stories_replayed_on_the_core() -> None:
    """Part 1: each of the five stories is refused or made safe."""
    stories = replay_seeds()
    assert [s["story"] for s in stories] == [
        "dangling justification",
        "summary drift",
        "torn read",
        "prune/re-admit oscillation",
        "paraphrased constraint",
    ]
    assert all(s["safe"] for s in stories)


def test_checker_is_the_same_for_both() -> None:
    """The checker counts a removal under a reader and a dangling citation
    whatever the buffer: fed a naive list by hand, it sees them."""
    from quiesce import Entry, Kind

    world = NaiveWorld()
    checker = Checker()
    world.append(Entry("t", Kind.REASONING, "X is read-only"))
    checker.after_step(world.head(), 1)
    with world.view() as view:
        seen = checker.begin_read("verifier", 1, view)
        world.items.clear()  # the pruner deletes under the reader
        assert checker.end_read("verifier", 2, seen, view)
    world.append(Entry("v", Kind.RATIONALE, "safe because t", refs=("t",)))
    checker.after_step(world.head(), 2)
    counts = checker.counts()
    assert counts["torn reads"] == 1 and counts["dangling justifications"] == 1
