"""Logs for the ``quiesce verify`` tests (test_log_verify.py and
test_log_verify_memory.py): one builder of a long-lived log with a bounded
live window, so both files measure the same shape of history."""

from __future__ import annotations

from pathlib import Path

from quiesce import Buffer, Entry, JsonlLog, Kind, SQLiteLog
from quiesce._core.state import state_of


def long_lived(
    path: Path,
    rounds: int,
    *,
    kind: str = "sqlite",
    width: int = 10,
    checkpoint_every: int = 500,
    pad: str = "x" * 160,
) -> Buffer:
    """A log at ``path`` (``kind`` ``"sqlite"`` or ``"jsonl"``) of a bounded
    live window (``width`` entries at most): each round appends ``width``
    entries (ids padded with ``pad``, so anything kept per tombstone
    shows), marks one and prunes them all; a checkpoint every
    ``checkpoint_every`` records and one at the end. Returns the buffer
    (its log closed: its in-memory state stays readable, e.g. its
    tombstone count and store)."""
    log = SQLiteLog(path) if kind == "sqlite" else JsonlLog(path)
    try:
        buf = Buffer(log=log, checkpoint_every=checkpoint_every)
        for r in range(rounds):
            ids = [f"{pad}-{r}-{k}" for k in range(width)]
            for i in ids:
                buf.append(Entry(i, Kind.REASONING, f"round {r} step {i[-8:]}"))
            buf.mark_stale(ids[0], "done")
            buf.prune(ids, reason=f"round {r} is done")
        buf.flush(checkpoint=True)
        return buf
    finally:
        log.close()


def store_bytes(buf: Buffer) -> int:
    """The bytes of the index slots of ``buf``'s tombstone store (every
    generation of its three indexes): what a spilled store keeps."""
    store = state_of(buf).head.tombs._store
    total = 0
    for gens in (store._by_id, store._by_hash, store._by_key):
        for ix in gens:
            total += len(ix.slots) * ix.slots.itemsize
    return total
