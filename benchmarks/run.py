"""Run the whole benchmark suite: the same as ``quiesce bench``.

    python benchmarks/run.py [--quick] [--out DIR] [--only SECTION ...] [--gc]

Writes ``DIR/results.json`` and PNG plots (default ``./bench-results``).
"""

from __future__ import annotations

import sys

from quiesce.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
