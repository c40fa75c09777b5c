"""The ``memory`` section of ``quiesce bench``: what pinned readers keep alive.

1,000 readers, each pinning a version one mark apart, in a buffer of 10,000
entries: the memory they keep alive against the buffer's own, and the same
versions as ``immutables.Map`` and as dict copies, all by ``tracemalloc``.
What it keeps true: the buffer's own memory is measured with every index it
builds lazily already built, so no reader is billed for it; every reader is
unpinned before the section returns. Registered after the other core
sections (:mod:`.core`), so it runs last of them.
"""

from __future__ import annotations

from typing import Any

from immutables import Map

from quiesce import Buffer, Entry, Kind, Snapshot

from .harness import Config, Goal, SectionResult, _e, _traced
from .registry import section

__all__ = ["bench_memory"]


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
