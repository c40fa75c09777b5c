"""Agent-loop benchmark: quiesce against lock- and copy-based baselines.

100 reader coroutines pin a snapshot and hold it across a simulated model call
while tool callers append, a marker marks stale and a pruner prunes; the same
load runs on quiesce (asyncio and trio), an ``aiorwlock.RWLock`` + dict, an
``asyncio.Lock`` + dict, dict-copy snapshots and a "global quiescence" barrier
(prune only when zero readers are pinned). Prints a table of wall time, p50/p99
latency of pin, mark_stale and append (lock waits included), the deferred
backlog, and the goals as measured ratios.

    python benchmarks/agent_loop.py [--quick] [--json PATH] [--repeats N] [--only IMPL]

The code lives in ``quiesce.bench.agent`` (``benchmarks/`` is not installed),
which also runs as the ``agent_loop`` section of ``quiesce bench``. The method
is in its docstring.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from quiesce.bench.agent import main as _main


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the agent-loop benchmark; print a table; return a JSON-ready dict."""
    return _main(argv)


if __name__ == "__main__":
    main()
