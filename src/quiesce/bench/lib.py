"""The names a section module of ``quiesce bench`` (and ``benchmarks/``)
imports, in one place.

What it keeps true: importing it registers the core sections (and their
figures) before any other, so :data:`SECTIONS` starts with them, in their
run order. It defines nothing of its own: the method is :mod:`.harness`, the
sections' and figures' registry :mod:`.registry`, running and reporting
:mod:`.report`, the core sections :mod:`.core` and :mod:`.memory`.

How to add a section: write ``quiesce/bench/NAME.py`` with a function
``(Config) -> SectionResult`` decorated ``@section("NAME")`` and, if it draws,
a function ``(plt, results, out, stamp) -> list[Path]`` decorated
``@plot("NAME.png")``; then list the module in
:data:`~.registry.SECTION_MODULES`. Nothing else changes: the command runs
it, the table and ``results.json`` carry its cases and goals, and
``write_plots`` draws its figures.
"""

from __future__ import annotations

from .core import CORE_SECTIONS
from .harness import (
    _FIXTURES,
    FULL,
    QUICK,
    TIMERS,
    Case,
    CaseResult,
    Config,
    Fixtures,
    Goal,
    SectionResult,
    _traced,
    measure,
    paired_ratio,
    ratio_goal,
)
from .registry import (
    PLOTS,
    SECTION_MODULES,
    SECTIONS,
    SectionFn,
    load_section_modules,
    plot,
    save_figure,
    section,
)
from .report import format_report, iter_cases, machine_info, run_suite

__all__ = [
    "CORE_SECTIONS",
    "FULL",
    "PLOTS",
    "QUICK",
    "SECTIONS",
    "SECTION_MODULES",
    "TIMERS",
    "_FIXTURES",
    "Case",
    "CaseResult",
    "Config",
    "Fixtures",
    "Goal",
    "SectionFn",
    "SectionResult",
    "_traced",
    "format_report",
    "iter_cases",
    "load_section_modules",
    "machine_info",
    "measure",
    "paired_ratio",
    "plot",
    "ratio_goal",
    "run_suite",
    "save_figure",
    "section",
]
