"""``quiesce bench``: the benchmark suite, an application of the public API.

What it keeps true: it measures quiesce only through ``quiesce`` and
``quiesce.testing`` (never ``quiesce._core``), so what it times is what a
user gets. Modules:

* :mod:`.lib` — the method (cases, calibration, round-robin repetitions,
  ratio goals), the core sections and the registry of sections;
* :mod:`.agent` — the agent-loop section (quiesce vs lock- and copy-based
  baselines, asyncio and trio);
* :mod:`.durability` — the durable logs' section (SQLite and JSONL);
* :mod:`.stall` — the event-loop stall meter (a heartbeat task), for
  sections that time an integration turn;
* :mod:`.cli` — the command: runs the suite, prints the goals table, writes
  ``results.json`` and the plots.
"""

from __future__ import annotations

from .cli import main as main

__all__ = ["main"]
