"""The long_life section's ``ll_recovery_vs_read`` alone, without the section.

Builds the section's long log once (``churn`` with ``FULL_LL``'s sizes and the
default ``checkpoint_every``: about 677,000 records, 4-5 minutes) at PATH if it
is not there, then times ``Buffer(log=SQLiteLog(PATH))`` and reading its
newest checkpoint and tail (``read_range``), alternated, ROUNDS times each,
in wall time (what the bench reports) and in this process's CPU time (less
disturbed by other processes on a shared machine). Prints the median ratio
and the spread of the per-pair ratios.

    python benchmarks/ll_recovery_ratio.py /tmp/long.sqlite [ROUNDS]
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import time
from collections.abc import Callable

from quiesce import Buffer, SQLiteLog
from quiesce.bench.long_life_memory import read_newest_checkpoint
from quiesce.bench.long_life_workload import FULL_LL, churn


def _build(path: str) -> None:
    t0 = time.perf_counter()
    buf = Buffer(log=SQLiteLog(path))
    churn(buf, FULL_LL.ops, FULL_LL.live, FULL_LL.batch)
    buf.flush()
    buf.sink.close()  # type: ignore[union-attr]
    print(f"built {path} in {time.perf_counter() - t0:.1f} s", flush=True)


def _timed(fn: Callable[[], object], after: Callable[[object], None]) -> tuple[float, float]:
    """Wall and CPU seconds of ``fn()`` (``after`` its result, untimed)."""
    gc.collect()
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    t = time.perf_counter() - w0, time.process_time() - c0
    after(out)
    return t


def main(path: str, rounds: int) -> None:
    if not os.path.exists(path):
        _build(path)

    def recover() -> Buffer:
        return Buffer(log=SQLiteLog(path))  # closed untimed, as the bench does

    def close(buf: object) -> None:
        assert isinstance(buf, Buffer)
        buf.sink.close()  # type: ignore[union-attr]

    def read() -> None:
        read_newest_checkpoint(path)

    pairs = [(_timed(recover, close), _timed(read, lambda _: None)) for _ in range(rounds)]
    for k, clock in enumerate(("wall", "cpu")):
        xs = [a[k] for a, _ in pairs]
        ys = [b[k] for _, b in pairs]
        ratios = sorted(x / y for x, y in zip(xs, ys, strict=True))
        print(
            f"{clock}: recovery {statistics.median(xs) * 1e3:.1f} ms, read "
            f"{statistics.median(ys) * 1e3:.1f} ms, ratio "
            f"{statistics.median(xs) / statistics.median(ys):.2f} "
            f"(pairs {ratios[0]:.2f}-{ratios[-1]:.2f}, n={rounds})"
        )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 7)
