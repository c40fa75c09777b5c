"""The workload and the measuring helpers of the ``long_life`` section of
``quiesce bench`` (:mod:`.long_life` runs the section and documents its
figures).

What it keeps true: :func:`churn` is the one steady-state workload every
long-life figure runs (a window of ``live`` entries; rounds of ``batch``
appends, ``batch`` marks and one prune of the ``batch`` oldest), and every
figure is a ratio of two sides timed alternately in one run
(:func:`_alternate`, :func:`_ratio_goal`), reported with both sides in its
note. Nothing here registers a section or draws.
"""

from __future__ import annotations

import gc
import inspect
import statistics
import time
import tracemalloc
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .. import Buffer, Entry, Kind, SQLiteLog
from .lib import Goal

__all__ = ["FULL_LL", "QUICK_LL", "LongLifeConfig", "churn"]


@dataclass(frozen=True)
class LongLifeConfig:
    """The sizes of one run of the section."""

    ops: int  #: operations of the long run (1e6 in the issue)
    ops_short: int  #: operations of the short log (1e4)
    live: int  #: live window (1e3)
    batch: int  #: entries appended, marked and pruned per round
    big_cycles: int  #: append+prune cycles of 100 KB outputs (2,000)
    move_n: tuple[int, int]  #: (small, large) buffer sizes for Move (1e3, 1e5)
    iter_n: int  #: buffer size for the first-iteration figure (1e4)
    edit_m: int  #: prunes in the refused edit, and referrers of each (800)
    repeat: int
    edit_pool: int = 200_000  #: entries the marker marks while the edit is refused
    collisions: int = 4_000  #: ids appended and pruned by ``ll_crafted_collisions``


FULL_LL = LongLifeConfig(
    ops=1_000_000,
    ops_short=10_000,
    live=1_000,
    batch=100,
    big_cycles=2_000,
    move_n=(1_000, 100_000),
    iter_n=10_000,
    edit_m=800,
    repeat=5,
)

#: the quick run: the full run's shape, smaller (same ``iter_n``, pool, ids)
QUICK_LL = replace(
    FULL_LL,
    ops=30_000,
    ops_short=3_000,
    live=300,
    batch=50,
    big_cycles=100,
    move_n=(1_000, 10_000),
    edit_m=60,
    repeat=3,
)


def _entry(i: int, size: int = 0) -> Entry:
    body = f"reasoning step {i}: looked at the input and kept the relevant part"
    if size > len(body):
        body = (body + " " + "lorem ipsum dolor sit amet " * (size // 27 + 1))[:size]
    return Entry(f"e{i}", Kind.REASONING, body)


def churn(
    buf: Buffer,
    ops: int,
    live: int,
    batch: int,
    start: int = 0,
    sample_at: Sequence[int] = (),
    on_sample: Callable[[int], None] | None = None,
) -> int:
    """Run the steady-state workload on ``buf``: fill the window to ``live``
    entries (``live`` appends), then rounds of ``batch`` appends, ``batch``
    marks and one prune of the ``batch`` oldest, until ``ops`` operations
    are done. Returns the next entry number.

    ``on_sample(done)`` is called at the end of the first round that brings
    the operations done to at least each of ``sample_at`` (ascending; one
    call per round at most, so thresholds closer than a round share a call),
    after the workload's own list of ids is cut to the live window (so a
    memory sample counts the buffer, not that list); without ``on_sample``
    the rounds pay one integer comparison more, nothing else."""
    i = start
    window: list[str] = []
    done = 0
    points = [p for p in sorted(sample_at) if p > 0] if on_sample is not None else []
    k = 0
    next_at = points[0] if points else ops + 3 * batch + 1  # beyond the last round
    for _ in range(live):
        e = _entry(i)
        buf.append(e)
        window.append(e.id)
        i += 1
        done += 1
    pos = 0  # window[pos:] is live
    while done < ops:
        for _ in range(batch):
            e = _entry(i)
            buf.append(e)
            window.append(e.id)
            i += 1
        old = window[pos : pos + batch]
        for eid in old:
            buf.mark_stale(eid, "superseded")
        buf.prune(old, reason="window full")
        pos += batch
        done += 3 * batch
        if pos > 4096:
            del window[:pos]
            pos = 0
        if done >= next_at:
            while k < len(points) and points[k] <= done:
                k += 1
            next_at = points[k] if k < len(points) else ops + 3 * batch + 1
            del window[:pos]  # the sample sees only the live ids (the buffer's)
            pos = 0
            assert on_sample is not None
            on_sample(done)
    return i


def _geometric(lo: int, hi: int, n: int) -> list[int]:
    """``n`` integers from ``lo`` to ``hi`` (both kept), evenly spaced on a
    log scale, ascending, no repeats."""
    if n < 2 or hi <= lo:
        return [hi]
    r = (hi / lo) ** (1 / (n - 1))
    return sorted({round(lo * r**j) for j in range(n - 1)} | {hi})


class _Curve:
    """Samples of one churn run (a ``churn`` ``on_sample`` callback): bytes
    tracemalloc holds beyond those at :meth:`start`, after a
    ``gc.collect()``, and the wall time per operation since the previous
    sample (the sample's own cost, and whatever ``after`` does, are kept out:
    the stretch timer restarts after them). Timings are under tracemalloc,
    so slower than untraced.

    Built before the traced run, with room for ``n`` samples (an array of
    floats), so a sample allocates nothing that outlives it: the run's
    traced bytes are what they were without the curve."""

    def __init__(self, n: int, after: Callable[[int], None] | None = None) -> None:
        self._data = array("d", bytes(8 * 3 * n))
        self._n = 0
        self._after = after
        self._base = 0
        self._done = 0
        self._t = 0.0

    def start(self) -> None:
        """Call first thing inside the traced run."""
        self._base = tracemalloc.get_traced_memory()[0]
        self._t = time.perf_counter()

    def __call__(self, done: int) -> None:
        dt = time.perf_counter() - self._t
        gc.collect()
        if 3 * self._n < len(self._data):
            k = 3 * self._n
            self._data[k] = done
            self._data[k + 1] = tracemalloc.get_traced_memory()[0] - self._base
            self._data[k + 2] = dt / max(1, done - self._done)
            self._n += 1
        if self._after is not None:
            self._after(done)
        self._done = done
        self._t = time.perf_counter()

    def points(self) -> list[dict[str, float]]:
        """The samples, ``{"ops", "bytes", "per_op_us"}`` each, in order."""
        d = self._data
        return [
            {"ops": int(d[k]), "bytes": int(d[k + 1]), "per_op_us": round(d[k + 2] * 1e6, 3)}
            for k in range(0, 3 * self._n, 3)
        ]


def _fresh_like(buf: Buffer) -> Callable[[], Buffer]:
    """A builder of a fresh in-memory buffer with ``buf``'s live entries
    (entries rebuilt inside, so their bytes count, as they do in ``buf``)."""
    dicts = [e.to_dict() for e in buf.head().entries()]

    def build() -> Buffer:
        fresh = Buffer()
        for d in dicts:
            fresh.append(Entry.from_dict(d))
        return fresh

    return build


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Wall seconds of ``fn()`` and its result (for what waits: a disk, a
    lock, another thread)."""
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _cpu_timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """CPU seconds of this process in ``fn()`` and its result: for a figure
    that only computes, as the suite times its cases (``process_time``), so
    a sample does not count the time another process had the core (on a
    shared machine, wall-clock samples of one figure spread 200x)."""
    t0 = time.process_time()
    out = fn()
    return time.process_time() - t0, out


def _alternate(
    a: Callable[[], float], b: Callable[[], float], repeat: int
) -> tuple[list[float], list[float]]:
    """Seconds of ``a`` and ``b``, run alternately ``repeat`` times each."""
    xs, ys = [], []
    for _ in range(repeat):
        xs.append(a())
        ys.append(b())
    return xs, ys


def _ratio_goal(
    key: str, text: str, xs: Sequence[float], ys: Sequence[float], limit: float, unit: str = "s"
) -> Goal:
    """A ``<=`` goal on median(xs) / median(ys) (spread: per-pair ratios)."""
    pairs = [x / y for x, y in zip(xs, ys, strict=True) if y > 0]
    mx, my = statistics.median(xs), statistics.median(ys)
    value = mx / my if my > 0 else None
    spread = (min(pairs), max(pairs)) if pairs else None
    return Goal(
        key,
        text,
        value,
        limit,
        "<=",
        spread,
        note=f"{_fmt(mx, unit)} / {_fmt(my, unit)}",
        of_mins=min(xs) / min(ys) if min(ys) > 0 else None,
    )


def _fmt(x: float, unit: str) -> str:
    if unit == "s":
        if x < 1e-3:
            return f"{x * 1e6:.2f} us"
        return f"{x * 1e3:.2f} ms" if x < 1 else f"{x:.2f} s"
    if unit == "B":
        return f"{x / 1e6:.2f} MB"
    return f"{x:g} {unit}"


#: the Buffer's default ``checkpoint_every`` (the long log is written with
#: it), read from ``Buffer``'s own signature so it cannot drift from the core
CHECKPOINT_EVERY: int = inspect.signature(Buffer).parameters["checkpoint_every"].default


class _LoadOnly:
    """A sink that only loads and writes (no read-back, no checkpoints): the
    buffer replays the whole log, as before checkpoints existed."""

    def __init__(self, sink: SQLiteLog) -> None:
        self._sink = sink

    def load(self) -> Sequence[Any]:
        return self._sink.load()

    def write(self, records: Sequence[Any]) -> None:
        self._sink.write(records)

    def close(self) -> None:
        self._sink.close()
