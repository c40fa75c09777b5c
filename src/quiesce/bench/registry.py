"""The registry of ``quiesce bench``: which sections run, in what order, and
which figures each one draws.

What it keeps true:

* :data:`SECTIONS` maps a section's name to its function
  ``(Config) -> SectionResult``, in run order (registration order); a name
  is registered once (:func:`section` raises ``ValueError`` for a second).
* :data:`PLOTS` lists the drawing functions, in drawing order, each with the
  figure files it may write; a figure file belongs to one plot
  (:func:`plot` raises ``ValueError`` for a second).
* A section lives in one module that registers both: its measurement with
  ``@section("name")`` and its figures with ``@plot("name.png", ...)``. The
  report (:mod:`.report`) draws every registered plot over the whole results,
  so a new section touches only its own file and, to be run by ``quiesce
  bench``, one line of :data:`SECTION_MODULES`.

Nothing here measures or imports matplotlib: registering is a dict insert,
O(1); :func:`load_section_modules` imports each listed module once.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .harness import Config, SectionResult

__all__ = [
    "PLOTS",
    "SECTIONS",
    "SECTION_MODULES",
    "Plot",
    "PlotFn",
    "SectionFn",
    "load_section_modules",
    "plot",
    "save_figure",
    "section",
]

SectionFn = Callable[[Config], SectionResult]

#: ``draw(plt, results, out, stamp)``: matplotlib's pyplot, the JSON-ready
#: results of the whole run, the output folder and the run's one-line stamp;
#: returns the paths of the figures it wrote (none when its section did not
#: run or has nothing to draw).
PlotFn = Callable[[Any, dict[str, Any], Path, str], list[Path]]

#: name → section function, in run order. Add one with :func:`section`.
SECTIONS: dict[str, SectionFn] = {}


@dataclass(frozen=True)
class Plot:
    """A registered drawing function and the figure files it may write."""

    figures: tuple[str, ...]
    draw: PlotFn


#: the drawing functions, in drawing order. Add one with :func:`plot`.
PLOTS: list[Plot] = []


#: modules that register more sections when imported; a listed module that
#: does not exist is skipped, so a section can be planned before it is written.
#: (The core sections, :mod:`.core`, are registered first, by :mod:`.report`.)
SECTION_MODULES: list[str] = [
    "quiesce.bench.agent",
    "quiesce.bench.durability",
    "quiesce.bench.shared",
    "quiesce.bench.long_life",
    "quiesce.bench.sync_render",
    "quiesce.bench.otel",
    "quiesce.bench.startup",
    "quiesce.bench.frameworks",
    "quiesce.bench.streaming",
]


def load_section_modules() -> list[str]:
    """Import :data:`SECTION_MODULES` (each once); return those imported."""
    loaded = []
    for mod in SECTION_MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name != mod:  # the module exists but one of its imports is missing
                raise
            continue
        loaded.append(mod)
    return loaded


def section(name: str) -> Callable[[SectionFn], SectionFn]:
    """Register a benchmark section under ``name`` (later names run later)."""

    def register(fn: SectionFn) -> SectionFn:
        if name in SECTIONS:
            raise ValueError(f"benchmark section {name!r} is already registered")
        SECTIONS[name] = fn
        return fn

    return register


def plot(*figures: str) -> Callable[[PlotFn], PlotFn]:
    """Register a drawing function that may write ``figures`` (file names in
    the output folder; later plots are drawn later)."""

    def register(fn: PlotFn) -> PlotFn:
        taken = {f for p in PLOTS for f in p.figures}
        again = [f for f in figures if f in taken]
        if again:
            raise ValueError(f"figure {again[0]!r} is already drawn by another plot")
        PLOTS.append(Plot(tuple(figures), fn))
        return fn

    return register


def save_figure(plt: Any, fig: Any, path: Path, dpi: int = 110) -> Path:
    """Lay ``fig`` out, write it to ``path`` (PNG at ``dpi``) and close it
    (pyplot keeps every open figure alive); returns ``path``. What every
    plot ends with."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
