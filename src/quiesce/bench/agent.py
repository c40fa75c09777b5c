"""The agent-loop benchmark: quiesce against lock- and copy-based baselines.

Runs as ``python benchmarks/agent_loop.py [--quick] [--json PATH]`` (a table,
and :func:`main` returns a JSON-ready dict) and as the ``agent_loop`` section
of ``quiesce bench`` (its goals join the suite's table and JSON). It lives in
the package because ``benchmarks/`` is not installed.

The load is an agent loop over one context buffer:

* ``readers`` coroutines (100 by default) each, round after round, pin a
  snapshot and hold it across a simulated model call (``anyio.sleep`` of a
  few milliseconds), then let it go;
* ``tool_callers`` coroutines append entries (tool outputs);
* a marker marks recent entries stale;
* a pruner, every few milliseconds, prunes what the marker marked.

The same load runs on:

* **quiesce** (``open_buffer``) on asyncio and on trio: pins are O(1) and never
  wait, marks are the sync fast path, removals wait for their grace point;
* **aiorwlock** ``RWLock`` + dict (asyncio only): readers hold the reader lock
  across the model call; appends, marks and prunes take the writer lock;
* **asyncio.Lock** + dict (asyncio only): one lock for everybody (readers
  serialize);
* **dict-copy** snapshots: a reader copies the dict (O(n)) and reads the copy;
  writers change the dict in place;
* **global quiescence**: like quiesce, but a staged removal is applied only
  when *zero* readers are pinned (the "quiescent barrier" read literally).

Method. Each op's own latency is measured with ``time.perf_counter_ns``
around the call — lock waits included for the baselines; pin = from asking
for the snapshot (or the reader lock) to holding it. The deferred backlog is
sampled every ``sample_every`` seconds. Each configuration runs ``repeats``
times after a warm-up; latency percentiles are over all repetitions' samples
(nearest rank). Repetitions are interleaved (each runs every configuration
once) and wall-time ratios compare the minimum over repetitions, the figure
least disturbed by other load on the machine. For quiesce, every scheduler batch
also records how many scheduler wake-ups passed between the unpin that made
it due and its application (``buf.wakeups``).

Absolute numbers drift on shared machines; the goals are ratios measured in
one run.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import platform
import random
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio

from quiesce import Entry, Kind

from .agent_impls import IMPLS
from .lib import Config as BenchConfig
from .lib import Goal, SectionResult, plot, save_figure, section

OPS = ("pin", "mark", "append", "prune")


@dataclass(frozen=True)
class LoadConfig:
    readers: int = 100
    rounds: int = 30  #: model calls per reader
    model_min: float = 0.001  #: seconds
    model_max: float = 0.004
    tool_callers: int = 4
    appends: int = 100  #: per tool caller
    tool_gap: float = 0.001
    marks: int = 300
    mark_gap: float = 0.0005
    prune_every: float = 0.005
    initial_entries: int = 1000
    sample_every: float = 0.005
    repeats: int = 3
    lock_repeats: int = 1  #: asyncio.Lock serializes every reader: run it once
    seed: int = 1


QUICK = LoadConfig(
    readers=100,
    rounds=3,
    appends=10,
    marks=30,
    initial_entries=300,
    repeats=2,
    lock_repeats=1,
)


# ---------------------------------------------------------------------------
# the driver


@dataclass
class RunResult:
    wall_s: float
    latencies_ns: dict[str, list[int]]
    backlog: list[tuple[float, int]]
    extra: dict[str, Any] = field(default_factory=dict)
    #: seconds from the start until the last reader left (readers overlap before)
    readers_done_s: float | None = None


def _caller(fn: Callable[..., Any]) -> Callable[..., Any]:
    """An awaitable call of ``fn`` whether it is sync or async, measured."""
    if inspect.iscoroutinefunction(fn):

        async def timed_async(lat: list[int], *args: Any) -> Any:
            t0 = time.perf_counter_ns()
            out = await fn(*args)
            lat.append(time.perf_counter_ns() - t0)
            return out

        return timed_async

    async def timed_sync(lat: list[int], *args: Any) -> Any:
        t0 = time.perf_counter_ns()
        out = fn(*args)
        lat.append(time.perf_counter_ns() - t0)
        return out

    return timed_sync


async def run_load(impl: Any, cfg: LoadConfig, seed: int) -> RunResult:
    rng = random.Random(seed)
    initial = [
        Entry(f"init{i}", Kind.REASONING, f"initial reasoning step {i}")
        for i in range(cfg.initial_entries)
    ]
    lat: dict[str, list[int]] = {op: [] for op in OPS}
    backlog: list[tuple[float, int]] = []
    pin = _caller(impl.pin)
    append = _caller(impl.append)
    mark = _caller(impl.mark)
    prune = _caller(impl.prune)
    unpin = impl.unpin
    read = impl.read
    appended: deque[str] = deque()
    to_prune: list[str] = []
    delays = [
        [rng.uniform(cfg.model_min, cfg.model_max) for _ in range(cfg.rounds)]
        for _ in range(cfg.readers)
    ]
    readers_left = [cfg.readers]
    readers_done: list[float] = []
    start = 0.0
    async with impl.running(initial):
        writers_done = anyio.Event()
        marker_done = anyio.Event()
        done = anyio.Event()

        async def reader(r: int) -> None:
            for d in delays[r]:
                token = await pin(lat["pin"])
                try:
                    await anyio.sleep(d)  # the model call, snapshot held
                    read(token)
                finally:
                    unpin(token)
                await anyio.lowlevel.checkpoint()
            readers_left[0] -= 1
            if not readers_left[0]:
                readers_done.append(time.perf_counter() - start)

        async def tool_caller(c: int) -> None:
            for i in range(cfg.appends):
                eid = f"tool{c}-{i}"
                await append(lat["append"], Entry(eid, Kind.TOOL_OUTPUT, f"output {c} {i}"))
                appended.append(eid)
                await anyio.sleep(cfg.tool_gap)

        async def marker() -> None:
            count = 0
            while count < cfg.marks:
                if appended:
                    eid = appended.popleft()
                    await mark(lat["mark"], eid)
                    to_prune.append(eid)
                    count += 1
                elif writers_done.is_set():
                    break
                await anyio.sleep(cfg.mark_gap)
            marker_done.set()

        async def pruner() -> None:
            while True:
                if to_prune:
                    ids = to_prune[:]
                    to_prune.clear()
                    await prune(lat["prune"], ids)
                elif marker_done.is_set():
                    return
                await anyio.sleep(cfg.prune_every)

        async def sampler(start: float) -> None:
            while not done.is_set():
                backlog.append((time.perf_counter() - start, impl.backlog()))
                with anyio.move_on_after(cfg.sample_every):
                    await done.wait()
            backlog.append((time.perf_counter() - start, impl.backlog()))

        gc.collect()
        start = time.perf_counter()
        async with anyio.create_task_group() as outer:
            outer.start_soon(sampler, start)
            async with anyio.create_task_group() as tg:
                for r in range(cfg.readers):
                    tg.start_soon(reader, r)

                async def writers() -> None:
                    async with anyio.create_task_group() as w:
                        for c in range(cfg.tool_callers):
                            w.start_soon(tool_caller, c)
                    writers_done.set()

                tg.start_soon(writers)
                tg.start_soon(marker)
                tg.start_soon(pruner)
            wall = time.perf_counter() - start
            done.set()
        extra = impl.extra()
        extra["backlog_after_load"] = impl.backlog()
    return RunResult(wall, lat, backlog, extra, readers_done[0] if readers_done else None)


# ---------------------------------------------------------------------------
# statistics and report


def pct(values: Sequence[int], q: float) -> float | None:
    """Nearest-rank percentile, in microseconds."""
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))] / 1000.0


def summarize(name: str, backend: str, runs: list[RunResult]) -> dict[str, Any]:
    walls = [r.wall_s for r in runs]
    out: dict[str, Any] = {
        "impl": name,
        "backend": backend,
        "repeats": len(runs),
        "wall_s": {"min": min(walls), "median": statistics.median(walls), "max": max(walls)},
        "latency_us": {},
    }
    for op in OPS:
        values = [v for r in runs for v in r.latencies_ns[op]]
        out["latency_us"][op] = {
            "n": len(values),
            "p50": pct(values, 0.50),
            "p99": pct(values, 0.99),
            "max": pct(values, 1.0),
        }
    shown = runs[len(runs) // 2]
    series = shown.backlog
    step = max(1, len(series) // 200)
    out["backlog"] = {
        "max": max((b for r in runs for _, b in r.backlog), default=0),
        "max_per_run": [max((b for _, b in r.backlog), default=0) for r in runs],
        "final": series[-1][1] if series else 0,
        "after_load": [r.extra.get("backlog_after_load", 0) for r in runs],
        # one run's samples (the middle repetition), seconds from its start
        "series": [(round(t, 4), b) for t, b in series[::step]],
        "series_readers_done_s": shown.readers_done_s,
    }
    extras = [r.extra for r in runs if r.extra]
    if extras and "wakeups_to_apply_max" in extras[0]:
        out["quiesce"] = {
            "wakeups_to_apply_max": max(
                (
                    e["wakeups_to_apply_max"]
                    for e in extras
                    if e["wakeups_to_apply_max"] is not None
                ),
                default=None,
            ),
            "wakeups_to_apply_hist": extras[0]["wakeups_to_apply_hist"],
            "batches": [e["batches"] for e in extras],
            "wakeups": [e["wakeups"] for e in extras],
            "reclamation_latency_max_s": max(
                (e["reclamation_latency_max_s"] or 0.0 for e in extras), default=None
            ),
        }
    return out


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def goals(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    q = rows["quiesce/asyncio"]
    qt = rows.get("quiesce/trio")
    rw = rows.get("aiorwlock/asyncio")
    out: dict[str, Any] = {}
    if rw is not None:
        for op in ("mark", "pin", "append"):
            r = ratio(q["latency_us"][op]["p99"], rw["latency_us"][op]["p99"])
            out[f"p99_{op}_quiesce_over_aiorwlock"] = {
                "ratio": r,
                "goal": "<= 0.01" if op != "append" else "(reported)",
                "met": None if op == "append" else (r is not None and r <= 0.01),
            }
        r = ratio(q["wall_s"]["min"], rw["wall_s"]["min"])
        out["wall_quiesce_over_aiorwlock"] = {
            "ratio": r,
            "goal": "<= 1.0",
            "met": r is not None and r <= 1.0,
        }
    if qt is not None:
        r = ratio(qt["wall_s"]["min"], q["wall_s"]["min"])
        out["wall_trio_over_asyncio"] = {
            "ratio": r,
            "goal": "<= 1.5",
            "met": r is not None and r <= 1.5,
        }
        for op in ("mark", "pin", "append"):
            out[f"p50_{op}_trio_over_asyncio"] = {
                "ratio": ratio(qt["latency_us"][op]["p50"], q["latency_us"][op]["p50"]),
                "goal": "(reported)",
                "met": None,
            }
    worst = max(
        (
            row["quiesce"]["wakeups_to_apply_max"]
            for row in (q, qt)
            if row is not None and row["quiesce"]["wakeups_to_apply_max"] is not None
        ),
        default=None,
    )
    out["wakeups_from_last_blocking_unpin_to_apply_max"] = {
        "value": worst,
        "goal": "<= 2",
        "met": worst is not None and worst <= 2,
    }
    gq = rows.get("global-quiescence/asyncio")
    if gq is not None:
        out["backlog_max_quiesce_vs_global_quiescence"] = {
            "quiesce": q["backlog"]["max"],
            "global_quiescence": gq["backlog"]["max"],
            "goal": "quiesce bounded, global quiescence grows",
            "met": q["backlog"]["max"] < gq["backlog"]["max"],
        }
    return out


def _fmt(v: float | None, digits: int = 1) -> str:
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def print_table(result: dict[str, Any], file: Any = None) -> None:
    file = sys.stdout if file is None else file
    head = (
        f"{'impl/backend':<28}{'wall min':>9}{'median':>8}"
        + "".join(f"{op + ' p50':>12}{op + ' p99':>12}" for op in ("pin", "mark", "append"))
        + f"{'prune p99':>12}{'backlog max':>13}{'final':>7}"
    )
    print(
        "latencies in microseconds (perf_counter_ns around each call, lock waits included)",
        file=file,
    )
    print(head, file=file)
    print("-" * len(head), file=file)
    for key, row in result["results"].items():
        lat = row["latency_us"]
        line = f"{key:<28}{_fmt(row['wall_s']['min'], 3):>9}{_fmt(row['wall_s']['median'], 3):>8}"
        for op in ("pin", "mark", "append"):
            line += f"{_fmt(lat[op]['p50']):>12}{_fmt(lat[op]['p99']):>12}"
        line += f"{_fmt(lat['prune']['p99']):>12}{row['backlog']['max']:>13}"
        line += f"{row['backlog']['final']:>7}"
        print(line, file=file)
    print(file=file)
    print("goals (measured ratios):", file=file)
    for name, g in result["goals"].items():
        value = g.get("ratio", g.get("value"))
        shown = _fmt(value, 4) if isinstance(value, float) else str(value)
        if "quiesce" in g and "global_quiescence" in g:
            shown = f"{g['quiesce']} vs {g['global_quiescence']}"
        met = {True: "met", False: "NOT MET", None: ""}[g["met"]]
        print(f"  {name:<52}{shown:>16}  goal {g['goal']:<44}{met}", file=file)


# ---------------------------------------------------------------------------


def run_all(names: Sequence[str], cfg: LoadConfig) -> dict[str, dict[str, Any]]:
    """Warm up (a small load on each configuration), then run the
    repetitions interleaved (each repetition runs every configuration once),
    so that the machine's drift hits all of them alike."""
    plan = [(name, backend) for name in names for backend in IMPLS[name]().backends]
    warm = LoadConfig(**{**asdict(cfg), "readers": 10, "rounds": 1, "appends": 3, "marks": 5})
    for name, backend in plan:
        anyio.run(run_load, IMPLS[name](), warm, cfg.seed, backend=backend)
    runs: dict[tuple[str, str], list[RunResult]] = {key: [] for key in plan}
    for rep in range(max(cfg.repeats, cfg.lock_repeats)):
        for name, backend in plan:
            repeats = cfg.lock_repeats if name == "asyncio.Lock" else cfg.repeats
            if rep < repeats:
                impl = IMPLS[name]()
                result = anyio.run(run_load, impl, cfg, cfg.seed + rep, backend=backend)
                runs[name, backend].append(result)
    return {f"{n}/{b}": summarize(n, b, r) for (n, b), r in runs.items()}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small load (a few seconds)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--repeats", type=int, help="repetitions per configuration")
    parser.add_argument(
        "--only", action="append", choices=sorted(IMPLS), help="run only these implementations"
    )
    args = parser.parse_args(list(argv) if argv is not None else None)
    cfg = QUICK if args.quick else LoadConfig()
    if args.repeats is not None:
        cfg = LoadConfig(**{**asdict(cfg), "repeats": args.repeats})
    names = args.only or list(IMPLS)
    if "quiesce" not in names:
        names.insert(0, "quiesce")
    t0 = time.perf_counter()
    rows = run_all(names, cfg)
    result: dict[str, Any] = {
        "benchmark": "agent_loop",
        "config": asdict(cfg),
        "machine": {
            "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "platform": platform.platform(),
        },
        "results": rows,
        "goals": goals(rows),
        "total_s": time.perf_counter() - t0,
    }
    print_table(result)
    print(f"\ntotal {result['total_s']:.1f} s", file=sys.stdout)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return result


# ---------------------------------------------------------------------------
# the ``agent_loop`` section of ``quiesce bench``


def _available(name: str) -> bool:
    if name != "aiorwlock":
        return True
    try:
        import aiorwlock  # noqa: F401
    except ImportError:
        return False
    return True


_GOAL_TEXT = {
    "p99_mark_quiesce_over_aiorwlock": ("agent loop: p99 mark_stale, quiesce / aiorwlock", 0.01),
    "p99_pin_quiesce_over_aiorwlock": ("agent loop: p99 pin, quiesce / aiorwlock", 0.01),
    "wall_quiesce_over_aiorwlock": ("agent loop: wall time, quiesce / aiorwlock", 1.0),
    "wall_trio_over_asyncio": ("agent loop: wall time, quiesce on trio / on asyncio", 1.5),
    "wakeups_from_last_blocking_unpin_to_apply_max": (
        "agent loop: scheduler wake-ups from last blocking unpin to removal",
        2.0,
    ),
}


@section("agent_loop")
def bench_agent_loop(cfg: BenchConfig) -> SectionResult:
    """The agent loop as a ``quiesce bench`` section: its goals and the whole
    result (``extra``). Wall-clock timed by nature (sleeps are the load), GC on."""
    load = QUICK if cfg.quick else LoadConfig()
    names = [n for n in IMPLS if _available(n)]
    rows = run_all(names, load)
    measured = goals(rows)
    res = SectionResult("agent_loop")
    for key, (text, limit) in _GOAL_TEXT.items():
        g = measured.get(key)
        value = None if g is None else g.get("ratio", g.get("value"))
        res.goals.append(
            Goal(
                f"agent_{key}",
                text,
                None if value is None else float(value),
                limit,
                "<=",
                note="" if _available("aiorwlock") else "aiorwlock is not installed",
            )
        )
    res.extra = {"config": asdict(load), "results": rows, "goals": measured}
    res.notes.append(
        "agent loop: 100 readers hold snapshots across simulated model calls; "
        "per-op latency with perf_counter_ns, lock waits included; GC on"
    )
    backlog = ", ".join(
        f"{key} {row['backlog']['max']}"
        for key, row in rows.items()
        if row["impl"] in ("quiesce", "global-quiescence")
    )
    res.notes.append(f"agent loop: deferred backlog, max over all runs: {backlog}")
    return res


# -- figures ------------------------------------------------------------------


#: colours of the agent-loop implementations; trio bars are hatched
_AGENT_COLOR = {
    "quiesce": "tab:blue",
    "aiorwlock": "tab:orange",
    "asyncio.Lock": "tab:purple",
    "dict-copy": "tab:red",
    "global-quiescence": "tab:brown",
}
_AGENT_OPS = ("pin", "mark", "append", "prune")


@plot("agent_loop_backlog.png")
def _plot_agent_backlog(plt: Any, results: dict[str, Any], out: Path, stamp: str) -> list[Path]:
    """``agent_loop_backlog.png``: the deferred backlog (removals accepted,
    not yet applied) over one run, quiesce vs the global-quiescence barrier,
    one panel per backend."""
    agent = results["sections"].get("agent_loop")
    if agent is None or "results" not in agent["extra"]:
        return []
    rows = agent["extra"]["results"]
    backends = [
        b for b in ("asyncio", "trio") if f"quiesce/{b}" in rows or f"global-quiescence/{b}" in rows
    ]
    if not backends:
        return []
    fig, axes = plt.subplots(1, len(backends), figsize=(5.8 * len(backends), 4.2), squeeze=False)
    top = max(
        (b for row in rows.values() for _, b in row["backlog"]["series"]),
        default=0,
    )
    for ax, backend in zip(axes.flat, backends, strict=True):
        done: list[float] = []
        for impl, style in (
            ("global-quiescence", {"linewidth": 1.6}),
            ("quiesce", {"linewidth": 2.2}),
        ):
            row = rows.get(f"{impl}/{backend}")
            if row is None:
                continue
            series = row["backlog"]["series"]
            ts = [1e3 * t for t, _ in series]
            label = (
                f"{impl} (max {row['backlog']['max']} over {row['repeats']} runs)"
                if impl == "quiesce"
                else f"{impl} barrier (max {row['backlog']['max']} over {row['repeats']} runs)"
            )
            ax.step(
                ts,
                [b for _, b in series],
                where="post",
                color=_AGENT_COLOR[impl],
                label=label,
                **style,
            )
            if row["backlog"].get("series_readers_done_s") is not None:
                done.append(1e3 * row["backlog"]["series_readers_done_s"])
        if done:
            readers = agent["extra"]["config"]["readers"]
            ax.axvspan(
                0, max(done), color="0.85", alpha=0.5, zorder=0, label=f"{readers} readers overlap"
            )
        ax.set_title(f"{backend}")
        ax.set_xlabel("ms since the load started (one run)")
        ax.set_ylabel("deferred backlog (removals waiting)")
        ax.set_ylim(0, max(1.0, 1.15 * top))  # the same scale in every panel
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="upper right")
    fig.suptitle(
        "agent loop: deferred backlog over time — quiesce (per-entry grace points) vs a "
        f"global-quiescence barrier\n{stamp}",
        fontsize=10,
    )
    return [save_figure(plt, fig, out / "agent_loop_backlog.png")]


@plot("agent_loop_latency.png")
def _plot_agent_latency(plt: Any, results: dict[str, Any], out: Path, stamp: str) -> list[Path]:
    """``agent_loop_latency.png``: p99 latency per operation and
    implementation (bars, log scale; p50 as ticks), with the 1/100-of-aiorwlock
    goal drawn; and wall time per implementation."""
    agent = results["sections"].get("agent_loop")
    if agent is None or "results" not in agent["extra"]:
        return []
    rows: dict[str, Any] = agent["extra"]["results"]
    keys = list(rows)
    fig, (ax, ax_wall) = plt.subplots(
        1, 2, figsize=(13, 5.6), gridspec_kw={"width_ratios": [2.6, 1]}
    )
    width = 0.8 / len(keys)
    for i, key in enumerate(keys):
        row = rows[key]
        xs, p99s, p50s = [], [], []
        for j, op in enumerate(_AGENT_OPS):
            lat = row["latency_us"][op]
            if lat["p99"] is None:
                continue
            xs.append(j - 0.4 + width * (i + 0.5))
            p99s.append(max(lat["p99"], 1e-3))
            p50s.append(max(lat["p50"], 1e-3))
        hatch = "//" if row["backend"] == "trio" else None
        color = _AGENT_COLOR.get(row["impl"], "tab:gray")
        ax.bar(xs, p99s, width, color=color, hatch=hatch, edgecolor="white", label=key)
        ax.scatter(xs, p50s, marker="_", color="black", s=60, zorder=3)
    rw = rows.get("aiorwlock/asyncio")
    if rw is not None:
        for j, op in enumerate(("pin", "mark")):
            goal = rw["latency_us"][op]["p99"] / 100
            ax.hlines(
                goal,
                j - 0.45,
                j + 0.45,
                colors="tab:orange",
                linestyles=":",
                label="goal: 1/100 of aiorwlock's p99" if j == 0 else None,
            )
    ax.scatter([], [], marker="_", color="black", s=60, label="p50")
    ax.set_xticks(range(len(_AGENT_OPS)), ["pin", "mark_stale", "append", "prune"])
    ax.set_yscale("log")
    ax.set_ylabel("p99 latency, µs (log; lock waits included)")
    ax.set_title("p99 latency per operation (bars), p50 (ticks)")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.09))
    walls = [rows[k]["wall_s"] for k in keys]
    ax_wall.barh(
        range(len(keys)),
        [w["min"] for w in walls],
        xerr=[[0] * len(keys), [w["max"] - w["min"] for w in walls]],
        color=[_AGENT_COLOR.get(rows[k]["impl"], "tab:gray") for k in keys],
        hatch=None,
        capsize=2,
    )
    for i, k in enumerate(keys):
        if rows[k]["backend"] == "trio":
            ax_wall.patches[i].set_hatch("//")
    ax_wall.set_yticks(range(len(keys)), keys, fontsize=8)
    ax_wall.invert_yaxis()
    ax_wall.set_xscale("log")
    ax_wall.set_xlabel("wall time, s (min over runs; whisker: to max)")
    ax_wall.set_title("wall time of the whole load")
    ax_wall.grid(True, axis="x", which="both", alpha=0.3)
    fig.suptitle(f"agent loop: quiesce vs lock- and copy-based baselines — {stamp}", fontsize=10)
    return [save_figure(plt, fig, out / "agent_loop_latency.png")]


if __name__ == "__main__":
    main()
