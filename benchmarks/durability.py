"""Durability benchmark: what a durable edit log costs the buffer.

    python benchmarks/durability.py [--quick] [--out results.json] [--gc] [--wall]

In memory vs ``SQLiteLog`` vs ``JsonlLog``, side by side in one run:
``mark_stale`` with no flusher (goal: <= 1.5x in memory) and while a thread
flushes every 10 ms; ``flush()`` of 1,000 pending records (goal: one commit,
counted by the sink and by SQLite's statement trace); sustained appends with
a flush every 10 ms (records/s, every one durable). Prints the cases and a
PASS/MISS table of the goals; with ``--out PATH`` writes the results as JSON.

The code lives in ``quiesce.bench.durability`` (``benchmarks/`` is not
installed), which also runs as the ``durability`` section of
``quiesce bench``; the method is in its docstring.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from quiesce.bench.durability import main as _main


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the durability benchmark; print the report; return a JSON-ready dict."""
    return _main(argv)


if __name__ == "__main__":
    main()
