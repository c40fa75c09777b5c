"""``quiesce bench``: the benchmark suite, an application of the public API.

What it keeps true: it measures quiesce only through ``quiesce`` and
``quiesce.testing`` (never ``quiesce._core``), so what it times is what a
user gets. Modules:

* :mod:`.harness` — the method (cases, calibration, round-robin
  repetitions, ratio goals) and the fixtures the sections share;
* :mod:`.registry` — the sections and the figures each one draws (a section
  is one module that registers both);
* :mod:`.report` — running the sections, the table, ``results.json``, the
  figures; :mod:`.lib` — the names a section module imports;
* :mod:`.core`, :mod:`.memory` — the sync core's sections;
* :mod:`.agent` — the agent-loop section (quiesce vs lock- and copy-based
  baselines, asyncio and trio; the implementations in :mod:`.agent_impls`);
* :mod:`.durability` — the durable logs' section (SQLite and JSONL; its
  sinks and helpers in :mod:`.durability_sinks`, the locked-database figure
  in :mod:`.durability_locked`);
* :mod:`.long_life` — the long-lived agent's section (its workload in
  :mod:`.long_life_workload`, its figures in :mod:`.long_life_memory` and
  :mod:`.long_life_ops`);
* :mod:`.stall` — the event-loop stall meter (a heartbeat task), for
  sections that time an integration turn;
* :mod:`.cli` — the command: its arguments, the run, where the output goes.
"""

from __future__ import annotations

from .cli import main as main

__all__ = ["main"]
