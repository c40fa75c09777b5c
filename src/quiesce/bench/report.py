"""Running the registered sections and reporting them: the results dict, the
table, ``results.json`` and the figures.

What it keeps true: :func:`run_suite` runs the sections in registration
order (the core sections first: importing this module registers them) and
returns JSON-ready results whose shape is the committed results format
(``suite``, ``quick``, ``config``, ``machine``, ``method``, ``sections``,
``goals``, ``seconds``); :func:`write_plots` draws every plot of
:data:`~.registry.PLOTS`, in order, over those results; matplotlib is
imported only to draw, so a missing one costs the figures, not the numbers.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from quiesce import __version__

from . import core as _core_sections  # noqa: F401  (registers the core sections first)
from . import memory as _memory_section  # noqa: F401  (the last core section)
from .harness import Config, SectionResult
from .registry import PLOTS, SECTIONS, load_section_modules, plot, save_figure

__all__ = [
    "RESULTS_FILE",
    "format_report",
    "iter_cases",
    "machine_info",
    "run_suite",
    "write_json",
    "write_plots",
]

RESULTS_FILE = "results.json"


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on."""
    try:
        affinity: int | None = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        affinity = None
    versions: dict[str, str | None] = {"quiesce": __version__}
    for dist in ("immutables", "aiorwlock", "anyio", "trio", "matplotlib"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "cpus_usable": affinity,
        "versions": versions,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def run_suite(
    cfg: Config,
    only: Sequence[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the registered sections (all, or ``only`` those) and return the
    JSON-ready results."""
    load_section_modules()
    names = list(SECTIONS) if not only else list(only)
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        raise ValueError(
            f"unknown benchmark sections: {', '.join(unknown)} (have {', '.join(SECTIONS)})"
        )
    t0 = time.perf_counter()
    sections: dict[str, SectionResult] = {}
    for name in names:
        if progress is not None:
            progress(name)
        s0 = time.perf_counter()
        result = SECTIONS[name](cfg)
        result.seconds = time.perf_counter() - s0
        sections[name] = result
    goals = [g for s in sections.values() for g in s.goals]
    return {
        "suite": "quiesce bench",
        "quick": cfg.quick,
        "config": asdict(cfg),
        "machine": machine_info(),
        "method": (
            "per case: calibration and warm-up, then repeat x number operations, "
            + (
                "timed with process_time_ns (CPU time of this process); "
                if cfg.timer == "cpu"
                else "timed with perf_counter_ns (wall time); "
            )
            + "ns/op min/median/max over repetitions; "
            "cases of one section timed round-robin; goal ratios are medians of "
            "per-repetition ratios (min..max in 'spread'; 'of mins' is the ratio of "
            "the fastest repetitions); "
            + ("gc enabled" if cfg.gc else "gc disabled while timing, as timeit does")
        ),
        "sections": {name: s.to_dict() for name, s in sections.items()},
        "goals": [g.to_dict() for g in goals],
        "seconds": round(time.perf_counter() - t0, 3),
    }


def _fmt_ns(ns: float | None) -> str:
    if ns is None:
        return "-"
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e4:
        return f"{ns / 1e3:.1f} µs"
    return f"{ns:,.0f} ns"


def _fmt_ratio(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.3g}×" if x < 100 else f"{x:,.0f}×"


def format_report(results: dict[str, Any], *, cases: bool = True) -> str:
    """The human-readable table: machine, cases per section, goals."""
    m = results["machine"]
    lines = [
        f"quiesce {m['versions']['quiesce']} bench{' (quick)' if results['quick'] else ''}: "
        f"{m['implementation']} {m['python']} on {m['platform']}, "
        f"{m['cpu_count']} cores ({m['cpus_usable']} usable), {m['date_utc']}",
        f"method: {results['method']}",
        "",
    ]
    if cases:
        for name, sec in results["sections"].items():
            rows = [c for c in sec["cases"] if c["median"] is not None]
            if not rows:
                continue
            lines.append(f"[{name}]  ({sec['seconds']:.1f} s)")
            lines.append(f"  {'case':52s} {'min':>10s} {'median':>10s} {'max':>10s}")
            for c in rows:
                extra = "".join(f" {k}={v}" for k, v in c["param"].items())
                n = "" if c["n"] is None else f" n={c['n']:,}"
                label = f"{c['impl']} {c['op']}{n}{extra}"
                lines.append(
                    f"  {label:52s} {_fmt_ns(c['min']):>10s} {_fmt_ns(c['median']):>10s} "
                    f"{_fmt_ns(c['max']):>10s}"
                )
            for note in sec["notes"]:
                lines.append(f"  note: {note}")
            lines.append("")
    lines.append(
        f"  {'goal':52s} {'measured':>10s} {'spread':>17s} {'of mins':>8s} {'target':>9s}  status"
    )
    for g in results["goals"]:
        spread = (
            ""
            if g["spread"] is None
            else (f"{_fmt_ratio(g['spread'][0])}..{_fmt_ratio(g['spread'][1])}")
        )
        target = f"{g['op']} {_fmt_ratio(g['limit'])}"
        note = f"  ({g['note']})" if g["note"] else ""
        lines.append(
            f"  {g['text']:52s} {_fmt_ratio(g['value']):>10s} {spread:>17s} "
            f"{_fmt_ratio(g.get('of_mins')):>8s} {target:>9s}  "
            f"{g['status']}{note}"
        )
    passed = sum(g["status"] == "PASS" for g in results["goals"])
    lines.append(f"  {passed}/{len(results['goals'])} goals met; {results['seconds']:.1f} s in all")
    return "\n".join(lines)


def iter_cases(results: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every case summary of a results dict."""
    for sec in results["sections"].values():
        yield from sec["cases"]


def write_json(results: dict[str, Any], out: Path) -> Path:
    """Write ``results`` to ``out/results.json``; return its path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / RESULTS_FILE
    path.write_text(json.dumps(results, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    return path


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, imported on first use."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def write_plots(results: dict[str, Any], out: Path) -> list[Path]:
    """Draw every registered plot into ``out`` and return the figures
    written, in drawing order; raises ``ImportError`` without matplotlib."""
    plt = _pyplot()
    out.mkdir(parents=True, exist_ok=True)
    machine = results["machine"]
    stamp = (
        f"{machine['implementation']} {machine['python']}, {machine['cpu_count']} cores, "
        f"{machine['date_utc']}{' (quick)' if results['quick'] else ''}"
    )
    written: list[Path] = []
    for registered in list(PLOTS):
        written += registered.draw(plt, results, out, stamp)
    return written


@plot("goals.png")
def _plot_goals(plt: Any, results: dict[str, Any], out: Path, stamp: str) -> list[Path]:
    """``goals.png``: every goal of the run, measured / target (below 1 is
    met), on a log axis."""
    written: list[Path] = []
    goals = [g for g in results["goals"] if g["value"] is not None]
    if goals:
        fig, ax = plt.subplots(figsize=(11, 0.5 * len(goals) + 1.6))
        scores = [
            g["value"] / g["limit"] if g["op"] == "<=" else g["limit"] / g["value"] for g in goals
        ]
        colors = ["tab:green" if g["status"] == "PASS" else "tab:red" for g in goals]
        labels = [f"{g['text']}  ({g['value']:.3g} {g['op']} {g['limit']:g})" for g in goals]
        ax.barh(range(len(goals)), scores, color=colors)
        ax.axvline(1.0, color="black", linewidth=1)
        ax.set_yticks(range(len(goals)), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("measured / target (≤ 1: goal met)")
        ax.set_title(f"quiesce bench goals\n{stamp}", fontsize=10)
        written.append(save_figure(plt, fig, out / "goals.png"))

    return written
