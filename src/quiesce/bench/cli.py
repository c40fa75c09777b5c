"""``quiesce bench``: run the benchmark suite, write JSON results and PNG plots.

Usage: ``quiesce bench [--quick] [--out DIR] [--only SECTION ...] [--gc] [--wall]``.

The measuring code and the registry of sections live in
:mod:`quiesce.bench.lib`; this module is the command: it runs the suite,
prints the table (cases, then goals with PASS/MISS), writes
``DIR/results.json`` and the plots ``DIR/ops_vs_n.png``,
``DIR/pin_vs_readers.png``, ``DIR/goals.png``, and, when those sections ran,
``DIR/agent_loop_backlog.png``, ``DIR/agent_loop_latency.png`` and
``DIR/durability.png``. matplotlib is imported only
to draw, so a missing one costs the plots, not the numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from .lib import (
    FULL,
    QUICK,
    SECTIONS,
    Config,
    format_report,
    load_section_modules,
    run_suite,
)

__all__ = ["main", "parse_args", "run", "write_json", "write_plots"]

RESULTS_FILE = "results.json"

#: line styles of the implementations in the plots
_STYLE: dict[str, dict[str, Any]] = {
    "quiesce": {"color": "tab:blue", "marker": "o", "linewidth": 2.2},
    "immutables.Map": {"color": "tab:green", "marker": "s"},
    "dict": {"color": "tab:gray", "marker": "^"},
    "dict copy": {"color": "tab:red", "marker": "v"},
}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    load_section_modules()  # so --only knows every section
    parser = argparse.ArgumentParser(
        prog="quiesce bench",
        description=(
            "Benchmark quiesce's core operations against dict, immutables.Map, "
            "copying a dict per version and aiorwlock, an agent loop against lock- "
            "and copy-based baselines, and the durable logs; print PASS/MISS per "
            "goal; write JSON results and PNG plots."
        ),
    )
    parser.add_argument("--quick", action="store_true", help="a small, fast run (a smoke test)")
    parser.add_argument(
        "--out",
        metavar="DIR",
        default="bench-results",
        help="folder for results.json and the plots (default: ./bench-results)",
    )
    parser.add_argument(
        "--only",
        metavar="SECTION",
        nargs="+",
        choices=list(SECTIONS),
        help=f"run only these sections (of: {', '.join(SECTIONS)})",
    )
    parser.add_argument(
        "--gc", action="store_true", help="keep the garbage collector on while timing"
    )
    parser.add_argument(
        "--wall",
        action="store_true",
        help="time with the wall clock instead of this process's CPU time",
    )
    parser.add_argument("--no-plots", action="store_true", help="write the JSON only")
    parser.add_argument("-q", "--quiet", action="store_true", help="print the goals table only")
    return parser.parse_args(list(argv) if argv is not None else None)


def config_for(args: argparse.Namespace) -> Config:
    base = QUICK if args.quick else FULL
    return replace(base, gc=bool(args.gc), timer="wall" if args.wall else "cpu")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the suite as ``args`` say and print the report; return the results."""
    cfg = config_for(args)

    def progress(name: str) -> None:
        if not args.quiet:
            print(f"running {name}...", file=sys.stderr, flush=True)

    results = run_suite(cfg, args.only, progress)
    print(format_report(results, cases=not args.quiet))
    return results


def write_json(results: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / RESULTS_FILE
    path.write_text(json.dumps(results, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    return path


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, imported on first use."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def write_plots(results: dict[str, Any], out: Path) -> list[Path]:
    """Draw the plots into ``out``; raises ``ImportError`` without matplotlib."""
    plt = _pyplot()
    out.mkdir(parents=True, exist_ok=True)
    written = []
    machine = results["machine"]
    stamp = (
        f"{machine['implementation']} {machine['python']}, {machine['cpu_count']} cores, "
        f"{machine['date_utc']}{' (quick)' if results['quick'] else ''}"
    )

    # 1. op cost vs n, log-log, one panel per sized operation.
    sized = [
        (name, sec)
        for name, sec in results["sections"].items()
        if sum(1 for c in sec["cases"] if c["impl"] == "quiesce" and c["n"] is not None) > 1
        and name != "pin"
    ]
    if sized:
        cols = min(3, len(sized))
        rows = (len(sized) + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.2 * rows), squeeze=False)
        for ax, (name, sec) in zip(axes.flat, sized, strict=False):
            by_impl: dict[str, list[dict[str, Any]]] = {}
            for c in sec["cases"]:
                if c["n"] is not None and not c["param"] and c["median"] is not None:
                    by_impl.setdefault(c["impl"], []).append(c)
            for impl, cs in by_impl.items():
                cs.sort(key=lambda c: c["n"])
                xs = [c["n"] for c in cs]
                style = _STYLE.get(impl, {})
                ax.plot(xs, [c["median"] for c in cs], label=impl, **style)
                ax.fill_between(
                    xs,
                    [c["min"] for c in cs],
                    [c["max"] for c in cs],
                    color=style.get("color"),
                    alpha=0.15,
                    linewidth=0,
                )
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title(name)
            ax.set_xlabel("entries n")
            ax.set_ylabel("ns per operation (median; band: min..max)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        for ax in list(axes.flat)[len(sized) :]:
            ax.set_visible(False)
        fig.suptitle(f"quiesce core operations vs n — {stamp}", fontsize=10)
        fig.tight_layout()
        path = out / "ops_vs_n.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    # 2. pin cost vs pinned readers, and vs n.
    pin = results["sections"].get("pin")
    if pin is not None:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
        readers = sorted(
            (c for c in pin["cases"] if c["impl"] == "quiesce" and c["param"].get("readers")),
            key=lambda c: c["param"]["readers"],
        )
        sizes = sorted(
            (c for c in pin["cases"] if c["impl"] == "quiesce" and c["param"].get("readers") == 0),
            key=lambda c: c["n"],
        )
        refs = [c for c in pin["cases"] if c["n"] is None]
        panels: list[tuple[Any, list[dict[str, Any]], list[int], str]] = [
            (ax1, readers, [c["param"]["readers"] for c in readers], "readers already pinned"),
            (ax2, sizes, [c["n"] for c in sizes], "entries n"),
        ]
        for ax, cs, xs, xlabel in panels:
            ax.errorbar(
                xs,
                [c["median"] for c in cs],
                yerr=[
                    [c["median"] - c["min"] for c in cs],
                    [c["max"] - c["median"] for c in cs],
                ],
                label="quiesce pin + unpin",
                capsize=3,
                **_STYLE["quiesce"],
            )
            for ref, color in zip(refs, ("tab:orange", "tab:purple", "tab:brown"), strict=False):
                ax.axhline(
                    ref["median"], color=color, linestyle="--", label=f"{ref['impl']} {ref['op']}"
                )
                if ref["impl"] == "aiorwlock":
                    ax.axhline(
                        0.2 * ref["median"],
                        color=color,
                        linestyle=":",
                        label="goal: 0.2× aiorwlock",
                    )
            ax.set_xscale("log")
            ax.set_ylim(bottom=0)
            ax.set_xlabel(xlabel)
            ax.set_ylabel("ns per pin + unpin (median; bars: min..max)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        ax1.set_title("pin cost vs pinned readers (n = 1e4, asyncio)")
        ax2.set_title("pin cost vs buffer size (asyncio)")
        fig.suptitle(f"quiesce snapshot pin — {stamp}", fontsize=10)
        fig.tight_layout()
        path = out / "pin_vs_readers.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    # 3. goals: measured / target (below 1 is met), on a log axis.
    goals = [g for g in results["goals"] if g["value"] is not None]
    if goals:
        fig, ax = plt.subplots(figsize=(11, 0.5 * len(goals) + 1.6))
        scores = [
            g["value"] / g["limit"] if g["op"] == "<=" else g["limit"] / g["value"] for g in goals
        ]
        colors = ["tab:green" if g["status"] == "PASS" else "tab:red" for g in goals]
        labels = [f"{g['text']}  ({g['value']:.3g} {g['op']} {g['limit']:g})" for g in goals]
        ax.barh(range(len(goals)), scores, color=colors)
        ax.axvline(1.0, color="black", linewidth=1)
        ax.set_yticks(range(len(goals)), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("measured / target (≤ 1: goal met)")
        ax.set_title(f"quiesce bench goals\n{stamp}", fontsize=10)
        fig.tight_layout()
        path = out / "goals.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    # 4.-7. the agent loop (backlog over time, latencies), durability and
    # the long-life curves.
    for draw in (_plot_agent_backlog, _plot_agent_latency, _plot_durability, _plot_long_life):
        path_or_none = draw(plt, results, out, stamp)
        if path_or_none is not None:
            written.append(path_or_none)
    return written


#: colours of the agent-loop implementations; trio bars are hatched
_AGENT_COLOR = {
    "quiesce": "tab:blue",
    "aiorwlock": "tab:orange",
    "asyncio.Lock": "tab:purple",
    "dict-copy": "tab:red",
    "global-quiescence": "tab:brown",
}
_AGENT_OPS = ("pin", "mark", "append", "prune")


def _plot_agent_backlog(plt: Any, results: dict[str, Any], out: Path, stamp: str) -> Path | None:
    """``agent_loop_backlog.png``: the deferred backlog (removals accepted,
    not yet applied) over one run, quiesce vs the global-quiescence barrier,
    one panel per backend."""
    agent = results["sections"].get("agent_loop")
    if agent is None or "results" not in agent["extra"]:
        return None
    rows = agent["extra"]["results"]
    backends = [
        b for b in ("asyncio", "trio") if f"quiesce/{b}" in rows or f"global-quiescence/{b}" in rows
    ]
    if not backends:
        return None
    fig, axes = plt.subplots(1, len(backends), figsize=(5.8 * len(backends), 4.2), squeeze=False)
    top = max(
        (b for row in rows.values() for _, b in row["backlog"]["series"]),
        default=0,
    )
    for ax, backend in zip(axes.flat, backends, strict=True):
        done: list[float] = []
        for impl, style in (
            ("global-quiescence", {"linewidth": 1.6}),
            ("quiesce", {"linewidth": 2.2}),
        ):
            row = rows.get(f"{impl}/{backend}")
            if row is None:
                continue
            series = row["backlog"]["series"]
            ts = [1e3 * t for t, _ in series]
            label = (
                f"{impl} (max {row['backlog']['max']} over {row['repeats']} runs)"
                if impl == "quiesce"
                else f"{impl} barrier (max {row['backlog']['max']} over {row['repeats']} runs)"
            )
            ax.step(
                ts,
                [b for _, b in series],
                where="post",
                color=_AGENT_COLOR[impl],
                label=label,
                **style,
            )
            if row["backlog"].get("series_readers_done_s") is not None:
                done.append(1e3 * row["backlog"]["series_readers_done_s"])
        if done:
            readers = agent["extra"]["config"]["readers"]
            ax.axvspan(
                0, max(done), color="0.85", alpha=0.5, zorder=0, label=f"{readers} readers overlap"
            )
        ax.set_title(f"{backend}")
        ax.set_xlabel("ms since the load started (one run)")
        ax.set_ylabel("deferred backlog (removals waiting)")
        ax.set_ylim(0, max(1.0, 1.15 * top))  # the same scale in every panel
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="upper right")
    fig.suptitle(
        "agent loop: deferred backlog over time — quiesce (per-entry grace points) vs a "
        f"global-quiescence barrier\n{stamp}",
        fontsize=10,
    )
    fig.tight_layout()
    path = out / "agent_loop_backlog.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_agent_latency(plt: Any, results: dict[str, Any], out: Path, stamp: str) -> Path | None:
    """``agent_loop_latency.png``: p99 latency per operation and
    implementation (bars, log scale; p50 as ticks), with the 1/100-of-aiorwlock
    goal drawn; and wall time per implementation."""
    agent = results["sections"].get("agent_loop")
    if agent is None or "results" not in agent["extra"]:
        return None
    rows: dict[str, Any] = agent["extra"]["results"]
    keys = list(rows)
    fig, (ax, ax_wall) = plt.subplots(
        1, 2, figsize=(13, 5.6), gridspec_kw={"width_ratios": [2.6, 1]}
    )
    width = 0.8 / len(keys)
    for i, key in enumerate(keys):
        row = rows[key]
        xs, p99s, p50s = [], [], []
        for j, op in enumerate(_AGENT_OPS):
            lat = row["latency_us"][op]
            if lat["p99"] is None:
                continue
            xs.append(j - 0.4 + width * (i + 0.5))
            p99s.append(max(lat["p99"], 1e-3))
            p50s.append(max(lat["p50"], 1e-3))
        hatch = "//" if row["backend"] == "trio" else None
        color = _AGENT_COLOR.get(row["impl"], "tab:gray")
        ax.bar(xs, p99s, width, color=color, hatch=hatch, edgecolor="white", label=key)
        ax.scatter(xs, p50s, marker="_", color="black", s=60, zorder=3)
    rw = rows.get("aiorwlock/asyncio")
    if rw is not None:
        for j, op in enumerate(("pin", "mark")):
            goal = rw["latency_us"][op]["p99"] / 100
            ax.hlines(
                goal,
                j - 0.45,
                j + 0.45,
                colors="tab:orange",
                linestyles=":",
                label="goal: 1/100 of aiorwlock's p99" if j == 0 else None,
            )
    ax.scatter([], [], marker="_", color="black", s=60, label="p50")
    ax.set_xticks(range(len(_AGENT_OPS)), ["pin", "mark_stale", "append", "prune"])
    ax.set_yscale("log")
    ax.set_ylabel("p99 latency, µs (log; lock waits included)")
    ax.set_title("p99 latency per operation (bars), p50 (ticks)")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.09))
    walls = [rows[k]["wall_s"] for k in keys]
    ax_wall.barh(
        range(len(keys)),
        [w["min"] for w in walls],
        xerr=[[0] * len(keys), [w["max"] - w["min"] for w in walls]],
        color=[_AGENT_COLOR.get(rows[k]["impl"], "tab:gray") for k in keys],
        hatch=None,
        capsize=2,
    )
    for i, k in enumerate(keys):
        if rows[k]["backend"] == "trio":
            ax_wall.patches[i].set_hatch("//")
    ax_wall.set_yticks(range(len(keys)), keys, fontsize=8)
    ax_wall.invert_yaxis()
    ax_wall.set_xscale("log")
    ax_wall.set_xlabel("wall time, s (min over runs; whisker: to max)")
    ax_wall.set_title("wall time of the whole load")
    ax_wall.grid(True, axis="x", which="both", alpha=0.3)
    fig.suptitle(f"agent loop: quiesce vs lock- and copy-based baselines — {stamp}", fontsize=10)
    fig.tight_layout()
    path = out / "agent_loop_latency.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_durability(plt: Any, results: dict[str, Any], out: Path, stamp: str) -> Path | None:
    """``durability.png``: mark_stale in memory vs with a durable sink (no
    flusher; with one), the cost of one group commit, sustained durable
    appends per second."""
    dur = results["sections"].get("durability")
    if dur is None or not dur["cases"]:
        return None
    colors = {"in memory": "tab:gray", "SQLiteLog": "tab:blue", "JsonlLog": "tab:green"}
    fig, (ax_mark, ax_flush, ax_rate) = plt.subplots(
        1, 3, figsize=(14, 4.2), gridspec_kw={"width_ratios": [1.5, 1, 1]}
    )

    def bars(ax: Any, cases: list[dict[str, Any]], x0: float, scale: float) -> None:
        width = 0.8 / max(1, len(cases))
        for i, c in enumerate(cases):
            ax.bar(
                x0 - 0.4 + width * (i + 0.5),
                c["median"] * scale,
                width,
                yerr=[[(c["median"] - c["min"]) * scale], [(c["max"] - c["median"]) * scale]],
                color=colors.get(c["impl"], "tab:gray"),
                capsize=3,
                label=c["impl"] if x0 == 0 else None,
            )

    marks = [c for c in dur["cases"] if c["op"] == "mark"]
    groups = [
        ("no flusher\n(CPU time)", [c for c in marks if c["param"].get("flusher") == "none"]),
        (
            "a flush every 10 ms\n(wall time)",
            [c for c in marks if c["param"].get("flusher") == "10ms"],
        ),
    ]
    for x, (_, cs) in enumerate(groups):
        bars(ax_mark, cs, x, 1.0)
    ax_mark.set_xticks(range(len(groups)), [g for g, _ in groups])
    ax_mark.set_ylabel("ns per mark_stale (median; bars: min..max)")
    ax_mark.set_title("mark_stale: in memory vs durable sink")
    ax_mark.legend(fontsize=8)
    ax_mark.grid(True, axis="y", alpha=0.3)

    flushes = [c for c in dur["cases"] if c["op"].startswith("flush")]
    bars(ax_flush, flushes, 0, 1e-6)
    commit = dur["extra"].get("group_commit", {})
    for i, c in enumerate(flushes):
        per = commit.get(c["impl"], {}).get("commits_per_flush", [])
        width = 0.8 / len(flushes)
        ax_flush.annotate(
            f"{c['impl']}\n{' or '.join(map(str, per))} commit(s)\nper flush",
            (-0.4 + width * (i + 0.5), c["median"] * 0.5e-6),
            ha="center",
            va="center",
            fontsize=8,
            color="white",
        )
    ax_flush.set_xticks([])
    ax_flush.set_ylabel("ms per flush() (median; bars: min..max)")
    title = flushes[0]["op"] if flushes else "flush"
    ax_flush.set_title(f"group commit: {title}")
    ax_flush.grid(True, axis="y", alpha=0.3)

    sustained = dur["extra"].get("sustained_appends_flush_10ms", {})
    kinds = [k for k in colors if k in sustained]
    rates = [sustained[k]["records_per_s"] for k in kinds]
    ax_rate.bar(
        range(len(kinds)),
        [r["median"] for r in rates],
        yerr=[[r["median"] - r["min"] for r in rates], [r["max"] - r["median"] for r in rates]],
        color=[colors[k] for k in kinds],
        capsize=3,
    )
    ax_rate.set_xticks(range(len(kinds)), kinds)
    ax_rate.set_ylabel("records/s, all durable (median; bars: min..max)")
    ax_rate.set_title("sustained appends, a flush every 10 ms")
    ax_rate.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"durability: in memory vs SQLiteLog vs JsonlLog — {stamp}", fontsize=10)
    fig.tight_layout()
    path = out / "durability.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_long_life(plt: Any, results: dict[str, Any], out: Path, stamp: str) -> Path | None:
    """``long_life.png``: over one long run (the ``long_life`` section's
    workload), the memory held and the per-op cost against operations done,
    durable (SQLite log) vs in memory, and recovery time (and the time to
    read the newest checkpoint and tail) against log length."""
    sec = results["sections"].get("long_life")
    curves = sec["extra"].get("curves") if sec is not None else None
    if not curves or not curves.get("durable"):
        return None
    fig, (ax_mem, ax_op, ax_rec) = plt.subplots(1, 3, figsize=(15, 4.4))
    series = (
        ("durable (SQLite log)", "durable", "tab:blue"),
        ("in memory", "in_memory", "tab:red"),
    )
    for label, key, color in series:
        pts = curves.get(key, [])
        ops = [p["ops"] for p in pts]
        ax_mem.plot(ops, [p["bytes"] / 1e6 for p in pts], "o-", color=color, ms=3, label=label)
        ax_op.plot(ops, [p["per_op_us"] for p in pts], "o-", color=color, ms=3, label=label)
    fresh = curves.get("fresh_bytes")
    if fresh:
        ax_mem.axhline(
            fresh / 1e6, color="black", linestyle="--", linewidth=1, label="fresh buffer, same live"
        )
    ax_mem.set_xscale("log")
    ax_mem.set_xlabel("operations done")
    ax_mem.set_ylabel("MB held (tracemalloc, after gc)")
    ax_mem.set_title("memory against operations done")
    ax_mem.legend(fontsize=8)
    ax_mem.grid(True, which="both", alpha=0.3)
    ax_op.set_xscale("log")
    top = max([p["per_op_us"] for _, key, _ in series for p in curves.get(key, [])], default=1.0)
    ax_op.set_ylim(0, 1.3 * top)
    ax_op.set_xlabel("operations done")
    ax_op.set_ylabel("µs per operation since the previous point")
    ax_op.set_title("per-op cost (wall time, under tracemalloc)")
    ax_op.legend(fontsize=8, loc="upper left")
    ax_op.grid(True, which="both", alpha=0.3)
    rec = curves.get("recovery", [])
    recs = [r["records"] for r in rec]
    ax_rec.plot(
        recs,
        [r["recovery_s"] * 1e3 for r in rec],
        "o-",
        color="tab:blue",
        label="recovery: Buffer(log=SQLiteLog(path))",
    )
    ax_rec.plot(
        recs,
        [r["read_s"] * 1e3 for r in rec],
        "s--",
        color="tab:gray",
        label="read newest checkpoint + tail (read_range)",
    )
    for r in rec:
        ax_rec.annotate(
            f"tail {r['tail_records']:,}",
            (r["records"], r["recovery_s"] * 1e3),
            textcoords="offset points",
            xytext=(0, 6),
            ha="center",
            fontsize=7,
        )
    ax_rec.set_xscale("log")
    ax_rec.xaxis.set_minor_formatter(plt.NullFormatter())
    top = max([r["recovery_s"] * 1e3 for r in rec], default=1.0)
    ax_rec.set_ylim(0, 1.45 * top)  # room above the data for the legend
    ax_rec.set_xlabel("log length, records (tail: records after the newest checkpoint)")
    ax_rec.set_ylabel("ms (median)")
    ax_rec.set_title("recovery against log length")
    ax_rec.legend(fontsize=8, loc="upper left")
    ax_rec.grid(True, which="both", alpha=0.3)
    cfg = sec["extra"].get("config", {})
    fig.suptitle(
        f"long life: {cfg.get('live', '?'):,} live entries, rounds of {cfg.get('batch', '?')} "
        f"appends + marks + one prune — {stamp}",
        fontsize=10,
    )
    fig.tight_layout()
    path = out / "long_life.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """``quiesce bench``: 0 when the results and plots are written, 1 when the
    plots could not be drawn (matplotlib missing), 2 on bad arguments."""
    try:
        args = parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    results = run(args)
    out = Path(args.out)
    path = write_json(results, out)
    print(f"wrote {path}")
    if args.no_plots:
        return 0
    try:
        plots = write_plots(results, out)
    except ImportError:
        print(
            "quiesce bench: matplotlib is not installed, so no plots were drawn "
            "(the JSON results are written). Install it with: pip install 'quiesce[bench]'",
            file=sys.stderr,
        )
        return 1
    for p in plots:
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
