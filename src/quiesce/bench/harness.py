"""The harness of ``quiesce bench``: how a case is timed, the results'
types, and the fixtures the sections share.

What it keeps true: only a case's prepared closure is timed (its ``setup``
never is); a goal's ratio is taken pair by pair within one run; the GC is
off while timing unless the run asks for it, and back on after
:func:`measure`, also when a case raised. Which sections exist is
:mod:`.registry`'s business, running them and reporting :mod:`.report`'s.

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
"""

from __future__ import annotations

import asyncio
import gc
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from quiesce import Buffer, Entry, Kind, LogSink
from quiesce.testing import preloaded

__all__ = [
    "FULL",
    "QUICK",
    "TIMERS",
    "Case",
    "CaseResult",
    "Config",
    "Fixtures",
    "Goal",
    "SectionResult",
    "measure",
    "paired_ratio",
    "ratio_goal",
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


def _result(sec: str, op: str, impl: str, n: int | None, **param: Any) -> CaseResult:
    return CaseResult(sec, op, impl, n, dict(param))


def _e(n: int) -> str:
    return f"1e{len(str(n)) - 1}" if str(n).strip("0") == "1" else str(n)


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
