"""``quiesce bench``: run the benchmark suite, write JSON results and PNG plots.

Usage: ``quiesce bench [--quick] [--out DIR] [--only SECTION ...] [--gc] [--wall]``.

This module is only the command: its arguments, the run, and where the
output goes. It prints the table (cases, then goals with PASS/MISS), writes
``DIR/results.json`` and draws every figure the sections registered
(:data:`quiesce.bench.registry.PLOTS`: ``ops_vs_n.png``,
``pin_vs_readers.png``, ``goals.png`` and, when their sections ran,
``agent_loop_backlog.png``, ``agent_loop_latency.png``, ``durability.png``,
``long_life.png``...). The method is :mod:`.harness`, the registry
:mod:`.registry`, running and reporting :mod:`.report`. matplotlib is
imported only to draw, so a missing one costs the plots, not the numbers.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from .harness import FULL, QUICK, Config
from .registry import SECTIONS, load_section_modules
from .report import format_report, run_suite, write_json, write_plots

__all__ = ["main", "parse_args", "run", "write_json", "write_plots"]


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
