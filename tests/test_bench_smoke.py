"""Smoke test of ``quiesce bench``: it runs, and what it writes parses.

Never checks speed: the numbers depend on the machine; only their shape is
checked. The quick suite takes a few seconds.
"""

from __future__ import annotations

import importlib.util
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("aiorwlock")

from quiesce.__main__ import main as quiesce_main
from quiesce._benchlib import SECTIONS, Config, SectionResult, section

ROOT = Path(__file__).resolve().parent.parent
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
GOALS = {
    "mark_vs_map_set",
    "append_vs_dict_copy",
    "append_scaling",
    "pin_vs_rwlock",
    "pin_scaling_n",
    "pin_scaling_readers",
    "iterate_vs_dict",
    "memory_pinned_readers",
}


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path]:
    out = tmp_path_factory.mktemp("bench")
    rc = quiesce_main(["bench", "--quick", "--quiet", "--out", str(out)])
    return rc, out


class TestQuickRun:
    def test_exit_code_is_zero(self, bench_run: tuple[int, Path]) -> None:
        """``quiesce bench --quick --out DIR`` succeeds."""
        rc, _ = bench_run
        assert rc == 0

    def test_json_has_every_section_goal_and_the_machine(self, bench_run: tuple[int, Path]) -> None:
        """results.json parses and holds the machine, every section and every goal."""
        _, out = bench_run
        results = json.loads((out / "results.json").read_text(encoding="utf-8"))
        assert results["quick"] is True
        assert set(results["sections"]) == set(SECTIONS)
        machine = results["machine"]
        assert machine["python"] and machine["cpu_count"] >= 1
        assert {g["key"] for g in results["goals"]} >= GOALS
        for g in results["goals"]:
            assert g["op"] in {"<=", ">="}
            if g["key"] in GOALS:  # other sections may SKIP a goal
                assert g["status"] in {"PASS", "MISS"}
                assert math.isfinite(g["value"]) and g["value"] > 0

    def test_every_case_has_ordered_statistics(self, bench_run: tuple[int, Path]) -> None:
        """Each case has one positive ns/op per repetition and min <= median <= max."""
        _, out = bench_run
        results = json.loads((out / "results.json").read_text(encoding="utf-8"))
        reps = results["config"]["repeat"]
        for sec in results["sections"].values():
            for case in sec["cases"]:
                assert len(case["ns"]) == reps, case
                assert all(x > 0 for x in case["ns"]), case
                assert case["min"] <= case["median"] <= case["max"], case
                assert case["number"] >= 1

    @pytest.mark.parametrize("name", ["ops_vs_n.png", "pin_vs_readers.png", "goals.png"])
    def test_plots_are_png_images(self, bench_run: tuple[int, Path], name: str) -> None:
        """Each plot is a PNG that matplotlib can read back."""
        import matplotlib.image

        _, out = bench_run
        path = out / name
        assert path.read_bytes()[:8] == PNG_MAGIC
        image = matplotlib.image.imread(path)
        assert image.shape[0] > 100 and image.shape[1] > 100


class TestRegistry:
    @pytest.fixture
    def extra_section(self) -> Iterator[str]:
        name = "smoke-extra"

        @section(name)
        def _extra(cfg: Config) -> SectionResult:
            return SectionResult(name, extra={"quick": cfg.quick})

        try:
            yield name
        finally:
            del SECTIONS[name]

    def test_a_registered_section_runs_and_is_written(
        self, extra_section: str, tmp_path: Path
    ) -> None:
        """A section added with ``@section`` (the agent-loop hook) runs under
        ``--only`` and lands in the JSON."""
        rc = quiesce_main(
            [
                "bench",
                "--quick",
                "--quiet",
                "--no-plots",
                "--only",
                extra_section,
                "--out",
                str(tmp_path),
            ]
        )
        assert rc == 0
        results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
        assert results["sections"][extra_section]["extra"] == {"quick": True}

    def test_a_name_is_registered_once(self, extra_section: str) -> None:
        """Registering a taken name is an error, not a silent replacement."""
        with pytest.raises(ValueError, match=r"^benchmark section 'smoke-extra' is already"):
            section(extra_section)(lambda cfg: SectionResult(extra_section))


def test_core_ops_script_returns_its_results(capsys: pytest.CaptureFixture[str]) -> None:
    """``benchmarks/core_ops.py``'s ``main`` runs the chosen sections and returns a dict."""
    spec = importlib.util.spec_from_file_location("core_ops", ROOT / "benchmarks" / "core_ops.py")
    assert spec is not None and spec.loader is not None
    module: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    results = module.main(["--quick", "--only", "iterate", "memory"])
    assert set(results["sections"]) == {"iterate", "memory"}
    assert {g["key"] for g in results["goals"]} == {"iterate_vs_dict", "memory_pinned_readers"}
    printed = capsys.readouterr().out
    assert "iterate snapshot / iterate dict" in printed and ("PASS" in printed or "MISS" in printed)
