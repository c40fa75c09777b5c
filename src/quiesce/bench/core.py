"""The core sections of ``quiesce bench``: the sync core's operations
(``mark``, ``append``, ``pin``, ``iterate``, ``lookup``, ``prune``, ``edit``,
``memory``) against ``dict``, ``immutables.Map``, a dict copied per version,
``aiorwlock`` and ``asyncio.Lock``, and their two figures.

What it keeps true: every case goes through the public API on buffers
bulk-loaded by :func:`quiesce.testing.preloaded`; quiesce and its baselines
run the same loop shape (:mod:`.harness`), so loop overhead cancels in a
goal's ratio. The sections are registered in this order, which is the order
they run in; ``benchmarks/core_ops.py`` runs :data:`CORE_SECTIONS` alone.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from immutables import Map

from quiesce import Buffer, EditPlan, Entry, Rewrite, Snapshot

from .harness import (
    _FIXTURES,
    Case,
    Config,
    Fixtures,
    Goal,
    SectionResult,
    _aloop_asyncio_lock,
    _aloop_pin,
    _aloop_rwlock,
    _Cursor,
    _e,
    _loop_call1,
    _loop_call2,
    _loop_copy_del,
    _loop_copy_set,
    _loop_delitem,
    _loop_getitem,
    _loop_iter,
    _loop_mark,
    _loop_pin,
    _loop_prune,
    _loop_setitem,
    _prep,
    _result,
    _shuffled,
    measure,
    paired_ratio,
    ratio_goal,
)
from .registry import plot, save_figure, section

__all__ = ["CORE_SECTIONS", "STYLE"]

#: the sections that measure the sync core (``benchmarks/core_ops.py``)
CORE_SECTIONS = ("mark", "append", "pin", "iterate", "lookup", "prune", "edit", "memory")

#: line styles of the implementations in the plots
STYLE: dict[str, dict[str, Any]] = {
    "quiesce": {"color": "tab:blue", "marker": "o", "linewidth": 2.2},
    "immutables.Map": {"color": "tab:green", "marker": "s"},
    "dict": {"color": "tab:gray", "marker": "^"},
    "dict copy": {"color": "tab:red", "marker": "v"},
}


#: The fast paths' goals (issue 24, raised from issue 5's 3x and 0.2x):
#: ``mark_stale`` / ``immutables.Map.set`` and pin + unpin / an aiorwlock
#: reader's acquire + release.
MARK_VS_MAP_SET = 2.0
PIN_VS_RWLOCK = 0.12


# -- mark ---------------------------------------------------------------------


@section("mark")
def bench_mark(cfg: Config) -> SectionResult:
    """``mark_stale`` of an unmarked entry (half the buffer already marked)
    vs one ``immutables.Map.set`` and one ``dict`` store at the same size."""
    res = SectionResult("mark")
    cases: list[Case] = []
    for n in cfg.sizes:
        entries = _FIXTURES.entries(n)
        ids = _FIXTURES.ids(entries)
        half = n // 2
        unmarked = ids[half:]

        def setup_mark(
            entries: list[Entry] = entries, half: int = half, ids: list[str] = unmarked
        ) -> Any:
            return _Cursor(Fixtures.buffer(entries, marked=half), ids)

        cases.append(
            Case(
                _result("mark", "mark", "quiesce", n), setup_mark, _prep(_loop_mark), len(unmarked)
            )
        )
        cases += _map_set_case("mark", "mark", n, ids)
        cases += _dict_set_case("mark", "mark", n, ids)
    # For comparison, not a goal: the same at n_goal on a buffer with no marks
    # yet (a small marks map is cheaper to copy a path of).
    ng = cfg.n_goal
    fresh_entries = _FIXTURES.entries(ng)
    fresh_ids = _FIXTURES.ids(fresh_entries)

    def setup_fresh() -> Any:
        return _Cursor(Fixtures.buffer(fresh_entries), fresh_ids)

    cases.append(
        Case(
            _result("mark", "mark", "quiesce", ng, premarked=0),
            setup_fresh,
            _prep(_loop_mark),
            len(fresh_ids) // 2,
        )
    )
    measure(cases, cfg)
    res.cases = [c.result for c in cases]
    unmarked_ratio = paired_ratio(
        res.find("quiesce", "mark", ng, premarked=0), res.find("immutables.Map", "mark", ng)
    )[0]
    res.notes.append(
        f"mark: the goal's buffer has half its entries marked; with no marks yet, "
        f"mark_stale / Map.set at n={_e(ng)} is {unmarked_ratio:.3g}x"
    )
    res.goals.append(
        ratio_goal(
            "mark_vs_map_set",
            f"mark_stale / immutables.Map.set, n={_e(ng)}",
            next(c for c in res.cases if c.impl == "quiesce" and c.n == ng and not c.param),
            res.find("immutables.Map", "mark", ng),
            "<=",
            MARK_VS_MAP_SET,
        )
    )
    return res


def _map_set_case(sec: str, op: str, n: int, ids: list[str]) -> list[Case]:
    keys = _shuffled(ids)

    def setup() -> Any:
        return _Cursor(Map({i: i for i in ids}), keys)

    def prep(st: _Cursor, c: int) -> Callable[[], None]:
        args = st.take(c)
        fn = st.obj.set
        return lambda: _loop_call2(fn, args, "v")

    return [Case(_result(sec, op, "immutables.Map", n), setup, prep)]


def _dict_case(
    sec: str, op: str, n: int, ids: list[str], impl: str, loop: Callable[[Any, list[Any]], None]
) -> list[Case]:
    keys = _shuffled(ids)

    def setup() -> Any:
        return _Cursor(dict.fromkeys(ids), keys)

    return [Case(_result(sec, op, impl, n), setup, _prep(loop))]


def _dict_set_case(sec: str, op: str, n: int, ids: list[str]) -> list[Case]:
    return _dict_case(sec, op, n, ids, "dict", _loop_setitem)


def _dict_copy_set_case(sec: str, op: str, n: int, ids: list[str]) -> list[Case]:
    return _dict_case(sec, op, n, ids, "dict copy", _loop_copy_set)


# -- append -------------------------------------------------------------------


@section("append")
def bench_append(cfg: Config) -> SectionResult:
    """``append`` of a new entry vs publishing a version by copying a dict
    (``d.copy(); c[k] = v``), one ``Map.set`` and one ``dict`` store."""
    res = SectionResult("append")
    cases: list[Case] = []
    for n in cfg.sizes:
        entries = _FIXTURES.entries(n)
        ids = _FIXTURES.ids(entries)
        budget = n if n <= 100_000 else n // 10
        fresh = _FIXTURES.fresh(n, budget)

        def setup_append(entries: list[Entry] = entries, fresh: list[Entry] = fresh) -> Any:
            return _Cursor(Fixtures.buffer(entries), fresh)

        def prep_append(st: _Cursor, c: int) -> Callable[[], None]:
            args = st.take(c)
            fn = st.obj.append
            return lambda: _loop_call1(fn, args)

        cases.append(
            Case(_result("append", "append", "quiesce", n), setup_append, prep_append, budget)
        )
        cases += _dict_copy_set_case("append", "append", n, ids)
        cases += _map_set_case("append", "append", n, ids)
        cases += _dict_set_case("append", "append", n, ids)
    measure(cases, cfg)
    res.cases = [c.result for c in cases]
    ng, ns = cfg.n_goal, cfg.n_small
    res.goals.append(
        ratio_goal(
            "append_vs_dict_copy",
            f"dict copy per version / append, n={_e(ng)}",
            res.find("quiesce", "append", ng),
            res.find("dict copy", "append", ng),
            ">=",
            100.0,
        )
    )
    res.goals.append(
        ratio_goal(
            "append_scaling",
            f"append n={_e(ng)} / append n={_e(ns)}",
            res.find("quiesce", "append", ng),
            res.find("quiesce", "append", ns),
            "<=",
            2.5,
        )
    )
    return res


# -- pin ------------------------------------------------------------------------


def _pinned_buffer(n: int, readers: int) -> tuple[Buffer, list[Snapshot]]:
    """A buffer of ``max(n, readers)`` entries with ``readers`` snapshots
    pinned, each one mark apart (distinct versions)."""
    entries = _FIXTURES.entries(max(n, readers))
    buf = Fixtures.buffer(entries)
    snaps = []
    for e in entries[:readers]:
        s = buf.snapshot()
        s.__enter__()
        snaps.append(s)
        buf.mark_stale(e.id, "bench: one mark apart")
    return buf, snaps


@section("pin")
def bench_pin(cfg: Config) -> SectionResult:
    """``with buf.snapshot(): pass`` inside an asyncio task, vs an aiorwlock
    reader acquire + release in the same loop; by buffer size and by the
    number of readers already pinned."""
    res = SectionResult("pin")
    loop = asyncio.new_event_loop()
    cases: list[Case] = []
    # Each batch starts a task (asyncio) or a whole run (trio): batches big
    # enough that this fixed cost is noise.
    per_loop = 2_000 if cfg.quick else 10_000
    per_trio = 5_000 if cfg.quick else 50_000

    def in_loop(buf: Any, c: int) -> Callable[[], None]:
        return lambda: loop.run_until_complete(_aloop_pin(buf, c))

    try:
        for n in cfg.sizes:

            def setup_n(n: int = n) -> Any:
                return Fixtures.buffer(_FIXTURES.entries(n))

            cases.append(
                Case(
                    _result("pin", "pin", "quiesce", n, readers=0), setup_n, in_loop, None, per_loop
                )
            )
        reader_n = 10_000
        for r in cfg.readers:

            def setup_r(r: int = r) -> Any:
                return _pinned_buffer(reader_n, r)[0]

            cases.append(
                Case(
                    _result("pin", "pin", "quiesce", reader_n, readers=r),
                    setup_r,
                    in_loop,
                    None,
                    per_loop,
                )
            )
        try:
            import aiorwlock  # noqa: F401

            have_rw = True
        except ImportError:
            have_rw = False
            res.notes.append("aiorwlock is not installed: pip install 'quiesce[bench]'")
        if have_rw:
            cases.append(
                Case(
                    _result("pin", "reader acquire+release", "aiorwlock", None),
                    lambda: None,
                    lambda _s, c: lambda: loop.run_until_complete(_aloop_rwlock(c)),
                    None,
                    per_loop,
                )
            )
        cases.append(
            Case(
                _result("pin", "acquire+release", "asyncio.Lock", None),
                lambda: None,
                lambda _s, c: lambda: loop.run_until_complete(_aloop_asyncio_lock(c)),
                None,
                per_loop,
            )
        )
        n0 = cfg.n_small
        cases.append(
            Case(
                _result("pin", "pin", "quiesce (no event loop)", n0),
                lambda: Fixtures.buffer(_FIXTURES.entries(n0)),
                lambda buf, c: lambda: _loop_pin(buf, c),
            )
        )
        try:
            import trio

            def in_trio(buf: Any, c: int) -> Callable[[], None]:
                return lambda: trio.run(_aloop_pin, buf, c)

            cases.append(
                Case(
                    _result("pin", "pin", "quiesce (trio)", n0),
                    lambda: Fixtures.buffer(_FIXTURES.entries(n0)),
                    in_trio,
                    None,
                    per_trio,
                )
            )
        except ImportError:
            res.notes.append("trio is not installed: the trio pin case is skipped")
        measure(cases, cfg)
    finally:
        loop.close()
    res.cases = [c.result for c in cases]
    ng, ns = cfg.n_goal, cfg.n_small
    pin_ng = res.find("quiesce", "pin", ng, readers=0)
    if have_rw:
        res.goals.append(
            ratio_goal(
                "pin_vs_rwlock",
                f"pin+unpin / aiorwlock reader, n={_e(ng)}",
                pin_ng,
                res.find("aiorwlock", "reader acquire+release", None),
                "<=",
                PIN_VS_RWLOCK,
            )
        )
    else:
        res.goals.append(
            Goal(
                "pin_vs_rwlock",
                "pin+unpin / aiorwlock reader",
                None,
                PIN_VS_RWLOCK,
                "<=",
                note="no aiorwlock",
            )
        )
    res.goals.append(
        ratio_goal(
            "pin_scaling_n",
            f"pin n={_e(ng)} / pin n={_e(ns)}",
            pin_ng,
            res.find("quiesce", "pin", ns, readers=0),
            "<=",
            1.2,
        )
    )
    rmax, rmin = max(cfg.readers), min(cfg.readers)
    res.goals.append(
        ratio_goal(
            "pin_scaling_readers",
            f"pin with {rmax:,} / with {rmin:,} readers pinned",
            res.find("quiesce", "pin", reader_n, readers=rmax),
            res.find("quiesce", "pin", reader_n, readers=rmin),
            "<=",
            1.5,
        )
    )
    return res


# -- iterate --------------------------------------------------------------------


@section("iterate")
def bench_iterate(cfg: Config) -> SectionResult:
    """Iterating a pinned snapshot of 2,000 entries (order already cached by
    a first iteration) vs iterating a dict's values and a tuple."""
    res = SectionResult("iterate")
    size = 2_000
    entries = _FIXTURES.entries(size)

    def setup_snap() -> Any:
        buf = Fixtures.buffer(entries)
        snap = buf.snapshot()
        snap.__enter__()
        for _ in snap:  # the first iteration sorts and caches the window order
            pass
        return snap

    cases = [
        Case(
            _result("iterate", "iterate", "quiesce", size),
            setup_snap,
            lambda s, c: lambda: _loop_iter(s, c),
        ),
        Case(
            _result("iterate", "iterate", "dict", size),
            lambda: {e.id: e for e in entries}.values(),
            lambda d, c: lambda: _loop_iter(d, c),
        ),
        Case(
            _result("iterate", "iterate", "tuple", size),
            lambda: tuple(entries),
            lambda t, c: lambda: _loop_iter(t, c),
        ),
    ]
    measure(cases, cfg)
    res.cases = [c.result for c in cases]
    res.goals.append(
        ratio_goal(
            "iterate_vs_dict",
            f"iterate snapshot / iterate dict, {size:,} entries",
            res.find("quiesce", "iterate", size),
            res.find("dict", "iterate", size),
            "<=",
            1.5,
        )
    )
    res.notes.append("iterate: ns per full iteration of 2,000 entries")
    return res


# -- lookup ---------------------------------------------------------------------


@section("lookup")
def bench_lookup(cfg: Config) -> SectionResult:
    """``snap[id]`` in a pinned snapshot vs ``d[k]`` and ``Map[k]``, random keys."""
    res = SectionResult("lookup")
    cases: list[Case] = []
    for n in cfg.sizes:
        entries = _FIXTURES.entries(n)
        keys = _shuffled(_FIXTURES.ids(entries), seed=2)

        def setup_snap(entries: list[Entry] = entries, keys: list[str] = keys) -> Any:
            snap = Fixtures.buffer(entries).snapshot()
            snap.__enter__()
            return _Cursor(snap, keys)

        def setup_dict(entries: list[Entry] = entries, keys: list[str] = keys) -> Any:
            return _Cursor({e.id: e for e in entries}, keys)

        def setup_map(entries: list[Entry] = entries, keys: list[str] = keys) -> Any:
            return _Cursor(Map({e.id: e for e in entries}), keys)

        prep = _prep(_loop_getitem)

        cases.append(Case(_result("lookup", "lookup", "quiesce", n), setup_snap, prep))
        cases.append(Case(_result("lookup", "lookup", "dict", n), setup_dict, prep))
        cases.append(Case(_result("lookup", "lookup", "immutables.Map", n), setup_map, prep))
    measure(cases, cfg)
    res.cases = [c.result for c in cases]
    return res


# -- prune ------------------------------------------------------------------------


@section("prune")
def bench_prune(cfg: Config) -> SectionResult:
    """``prune([id])`` with no reader pinned (applied at once: policy check,
    tombstone, log record, new version) vs ``Map.delete``, ``del d[k]`` and
    copying a dict per version."""
    res = SectionResult("prune")
    cases: list[Case] = []
    for n in cfg.sizes:
        entries = _FIXTURES.entries(n)
        ids = _FIXTURES.ids(entries)
        order = _shuffled(ids, seed=3)
        budget = n // 2

        def setup_buf(entries: list[Entry] = entries, order: list[str] = order) -> Any:
            return _Cursor(Fixtures.buffer(entries), [[i] for i in order])

        def setup_map(ids: list[str] = ids, order: list[str] = order) -> Any:
            return _Cursor(Map(dict.fromkeys(ids)), order)

        def prep_map(st: _Cursor, c: int) -> Callable[[], None]:
            args = st.take(c)
            fn = st.obj.delete
            return lambda: _loop_call1(fn, args)

        def setup_dict(ids: list[str] = ids, order: list[str] = order) -> Any:
            return _Cursor(dict.fromkeys(ids), order)

        cases.append(
            Case(_result("prune", "prune", "quiesce", n), setup_buf, _prep(_loop_prune), budget)
        )
        cases.append(Case(_result("prune", "prune", "immutables.Map", n), setup_map, prep_map))
        cases.append(
            Case(_result("prune", "prune", "dict", n), setup_dict, _prep(_loop_delitem), budget)
        )
        cases.append(
            Case(_result("prune", "prune", "dict copy", n), setup_dict, _prep(_loop_copy_del))
        )
    measure(cases, cfg)
    res.cases = [c.result for c in cases]
    return res


# -- edit ---------------------------------------------------------------------------


@section("edit")
def bench_edit(cfg: Config) -> SectionResult:
    """``edit(EditPlan([Rewrite(id, body)]))`` (policy check, new entry with
    its hash, log record, new version; plans built outside the timing) vs
    ``Map.set``, a ``dict`` store and copying a dict per version."""
    res = SectionResult("edit")
    cases: list[Case] = []
    serial = itertools.count()
    for n in cfg.sizes:
        entries = _FIXTURES.entries(n)
        ids = _FIXTURES.ids(entries)
        order = _shuffled(ids, seed=4)

        def setup_buf(entries: list[Entry] = entries, order: list[str] = order) -> Any:
            return _Cursor(Fixtures.buffer(entries), order)

        def prep_buf(st: _Cursor, c: int) -> Callable[[], None]:
            plans = [
                EditPlan([Rewrite(i, f"rewritten step {next(serial)}")], reason="bench: edit")
                for i in st.take(c)
            ]
            fn = st.obj.edit
            return lambda: _loop_call1(fn, plans)

        cases.append(Case(_result("edit", "edit", "quiesce", n), setup_buf, prep_buf))
        cases += _map_set_case("edit", "edit", n, ids)
        cases += _dict_set_case("edit", "edit", n, ids)
        cases += _dict_copy_set_case("edit", "edit", n, ids)
    measure(cases, cfg)
    res.cases = [c.result for c in cases]
    return res


@plot("ops_vs_n.png")
def _plot_ops_vs_n(plt: Any, results: dict[str, Any], out: Path, stamp: str) -> list[Path]:
    """``ops_vs_n.png``: op cost vs n, log-log, one panel per sized operation
    (of every section that measured quiesce at more than one ``n``, ``pin`` aside)."""
    written: list[Path] = []
    sized = [
        (name, sec)
        for name, sec in results["sections"].items()
        if sum(1 for c in sec["cases"] if c["impl"] == "quiesce" and c["n"] is not None) > 1
        and name != "pin"
    ]
    if sized:
        cols = min(3, len(sized))
        rows = (len(sized) + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.2 * rows), squeeze=False)
        for ax, (name, sec) in zip(axes.flat, sized, strict=False):
            by_impl: dict[str, list[dict[str, Any]]] = {}
            for c in sec["cases"]:
                if c["n"] is not None and not c["param"] and c["median"] is not None:
                    by_impl.setdefault(c["impl"], []).append(c)
            for impl, cs in by_impl.items():
                cs.sort(key=lambda c: c["n"])
                xs = [c["n"] for c in cs]
                style = STYLE.get(impl, {})
                ax.plot(xs, [c["median"] for c in cs], label=impl, **style)
                ax.fill_between(
                    xs,
                    [c["min"] for c in cs],
                    [c["max"] for c in cs],
                    color=style.get("color"),
                    alpha=0.15,
                    linewidth=0,
                )
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title(name)
            ax.set_xlabel("entries n")
            ax.set_ylabel("ns per operation (median; band: min..max)")
            ax.grid(True, which="both", alpha=0.3)
            if ax.get_legend_handles_labels()[1]:  # a tiny run may plot no labelled line
                ax.legend(fontsize=8)
        for ax in list(axes.flat)[len(sized) :]:
            ax.set_visible(False)
        fig.suptitle(f"quiesce core operations vs n — {stamp}", fontsize=10)
        written.append(save_figure(plt, fig, out / "ops_vs_n.png"))

    return written


@plot("pin_vs_readers.png")
def _plot_pin(plt: Any, results: dict[str, Any], out: Path, stamp: str) -> list[Path]:
    """``pin_vs_readers.png``: pin cost vs pinned readers, and vs n."""
    written: list[Path] = []
    pin = results["sections"].get("pin")
    if pin is not None:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
        readers = sorted(
            (c for c in pin["cases"] if c["impl"] == "quiesce" and c["param"].get("readers")),
            key=lambda c: c["param"]["readers"],
        )
        sizes = sorted(
            (c for c in pin["cases"] if c["impl"] == "quiesce" and c["param"].get("readers") == 0),
            key=lambda c: c["n"],
        )
        refs = [c for c in pin["cases"] if c["n"] is None]
        panels: list[tuple[Any, list[dict[str, Any]], list[int], str]] = [
            (ax1, readers, [c["param"]["readers"] for c in readers], "readers already pinned"),
            (ax2, sizes, [c["n"] for c in sizes], "entries n"),
        ]
        for ax, cs, xs, xlabel in panels:
            ax.errorbar(
                xs,
                [c["median"] for c in cs],
                yerr=[
                    [c["median"] - c["min"] for c in cs],
                    [c["max"] - c["median"] for c in cs],
                ],
                label="quiesce pin + unpin",
                capsize=3,
                **STYLE["quiesce"],
            )
            for ref, color in zip(refs, ("tab:orange", "tab:purple", "tab:brown"), strict=False):
                ax.axhline(
                    ref["median"], color=color, linestyle="--", label=f"{ref['impl']} {ref['op']}"
                )
                if ref["impl"] == "aiorwlock":
                    ax.axhline(
                        PIN_VS_RWLOCK * ref["median"],
                        color=color,
                        linestyle=":",
                        label=f"goal: {PIN_VS_RWLOCK:g}× aiorwlock",
                    )
            ax.set_xscale("log")
            ax.set_ylim(bottom=0)
            ax.set_xlabel(xlabel)
            ax.set_ylabel("ns per pin + unpin (median; bars: min..max)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        ax1.set_title("pin cost vs pinned readers (n = 1e4, asyncio)")
        ax2.set_title("pin cost vs buffer size (asyncio)")
        fig.suptitle(f"quiesce snapshot pin — {stamp}", fontsize=10)
        written.append(save_figure(plt, fig, out / "pin_vs_readers.png"))

    return written
