"""``quiesce bench``: run the benchmark suite, write JSON results and PNG plots.

Usage: ``quiesce bench [--quick] [--out DIR] [--only SECTION ...] [--gc] [--wall]``.

The measuring code and the registry of sections live in
:mod:`quiesce._benchlib`; this module is the command: it runs the suite,
prints the table (cases, then goals with PASS/MISS), writes
``DIR/results.json`` and the plots ``DIR/ops_vs_n.png``,
``DIR/pin_vs_readers.png`` and ``DIR/goals.png``. matplotlib is imported only
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

from ._benchlib import (
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
            "copying a dict per version and aiorwlock; print PASS/MISS per goal; "
            "write JSON results and PNG plots."
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
    return written


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
