"""The ``streaming`` section of ``quiesce bench`` (issue 24's table): a quick
run writes every figure, each goal measured (the SDKs are installed in the
test environment), every case with one figure per repetition, and the plot
of per-write cost against the text's length."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from quiesce.__main__ import main as quiesce_main

GOALS = {
    "stream_write_vs_mark",
    "stream_write_flat",
    "stream_memory",
    "stream_anthropic_vs_accumulate",
    "stream_openai_vs_handle_chunk",
    "stream_pin_p99_asyncio",
    "stream_pin_p99_trio",
    "stream_visibility_asyncio",
    "stream_visibility_trio",
}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench-streaming")
    rc = quiesce_main(["bench", "--quick", "--quiet", "--only", "streaming", "--out", str(out)])
    assert rc == 0
    return out


def test_every_goal_is_measured(run: Path) -> None:
    """Each goal of the table has a finite, positive value and a status."""
    results = json.loads((run / "results.json").read_text(encoding="utf-8"))
    goals = {g["key"]: g for g in results["goals"]}
    assert set(goals) >= GOALS
    for key in GOALS:
        g = goals[key]
        assert g["status"] in {"PASS", "MISS"}, g
        assert math.isfinite(g["value"]) and g["value"] >= 0, g
    reps = results["config"]["repeat"]
    cases = results["sections"]["streaming"]["cases"]
    lengths = sorted(c["param"]["text"] for c in cases if c["op"] == "write" and c["n"] == 1_000)
    assert lengths == [1_000, 10_000, 100_000, 1_000_000]
    for c in cases:
        assert len(c["ns"]) == reps and c["min"] <= c["median"] <= c["max"], c
    memory = results["sections"]["streaming"]["extra"]["memory"]
    assert memory["text"] > 1_000_000 and memory["held"] > 0


def test_the_plot_is_a_png(run: Path) -> None:
    """``streaming.png`` is a PNG matplotlib reads back."""
    import matplotlib.image

    path = run / "streaming.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert matplotlib.image.imread(path).shape[0] > 100
