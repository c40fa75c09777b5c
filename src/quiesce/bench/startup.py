"""The ``import`` section: what ``import quiesce`` costs a fresh interpreter.

What it keeps true: every figure comes from a new interpreter (this one has
imported everything already), so nothing is cached in memory; the ``.pyc``
files are warm (one untimed run first), as for any program started twice.
Two figures per run, interleaved: the time of the ``import quiesce``
statement measured inside the child with the suite's timer (CPU time of the
process by default, as every other section: a busy machine does not inflate
it; ``--wall`` for the wall clock), and the interpreter's own ``-X
importtime`` count (wall clock: the cumulative microseconds of the
``quiesce`` line), reported beside it. The goal (issue 24): the median ≤
150 ms, stated as a ratio to that budget (≤ 1×). It holds because ``import
quiesce`` loads the sync core alone; the logs, the runtime, the drivers, the
adapters and the integrations load on first use (``quiesce._LAZY``).

Cost: ``2 × runs + 1`` interpreter starts, about 0.1 s each.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from typing import Any

__all__ = ["BUDGET_MS", "SECTION", "measure"]

SECTION = "import"

#: the goal's budget for ``import quiesce`` (issue 24)
BUDGET_MS = 150.0


def _importtime_us(stderr: str, module: str = "quiesce") -> int:
    """The cumulative microseconds of ``module``'s own line in ``-X importtime``
    output (the last line naming exactly it)."""
    for line in reversed(stderr.splitlines()):
        parts = line.split("|")
        if len(parts) == 3 and parts[2].strip() == module:
            return int(parts[1])
    raise ValueError(f"no -X importtime line for {module!r}")


#: the child's clock for each of the suite's timers
_CLOCKS = {"cpu": "process_time_ns", "wall": "perf_counter_ns"}


def measure(runs: int = 7, *, timer: str = "cpu") -> dict[str, Any]:
    """``runs`` interleaved fresh-interpreter measurements (see the module
    docstring): ``import_ms`` (the statement, on ``timer``'s clock) and
    ``importtime_ms`` (``-X importtime``), one per run."""
    clock = _CLOCKS[timer]
    timed = f"import time; t = time.{clock}(); import quiesce; print(time.{clock}() - t)"
    subprocess.run([sys.executable, "-c", "import quiesce"], check=True)  # warm the .pyc
    import_ms: list[float] = []
    importtime: list[float] = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", timed], check=True, capture_output=True, text=True
        )
        import_ms.append(int(out.stdout) / 1e6)
        out = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", "import quiesce"],
            check=True,
            capture_output=True,
            text=True,
        )
        importtime.append(_importtime_us(out.stderr) / 1000)
    return {"timer": timer, "import_ms": import_ms, "importtime_ms": importtime}


def _register() -> None:
    from .lib import Config, Goal, SectionResult, section

    @section(SECTION)
    def bench_import(cfg: Config) -> SectionResult:
        """``import quiesce`` in a fresh interpreter against its 150 ms
        budget (issue 24)."""
        res = SectionResult(SECTION)
        figures = measure(3 if cfg.quick else 9, timer=cfg.timer)
        res.extra["figures"] = figures
        times = figures["import_ms"]
        median = statistics.median(times)
        res.goals.append(
            Goal(
                "import_quiesce",
                f"import quiesce / {BUDGET_MS:g} ms budget ({cfg.timer} time)",
                median / BUDGET_MS,
                1.0,
                "<=",
                spread=(min(times) / BUDGET_MS, max(times) / BUDGET_MS),
                note=f"{median:.0f} ms",
            )
        )
        res.notes.append(
            f"import quiesce: {median:.1f} ms {cfg.timer} time (median of {len(times)} fresh "
            f"interpreters, {min(times):.1f}..{max(times):.1f}); -X importtime (wall) "
            f"{statistics.median(figures['importtime_ms']):.1f} ms"
        )
        return res


_register()
