"""The sync core's operations against their goals (issues 2 and 5), in one run.

    python benchmarks/core_ops.py [--quick] [--out DIR] [--gc] [--wall] [--only SECTION ...]

Measures mark_stale, append, snapshot pin/unpin, iteration, lookup, prune and
edit side by side with dict, immutables.Map, copying a dict per version and
aiorwlock, plus the memory pinned readers keep alive; prints the cases and a
PASS/MISS table of the goals; with ``--out DIR`` writes ``DIR/results.json``.
The method is described in ``quiesce.bench.lib`` (the measuring code lives in
the package, since ``benchmarks/`` is not installed); ``quiesce bench`` runs
the same sections and also draws the plots.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from quiesce.bench.cli import write_json
from quiesce.bench.lib import CORE_SECTIONS, FULL, QUICK, format_report, run_suite


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the core sections, print the report, return the results dict."""
    parser = argparse.ArgumentParser(prog="core_ops.py", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small, fast run (seconds)")
    parser.add_argument("--out", metavar="DIR", help="also write DIR/results.json")
    parser.add_argument("--gc", action="store_true", help="keep the GC on while timing")
    parser.add_argument("--wall", action="store_true", help="wall clock, not CPU time")
    parser.add_argument("--only", nargs="+", choices=CORE_SECTIONS, metavar="SECTION")
    args = parser.parse_args(argv)
    cfg = replace(QUICK if args.quick else FULL, gc=args.gc, timer="wall" if args.wall else "cpu")
    results = run_suite(
        cfg,
        args.only or CORE_SECTIONS,
        lambda name: print(f"running {name}...", file=sys.stderr, flush=True),
    )
    print(format_report(results))
    if args.out:
        print(f"wrote {write_json(results, Path(args.out))}")
    return results


if __name__ == "__main__":
    main()
