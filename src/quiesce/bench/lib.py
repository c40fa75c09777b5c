"""The measuring code behind ``quiesce bench`` and the scripts in ``benchmarks/``.

Method (sortedcontainers' habit, and ``timeit``'s):

* Every operation is a *case*: a ``setup`` that builds its state (never timed)
  and a ``prepare`` that returns a zero-argument closure doing ``count``
  operations in a plain ``for`` loop over pre-built arguments (only the
  closure is timed, with ``time.perf_counter_ns``). quiesce and its baselines
  use the same loop shape, so loop overhead cancels in a ratio.
* Operations that consume their state (a mark marks a new entry, a prune
  removes one, an append grows the buffer) have a *budget*: when it runs out,
  the state is rebuilt outside the timed region, so a case at ``n`` is always
  measured on a buffer of between ``n/2`` and ``2n`` entries.
* Each case is calibrated (its first runs are the warm-up), then timed in
  ``repeat`` repetitions of ``number`` operations; we keep min/median/max of
  ns per operation. The garbage collector is off while timing (as ``timeit``
  does) unless ``--gc`` is given.
* All the cases of a *section* are timed round-robin within each repetition,
  so a goal's ratio is computed pair by pair, repetition by repetition, in
  one run, and reported as the median of those per-repetition ratios. Shared
  machines drift; ratios measured side by side do not drift with them.

Sections are registered in :data:`SECTIONS` with :func:`section`; a new one
(the agent-loop benchmark, say) is a function ``(Config) -> SectionResult``
decorated with ``@section("name")`` in a module listed in
:data:`SECTION_MODULES` (as ``quiesce.bench.agent`` and
``quiesce.bench.durability`` are), and ``quiesce bench`` runs it, writes its
cases and goals to the JSON file and its goals to the table.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import importlib.metadata
import itertools
import os
import platform
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from immutables import Map

from quiesce import Buffer, EditPlan, Entry, Kind, LogSink, Rewrite, Snapshot, __version__
from quiesce.testing import preloaded

__all__ = [
    "CORE_SECTIONS",
    "FULL",
    "QUICK",
    "SECTIONS",
    "CaseResult",
    "Config",
    "Goal",
    "SectionResult",
    "format_report",
    "load_section_modules",
    "machine_info",
    "run_suite",
    "section",
]

#: the clocks a run can time with: CPU time of this process (the default:
#: time the process spends descheduled on a busy machine is not counted) or
#: wall time
TIMERS: dict[str, Callable[[], int]] = {
    "cpu": time.process_time_ns,
    "wall": time.perf_counter_ns,
}
_now_ns = TIMERS["cpu"]


# ---------------------------------------------------------------------------
# Configuration


@dataclass(frozen=True)
class Config:
    """How hard to measure. ``goal_n`` is the size the goals are stated at
    (1e5); a quick run evaluates them at its largest size instead."""

    quick: bool
    sizes: tuple[int, ...]
    repeat: int
    target_ns: int  #: wall time of one repetition of one case
    max_number: int  #: most operations in one repetition
    readers: tuple[int, ...]  #: pinned-reader counts for the pin-vs-readers series
    gc: bool = False
    timer: str = "cpu"  #: a key of :data:`TIMERS`
    goal_n: int = 100_000

    @property
    def n_goal(self) -> int:
        """The size goals are evaluated at: ``goal_n`` if measured, else the
        largest measured size below it."""
        below = [n for n in self.sizes if n <= self.goal_n]
        return max(below) if below else min(self.sizes)

    @property
    def n_small(self) -> int:
        return min(self.sizes)


FULL = Config(
    quick=False,
    sizes=(100, 1_000, 10_000, 100_000, 1_000_000),
    repeat=11,
    target_ns=15_000_000,
    max_number=200_000,
    readers=(1, 10, 100, 1_000, 10_000),
)

QUICK = Config(
    quick=True,
    sizes=(100, 1_000, 10_000),
    repeat=5,
    target_ns=1_000_000,
    max_number=20_000,
    readers=(1, 100, 10_000),
)


# ---------------------------------------------------------------------------
# Results


@dataclass
class CaseResult:
    """One measured operation: ns per operation in each repetition."""

    section: str
    op: str  #: what is measured, e.g. ``"mark"``
    impl: str  #: ``"quiesce"``, ``"dict"``, ``"immutables.Map"``, ``"dict copy"``...
    n: int | None  #: entries in the structure
    param: dict[str, Any] = field(default_factory=dict)  #: e.g. ``{"readers": 100}``
    number: int = 0  #: operations per repetition
    ns: list[float] = field(default_factory=list)  #: ns/op, one per repetition

    @property
    def label(self) -> str:
        extra = "".join(f" {k}={v}" for k, v in self.param.items())
        n = "" if self.n is None else f" n={self.n:g}"
        return f"{self.impl} {self.op}{n}{extra}"

    def summary(self) -> dict[str, Any]:
        d = asdict(self)
        d["min"] = min(self.ns) if self.ns else None
        d["median"] = statistics.median(self.ns) if self.ns else None
        d["max"] = max(self.ns) if self.ns else None
        return d

    @property
    def median(self) -> float:
        return statistics.median(self.ns)


@dataclass
class Goal:
    """A performance goal: ``value`` (a ratio) against ``limit``."""

    key: str
    text: str
    value: float | None  #: ``None`` when it could not be measured (``SKIP``)
    limit: float
    op: str  #: ``"<="`` or ``">="``
    spread: tuple[float, float] | None = None  #: min and max of the per-repetition ratios
    note: str = ""
    #: the same ratio from the two sides' fastest repetitions (less hurt by a
    #: busy machine; for comparison, the status uses ``value``)
    of_mins: float | None = None

    @property
    def status(self) -> str:
        if self.value is None:
            return "SKIP"
        ok = self.value <= self.limit if self.op == "<=" else self.value >= self.limit
        return "PASS" if ok else "MISS"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status
        return d


@dataclass
class SectionResult:
    """What a section returns: its cases, its goals, free-form extras."""

    name: str
    cases: list[CaseResult] = field(default_factory=list)
    goals: list[Goal] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def find(self, impl: str, op: str, n: int | None = None, **param: Any) -> CaseResult:
        for c in self.cases:
            if (
                c.impl == impl
                and c.op == op
                and c.n == n
                and all(c.param.get(k) == v for k, v in param.items())
            ):
                return c
        raise KeyError(f"no case {impl} {op} n={n} {param} in section {self.name}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "cases": [c.summary() for c in self.cases],
            "goals": [g.to_dict() for g in self.goals],
            "extra": self.extra,
            "notes": self.notes,
            "seconds": round(self.seconds, 3),
        }


def paired_ratio(a: CaseResult, b: CaseResult) -> tuple[float, float, float]:
    """Median, min and max of ``a/b`` taken repetition by repetition."""
    ratios = [x / y for x, y in zip(a.ns, b.ns, strict=True) if y > 0]
    return statistics.median(ratios), min(ratios), max(ratios)


def ratio_goal(
    key: str, text: str, a: CaseResult, b: CaseResult, op: str, limit: float, note: str = ""
) -> Goal:
    """A goal on ``a/b`` (``op`` ``"<="``) or ``b/a`` (``">="``: "b is at least
    ``limit`` times slower than a")."""
    num, den = (a, b) if op == "<=" else (b, a)
    med, lo, hi = paired_ratio(num, den)
    return Goal(key, text, med, limit, op, (lo, hi), note, min(num.ns) / min(den.ns))


# ---------------------------------------------------------------------------
# Cases and the timing loop


@dataclass
class Case:
    """A measurable operation (see the module docstring)."""

    result: CaseResult
    setup: Callable[[], Any]
    prepare: Callable[[Any, int], Callable[[], object]]
    budget: int | None = None  #: operations per ``setup``; ``None``: unlimited
    min_number: int = 1  #: for cases with a fixed cost per batch (starting a loop)
    _state: Any = None
    _left: int = 0

    def time(self, count: int) -> int:
        """Run ``count`` operations; return the ns spent in the timed closures."""
        total = 0
        while count > 0:
            if self._state is None or (self.budget is not None and self._left <= 0):
                self._state = None  # drop the old state before building the new
                self._state = self.setup()
                self._left = self.budget if self.budget is not None else sys.maxsize
            c = min(count, self._left)
            run = self.prepare(self._state, c)
            t0 = _now_ns()
            run()
            total += _now_ns() - t0
            self._left -= c
            count -= c
        return total

    def close(self) -> None:
        self._state = None


def _calibrate(case: Case, cfg: Config) -> int:
    """Warm the case up and pick ``number`` so a repetition takes about
    ``cfg.target_ns``."""
    count = case.min_number
    while True:
        spent = case.time(count)
        if spent >= cfg.target_ns // 8 or count >= cfg.max_number:
            break
        count = min(count * 4, cfg.max_number)
    per_op = max(spent / count, 1.0)
    number = int(cfg.target_ns / per_op)
    return max(case.min_number, min(number, cfg.max_number))


def measure(cases: Sequence[Case], cfg: Config) -> None:
    """Calibrate, warm up, then time every case round-robin ``cfg.repeat``
    times, filling each ``case.result``."""
    global _now_ns
    _now_ns = TIMERS[cfg.timer]
    was_enabled = gc.isenabled()
    if not cfg.gc:
        gc.disable()
    try:
        numbers = []
        for case in cases:
            number = _calibrate(case, cfg)
            case.time(number)  # warm-up at full size
            case.result.number = number
            numbers.append(number)
        for _ in range(cfg.repeat):
            for case, number in zip(cases, numbers, strict=True):
                case.result.ns.append(case.time(number) / number)
    finally:
        for case in cases:
            case.close()
        if was_enabled:
            gc.enable()
    gc.collect()


# ---------------------------------------------------------------------------
# Fixtures: entries and buffers


class Fixtures:
    """Entries and keys built once per run and shared by every section."""

    def __init__(self) -> None:
        self._entries: dict[int, list[Entry]] = {}
        self._fresh: dict[tuple[int, int], list[Entry]] = {}

    def entries(self, n: int) -> list[Entry]:
        """``n`` plain reasoning entries ``e0``…; prefixes are shared."""
        have = self._entries.get(n)
        if have is None:
            biggest = max((k for k in self._entries if k >= n), default=None)
            if biggest is not None:
                have = self._entries[biggest][:n]
            else:
                have = [
                    Entry(f"e{i}", Kind.REASONING, f"reasoning step {i}: looked at the input")
                    for i in range(n)
                ]
            self._entries[n] = have
        return have

    def fresh(self, n: int, count: int) -> list[Entry]:
        """``count`` entries not among :meth:`entries` (for appends)."""
        key = (n, count)
        have = self._fresh.get(key)
        if have is None:
            have = [
                Entry(f"x{i}", Kind.REASONING, f"new step {i}: called a tool") for i in range(count)
            ]
            self._fresh[key] = have
        return have

    @staticmethod
    def buffer(entries: Sequence[Entry], marked: int = 0, log: LogSink | None = None) -> Buffer:
        """A buffer holding ``entries`` (the first ``marked`` of them marked),
        bulk-loaded as one version (:func:`quiesce.testing.preloaded`): building a 1e6
        buffer by ``append`` would cost seconds and a log nobody reads here.
        The measured operations go through the public API. With ``log`` (an
        empty sink), every record the measured operations produce goes to it
        on the next ``flush()``; the bulk load itself writes none."""
        return preloaded(entries, marked=marked, log=log)

    @staticmethod
    def ids(entries: Sequence[Entry]) -> list[str]:
        return [e.id for e in entries]


_FIXTURES = Fixtures()


def _chunk(seq: Sequence[Any], pos: int, count: int) -> list[Any]:
    """``count`` items of ``seq`` starting at ``pos``, wrapping around."""
    out: list[Any] = []
    size = len(seq)
    while len(out) < count:
        start = pos % size
        out.extend(seq[start : start + count - len(out)])
        pos = start + count
    return out


class _Cursor:
    """A state plus a position in a list of arguments."""

    __slots__ = ("args", "obj", "pos")

    def __init__(self, obj: Any, args: Sequence[Any]) -> None:
        self.obj = obj
        self.args = args
        self.pos = 0

    def take(self, count: int) -> list[Any]:
        out = _chunk(self.args, self.pos, count)
        self.pos += count
        return out


def _shuffled(ids: Sequence[str], seed: int = 1) -> list[str]:
    out = list(ids)
    random.Random(seed).shuffle(out)
    return out


# Loops: one per operation, all the same shape ----------------------------


def _prep(loop: Callable[[Any, list[Any]], None]) -> Callable[[_Cursor, int], Callable[[], None]]:
    """A ``prepare`` that times ``loop(state, the next count arguments)``."""

    def prep(st: _Cursor, c: int) -> Callable[[], None]:
        args = st.take(c)
        obj = st.obj
        return lambda: loop(obj, args)

    return prep


def _loop_call1(fn: Callable[[Any], object], args: list[Any]) -> None:
    for a in args:
        fn(a)


def _loop_call2(fn: Callable[[Any, Any], object], args: list[Any], value: Any) -> None:
    for a in args:
        fn(a, value)


def _loop_setitem(d: dict[str, Any], args: list[str]) -> None:
    for a in args:
        d[a] = a


def _loop_getitem(d: Any, args: list[str]) -> None:
    for a in args:
        d[a]


def _loop_delitem(d: dict[str, Any], args: list[str]) -> None:
    for a in args:
        del d[a]


def _loop_copy_set(d: dict[str, Any], args: list[str]) -> None:
    for a in args:
        c = d.copy()
        c[a] = a


def _loop_copy_del(d: dict[str, Any], args: list[str]) -> None:
    for a in args:
        c = d.copy()
        del c[a]


def _loop_mark(buf: Buffer, args: list[str]) -> None:
    mark = buf.mark_stale
    for a in args:
        mark(a, "bench: stale")


def _loop_prune(buf: Buffer, args: list[list[str]]) -> None:
    prune = buf.prune
    for a in args:
        prune(a, reason="bench: prune")


def _loop_pin(buf: Buffer, count: int) -> None:
    snapshot = buf.snapshot
    for _ in range(count):
        with snapshot():
            pass


async def _aloop_pin(buf: Buffer, count: int) -> None:
    _loop_pin(buf, count)


async def _aloop_rwlock(count: int) -> None:
    import aiorwlock

    reader = aiorwlock.RWLock().reader_lock
    for _ in range(count):
        async with reader:
            pass


async def _aloop_asyncio_lock(count: int) -> None:
    lock = asyncio.Lock()
    for _ in range(count):
        async with lock:
            pass


def _loop_iter(obj: Any, count: int) -> None:
    for _ in range(count):
        for _e in obj:
            pass


# ---------------------------------------------------------------------------
# The registry of sections


SectionFn = Callable[[Config], SectionResult]

#: name → section function, in run order. Add one with :func:`section`.
SECTIONS: dict[str, SectionFn] = {}


#: modules that register more sections when imported; a listed module that
#: does not exist is skipped, so a section can be planned before it is written.
SECTION_MODULES: list[str] = [
    "quiesce.bench.agent",
    "quiesce.bench.durability",
    "quiesce.bench.shared",
    "quiesce.bench.long_life",
    "quiesce.bench.sync_render",
    "quiesce.bench.otel",
    "quiesce.bench.frameworks",
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


def _result(sec: str, op: str, impl: str, n: int | None, **param: Any) -> CaseResult:
    return CaseResult(sec, op, impl, n, dict(param))


def _e(n: int) -> str:
    return f"1e{len(str(n)) - 1}" if str(n).strip("0") == "1" else str(n)


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
            3.0,
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
                0.2,
            )
        )
    else:
        res.goals.append(
            Goal(
                "pin_vs_rwlock",
                "pin+unpin / aiorwlock reader",
                None,
                0.2,
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


# -- memory ---------------------------------------------------------------------------


def _traced(fn: Callable[[], Any]) -> tuple[int, Any]:
    """Bytes still allocated after ``fn()`` (tracemalloc), and its result."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        out = fn()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return after - before, out


@section("memory")
def bench_memory(cfg: Config) -> SectionResult:
    """1,000 readers, each pinning a version one mark apart, in a buffer of
    10,000 entries: the memory they keep alive vs the buffer's own (both by
    tracemalloc; the buffer built by ``append``, its entries made beforehand
    and not counted)."""
    res = SectionResult("memory")
    n, readers = 10_000, 1_000
    entries = [
        Entry(f"m{i}", Kind.REASONING, f"reasoning step {i}: looked at the input") for i in range(n)
    ]

    def build() -> Buffer:
        buf = Buffer()
        for e in entries:
            buf.append(e)
        # append queues ids for the markable index, folded in by the next
        # write that asks it: fold here, so the index counts as the buffer's
        # own memory, not as the first reader's mark's.
        with buf._write_lock:
            buf._markable()
        return buf

    buffer_bytes, buf = _traced(build)

    def pin_all() -> list[Snapshot]:
        snaps = []
        for e in entries[:readers]:
            buf.mark_stale(e.id, "bench: one mark apart")
            s = buf.snapshot()
            s.__enter__()
            snaps.append(s)
        return snaps

    extra_bytes, snaps = _traced(pin_all)
    assert buf.stats().pinned == readers
    for s in snaps:
        s.__exit__(None, None, None)

    # References: the same versions as immutables.Map copies, and as dict copies.
    base = {e.id: e for e in entries}
    dict_bytes, _ = _traced(lambda: dict(base))
    m: Map[str, Any] = Map(base)

    def map_versions() -> list[Map[str, Any]]:
        out, cur = [], m
        for i, e in enumerate(entries[:readers]):
            cur = cur.set(e.id, i)
            out.append(cur)
        return out

    map_bytes, _ = _traced(map_versions)
    copies = 100
    copy_bytes, _ = _traced(lambda: [dict(base) for _ in range(copies)])
    res.extra = {
        "n": n,
        "readers": readers,
        "buffer_bytes": buffer_bytes,
        "pinned_extra_bytes": extra_bytes,
        "per_reader_bytes": extra_bytes / readers,
        "dict_bytes": dict_bytes,
        "map_1000_versions_extra_bytes": map_bytes,
        "dict_copies": copies,
        "dict_copies_extra_bytes": copy_bytes,
    }
    res.goals.append(
        Goal(
            "memory_pinned_readers",
            f"memory of {readers:,} pinned readers / buffer, n={_e(n)}",
            extra_bytes / buffer_bytes,
            0.5,
            "<=",
            note=f"{extra_bytes / 1e6:.2f} MB / {buffer_bytes / 1e6:.2f} MB",
        )
    )
    return res


#: the sections that measure the sync core (``benchmarks/core_ops.py``)
CORE_SECTIONS = ("mark", "append", "pin", "iterate", "lookup", "prune", "edit", "memory")


# ---------------------------------------------------------------------------
# Running and reporting


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
