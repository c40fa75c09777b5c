"""Smoke test of ``quiesce bench``: it runs, and what it writes parses.

Never checks speed: the numbers depend on the machine; only their shape is
checked. By default the command runs every section once at tiny sizes
(:data:`TINY` and the per-section sizes of :func:`tiny_sizes`): each
section's code path, every goal and every figure; the real ``quiesce
bench --quick`` runs under ``-m slow``
(:func:`test_the_quick_run_writes_every_goal_and_figure`).
"""

from __future__ import annotations

import importlib.util
import json
import math
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("aiorwlock")

from quiesce.__main__ import main as quiesce_main
from quiesce.bench.lib import QUICK, SECTIONS, Config, SectionResult, section

ROOT = Path(__file__).resolve().parents[2]
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
    "durability_mark_sqlite_vs_memory",
    "durability_mark_jsonl_vs_memory",
    "durability_group_commit_sqlite",
    "durability_group_commit_jsonl",
    "durability_mark_locked_p99",
    "ll_memory_durable",
    "ll_memory_in_memory",
    "ll_memory_recovered",
    "ll_big_outputs",
    "ll_recovery_long_short",
    "ll_recovery_vs_read",
    "ll_move",
    "ll_first_iter",
    "ll_refused_edit_wait",
    "ll_per_op_aged",
    "ll_gc_pause",
    "ll_sqlite_open",
    "ll_prune_big_body",
    "ll_alarm_pass",
    "ll_stats_readers",
    "ll_pin_trio",
    "ll_pin_thread",
    "ll_crafted_collisions",
    "otel_mark_stale",
    "otel_pin",
    "import_quiesce",
    "frameworks_langchain_turn",
    "frameworks_pydantic_ai_turn",
    "frameworks_openai_agents_turn",
    "frameworks_autogen_turn",
    "frameworks_loop_stall_ms",
}
PLOTS = [
    "ops_vs_n.png",
    "pin_vs_readers.png",
    "goals.png",
    "agent_loop_backlog.png",
    "agent_loop_latency.png",
    "durability.png",
    "long_life.png",
]


#: the suite's sizes for the smoke run: two sizes, two repetitions, short
#: calibration targets (the quick run: three sizes, five repetitions)
TINY = replace(
    QUICK, sizes=(100, 1_000), repeat=2, target_ns=200_000, max_number=2_000, readers=(1, 100)
)


def tiny_sizes(mp: pytest.MonkeyPatch) -> None:
    """Shrink the sections that size themselves (``--quick`` picks them):
    the suite's :data:`TINY`, the agent loop's readers, the long_life
    workload (still 15+ curve points and five recovery copies), the
    durability loops. The sections run the same code; only their loops are
    shorter."""
    from quiesce.bench import agent, cli, durability, long_life

    mp.setattr(cli, "QUICK", TINY)
    # the agent loop with 30 readers (the quick run: 100); every backlog and
    # latency series is still there
    mp.setattr(agent, "QUICK", replace(agent.QUICK, readers=30))
    mp.setattr(durability, "QUICK", TINY)
    mp.setattr(
        long_life,
        "QUICK_LL",
        replace(
            long_life.QUICK_LL,
            ops=2_000,
            ops_short=300,
            live=60,
            batch=10,
            big_cycles=20,
            edit_m=20,
            move_n=(100, 500),
            iter_n=500,
            repeat=2,
            edit_pool=2_000,
            collisions=200,
        ),
    )
    real = durability.DurabilityConfig.for_suite

    def for_suite(cfg: Config) -> durability.DurabilityConfig:
        return replace(real(cfg), flusher_marks=2_000, sustained_s=0.02)

    mp.setattr(durability.DurabilityConfig, "for_suite", staticmethod(for_suite))


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path]:
    """``quiesce bench --quick`` once for the module, at the tiny sizes of
    :func:`tiny_sizes` (the tests check the shape of what it writes, never
    its values)."""
    out = tmp_path_factory.mktemp("bench")
    with pytest.MonkeyPatch.context() as mp:
        tiny_sizes(mp)
        rc = quiesce_main(["bench", "--quick", "--quiet", "--out", str(out)])
    return rc, out


@pytest.mark.slow
def test_the_quick_run_writes_every_goal_and_figure(tmp_path: Path) -> None:
    """The real ``quiesce bench --quick`` (every section at its quick sizes)
    succeeds and writes every goal, PASS or MISS, and every figure."""
    rc = quiesce_main(["bench", "--quick", "--quiet", "--out", str(tmp_path)])
    assert rc == 0
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert set(results["sections"]) == set(SECTIONS)
    goals = {g["key"]: g for g in results["goals"]}
    assert set(goals) >= GOALS
    assert all(goals[k]["status"] in {"PASS", "MISS"} for k in GOALS)
    for name in PLOTS:
        assert (tmp_path / name).read_bytes()[:8] == PNG_MAGIC


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

    @pytest.mark.parametrize("name", PLOTS)
    def test_plots_are_png_images(self, bench_run: tuple[int, Path], name: str) -> None:
        """Each plot is a PNG that matplotlib can read back."""
        import matplotlib.image

        _, out = bench_run
        path = out / name
        assert path.read_bytes()[:8] == PNG_MAGIC
        image = matplotlib.image.imread(path)
        assert image.shape[0] > 100 and image.shape[1] > 100

    def test_agent_loop_has_backlog_series_for_both_barriers(
        self, bench_run: tuple[int, Path]
    ) -> None:
        """The agent-loop section stores, for quiesce and the global-quiescence
        barrier on asyncio and trio, a backlog series over time (what
        agent_loop_backlog.png draws) and p50/p99 per operation."""
        _, out = bench_run
        results = json.loads((out / "results.json").read_text(encoding="utf-8"))
        rows = results["sections"]["agent_loop"]["extra"]["results"]
        for impl in ("quiesce", "global-quiescence"):
            for backend in ("asyncio", "trio"):
                backlog = rows[f"{impl}/{backend}"]["backlog"]
                times = [t for t, _ in backlog["series"]]
                assert len(times) >= 2 and times == sorted(times)
                assert all(b >= 0 for _, b in backlog["series"])
                assert backlog["max"] >= max(b for _, b in backlog["series"])
                assert backlog["series_readers_done_s"] > 0
        for row in rows.values():
            for op in ("pin", "mark", "append", "prune"):
                lat = row["latency_us"][op]
                assert lat["n"] > 0 and 0 <= lat["p50"] <= lat["p99"] <= lat["max"], row["impl"]

    def test_durability_section_reports_commits_and_rates(
        self, bench_run: tuple[int, Path]
    ) -> None:
        """The durability section stores commits per flush (SQLite's traced
        COMMITs too) and sustained durable appends per second for every sink."""
        _, out = bench_run
        results = json.loads((out / "results.json").read_text(encoding="utf-8"))
        extra = results["sections"]["durability"]["extra"]
        commit = extra["group_commit"]
        assert set(commit) == {"SQLiteLog", "JsonlLog"}
        assert all(g["records"] == 1_000 and g["commits_per_flush"] for g in commit.values())
        assert commit["SQLiteLog"]["sqlite_traced_commits_per_flush"]
        sustained = extra["sustained_appends_flush_10ms"]
        for kind in ("in memory", "SQLiteLog", "JsonlLog"):
            rate = sustained[kind]["records_per_s"]
            assert 0 < rate["min"] <= rate["median"] <= rate["max"]
        assert set(extra["mark_with_flusher"]["ratio_vs_memory"]) == {"SQLiteLog", "JsonlLog"}

    def test_long_life_stores_its_curves(self, bench_run: tuple[int, Path]) -> None:
        """The long_life section stores what long_life.png draws: memory and
        per-op cost at ~15 points of the durable and the in-memory run (ops
        increasing, ending at the run's ops), and recovery of copies of the
        durable log taken during the run (log length increasing, ending at
        the long log itself)."""
        _, out = bench_run
        results = json.loads((out / "results.json").read_text(encoding="utf-8"))
        extra = results["sections"]["long_life"]["extra"]
        curves, ops = extra["curves"], extra["config"]["ops"]
        for key, lo, hi in (("durable", 15, 20), ("in_memory", 12, 15)):
            pts = curves[key]
            assert lo <= len(pts) <= hi, (key, len(pts))
            done = [p["ops"] for p in pts]
            assert done == sorted(set(done)) and done[-1] >= ops, key
            assert all(p["bytes"] > 0 and p["per_op_us"] > 0 for p in pts), key
        # the in-memory run's last point is the run's memory figure
        assert curves["in_memory"][-1]["bytes"] == pytest.approx(
            extra["in_memory"]["bytes"], rel=0.2
        )
        rec = curves["recovery"]
        assert len(rec) == 5
        records = [r["records"] for r in rec]
        assert records == sorted(set(records)) and records[-1] == extra["durable"]["records"]
        assert [r["ops"] for r in rec] == sorted(r["ops"] for r in rec)
        for r in rec:
            assert r["recovery_s"] > 0 and r["read_s"] > 0
            assert 0 < r["tail_records"] <= r["records"]
        assert curves["fresh_bytes"] == extra["durable"]["fresh_bytes"]


def test_frameworks_section_reports_each_framework(bench_run: tuple[int, Path]) -> None:
    """The frameworks section stores each framework's per-turn times with and
    without quiesce at each size, and the loop stall with and without."""
    _, out = bench_run
    extra = json.loads((out / "results.json").read_text(encoding="utf-8"))["sections"][
        "frameworks"
    ]["extra"]
    assert set(extra["turn"]) == {"langchain", "pydantic-ai", "openai-agents", "autogen"}
    for sizes in extra["turn"].values():
        assert set(sizes) == {"10", "100"}
        for row in sizes.values():
            assert row["ratio"] > 0 and row["quiesce_ms"] > 0 and row["default_ms"] > 0
    stall = extra["stall_ms"]
    assert stall["n"] == 100 and stall["quiesce_longest_step"] > 0
    assert stall["quiesce_hook_median_total"] >= stall["quiesce_longest_step"] / 100
    assert stall["heartbeat_quiesce_sqlite"] >= 0 and stall["heartbeat_default"] >= 0


def test_durability_script_keeps_its_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``benchmarks/durability.py --quick --out PATH`` runs the durability
    section alone (at the smoke run's tiny sizes), prints its goals and
    writes the JSON to PATH."""
    spec = importlib.util.spec_from_file_location(
        "durability_script", ROOT / "benchmarks" / "durability.py"
    )
    assert spec is not None and spec.loader is not None
    module: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path = tmp_path / "durability.json"
    with pytest.MonkeyPatch.context() as mp:
        tiny_sizes(mp)
        results = module.main(["--quick", "--out", str(path)])
    assert set(results["sections"]) == {"durability"}
    written = json.loads(path.read_text(encoding="utf-8"))
    assert [g["key"] for g in written["goals"]] == [g["key"] for g in results["goals"]]
    assert {g["key"] for g in written["goals"]} == {
        "durability_mark_sqlite_vs_memory",
        "durability_mark_jsonl_vs_memory",
        "durability_group_commit_sqlite",
        "durability_group_commit_jsonl",
        "durability_mark_locked_p99",
    }
    printed = capsys.readouterr().out
    assert "commits per flush of 1,000 records, SQLiteLog" in printed


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
    # the smoke run's tiny sizes: the script's own flags, sections and report
    # are what this checks, never its sizes (``--quick`` picks ``QUICK``)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(module, "QUICK", TINY)
        results = module.main(["--quick", "--only", "iterate", "memory"])
    assert set(results["sections"]) == {"iterate", "memory"}
    assert {g["key"] for g in results["goals"]} == {"iterate_vs_dict", "memory_pinned_readers"}
    printed = capsys.readouterr().out
    assert "iterate snapshot / iterate dict" in printed and ("PASS" in printed or "MISS" in printed)


# -- the streaming section (issue 24's table), from the same run ---------------
# (was tests/tools/test_bench_streaming.py, which ran the section a second time)

STREAMING_GOALS = {
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


class TestStreamingSection:
    """The ``streaming`` section of the module's run writes every figure,
    each goal measured (the SDKs are installed in the test environment),
    every case with one figure per repetition, and the plot of per-write
    cost against the text's length."""

    def test_every_goal_is_measured(self, bench_run: tuple[int, Path]) -> None:
        """Each goal of the table has a finite, non-negative value and a status."""
        _, out = bench_run
        results = json.loads((out / "results.json").read_text(encoding="utf-8"))
        goals = {g["key"]: g for g in results["goals"]}
        assert set(goals) >= STREAMING_GOALS
        for key in STREAMING_GOALS:
            g = goals[key]
            assert g["status"] in {"PASS", "MISS"}, g
            assert math.isfinite(g["value"]) and g["value"] >= 0, g
        reps = results["config"]["repeat"]
        cases = results["sections"]["streaming"]["cases"]
        lengths = sorted(
            c["param"]["text"] for c in cases if c["op"] == "write" and c["n"] == 1_000
        )
        assert lengths == [1_000, 10_000, 100_000, 1_000_000]
        for c in cases:
            assert len(c["ns"]) == reps and c["min"] <= c["median"] <= c["max"], c
        memory = results["sections"]["streaming"]["extra"]["memory"]
        assert memory["text"] > 1_000_000 and memory["held"] > 0

    def test_the_plot_is_a_png(self, bench_run: tuple[int, Path]) -> None:
        """``streaming.png`` is a PNG matplotlib reads back."""
        import matplotlib.image

        _, out = bench_run
        path = out / "streaming.png"
        assert path.read_bytes()[:8] == PNG_MAGIC
        assert matplotlib.image.imread(path).shape[0] > 100
