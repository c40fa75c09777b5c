"""What the ``durability`` section of ``quiesce bench`` (:mod:`.durability`)
measures with: the sinks, the section's sizes, fresh sink files, a flusher
thread, and the entries and loops the cases time.

What it keeps true: every sink a case opens lives in one temporary folder
(:class:`_Sinks`) and is closed at the end whether the case finished or not;
:class:`_Flusher` stops and joins its thread on exit. Nothing here times
anything or registers a section.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from quiesce import Buffer, Entry, JsonlLog, Kind, SQLiteLog

from .lib import Config

__all__ = ["MEMORY", "SINKS", "DurabilityConfig", "Sink"]

Sink = SQLiteLog | JsonlLog

#: the durable sinks measured, by the name the results use
SINKS: dict[str, Callable[[Path], Sink]] = {
    "SQLiteLog": lambda path: SQLiteLog(path.with_suffix(".db")),
    "JsonlLog": lambda path: JsonlLog(path.with_suffix(".jsonl")),
}
MEMORY = "in memory"


@dataclass(frozen=True)
class DurabilityConfig:
    """Sizes of the durability section, chosen from the suite's :class:`Config`."""

    mark_n: int  #: entries in a buffer the no-flusher mark cases mark through
    flusher_marks: int  #: marks in one timed loop while a thread flushes every 10 ms
    batch: int = 1_000  #: pending records in one measured ``flush()``
    sustained_s: float = 0.5  #: seconds of one sustained-append run
    flush_every: float = 0.010  #: seconds between flushes

    @classmethod
    def for_suite(cls, cfg: Config) -> DurabilityConfig:
        if cfg.quick:
            return cls(mark_n=cfg.n_goal, flusher_marks=20_000, sustained_s=0.1)
        return cls(mark_n=cfg.n_goal, flusher_marks=50_000, sustained_s=0.5)


def _entries(n: int, prefix: str) -> list[Entry]:
    return [
        Entry(f"{prefix}{i}", Kind.REASONING, f"reasoning step {i}: the service answered 200")
        for i in range(n)
    ]


class _Sinks:
    """Fresh sink files in one temporary folder; closes them all at the end."""

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="quiesce-bench-")
        self._serial = 0
        self._open: list[Sink] = []

    def new(self, kind: str) -> Sink:
        self._serial += 1
        sink = SINKS[kind](Path(self._tmp.name) / f"log{self._serial}")
        self._open.append(sink)
        return sink

    def path(self) -> Path:
        """A fresh file name in the folder (for a sink the caller opens)."""
        self._serial += 1
        return Path(self._tmp.name) / f"log{self._serial}"

    def close(self, sink: Sink) -> None:
        sink.close()
        if sink in self._open:
            self._open.remove(sink)

    def cleanup(self) -> None:
        for sink in self._open:
            sink.close()
        self._open.clear()
        self._tmp.cleanup()


class _Flusher:
    """Calls ``buf.flush()`` every ``interval`` seconds in a thread (the
    runtime's group commit, without an event loop)."""

    def __init__(self, buf: Buffer, interval: float) -> None:
        self.buf = buf
        self.interval = interval
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="bench-flusher", daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            self.buf.flush()

    def __enter__(self) -> _Flusher:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def _loop_mark(buf: Buffer, ids: list[str]) -> None:
    mark = buf.mark_stale
    for i in ids:
        mark(i, "superseded")


def _summary(values: Sequence[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}
