"""``quiesce compact SRC DST``: a new log that starts from a checkpoint.

What it keeps true: SRC is only read (SQLite through a read-only
connection, JSONL with a plain read), never written, locked or indexed.
DST is a new log of the same kind holding one record: a checkpoint (seq 0)
of the state ``Buffer(log=SRC)`` recovers — live entries in window order
with their keys, marks, every tombstone, staged removals, counters —
marked as compacted from SRC. ``Buffer(log=DST)`` recovers the same state
(checked before the command returns) and continues the log from there. The
history itself stays in SRC: nothing is deleted, SRC is the archive.

DST must not exist. Errors (a missing or damaged SRC, an existing DST, a
failed write): one line on stderr and exit status 2; a DST left half
written is removed. O(records of SRC) to read and replay it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

from .._core.buffer import Buffer
from .._core.checkpoint import compacted_records, replay_log
from .._core.errors import LogFormatError
from .inspect import _read
from .jsonl import JsonlLog
from .sqlite import SQLiteLog

__all__ = ["main"]


def _fail(message: str) -> int:
    sys.stderr.write(f"quiesce compact: error: {' '.join(message.split())}\n")
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``quiesce compact``; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="quiesce compact",
        description="Write a new log starting from a checkpoint of SRC (SRC is not changed).",
    )
    parser.add_argument("src", metavar="SRC", help="a SQLiteLog or JsonlLog file (only read)")
    parser.add_argument("dst", metavar="DST", help="the new log (must not exist)")
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    src, dst = args.src, args.dst
    if not os.path.isfile(src):
        return _fail(f"{src} is not a regular file")
    if os.path.lexists(dst):
        return _fail(f"{dst} exists: compact writes a new log and never overwrites one")
    try:
        kind, _fmt, records, _torn = _read(src)
        if kind not in ("sqlite", "jsonl"):  # pragma: no cover - _read sniffs files only
            return _fail(f"{src}: cannot compact a {kind} log")
        scratch = Buffer()
        replay_log(scratch, records)
        del records
        batch = compacted_records(scratch, os.path.abspath(src), time.time())
    except (OSError, LogFormatError) as exc:
        return _fail(str(exc))
    cls = SQLiteLog if kind == "sqlite" else JsonlLog
    try:
        log = cls(dst)
        try:
            log.write(batch)
        finally:
            log.close()
        check = cls(dst)
        try:
            again = Buffer(log=check)
            if (again.version, list(again._head.entries()), again._head.tombs) != (
                scratch.version,
                list(scratch._head.entries()),
                scratch._head.tombs,
            ):  # pragma: no cover - a bug, not an input error
                raise LogFormatError(f"{dst} does not recover the state of {src}")
        finally:
            check.close()
    except (OSError, LogFormatError, ValueError) as exc:
        for leftover in (dst, dst + "-wal", dst + "-shm"):
            if os.path.exists(leftover):
                os.unlink(leftover)
        return _fail(str(exc))
    head = scratch._head
    sys.stdout.write(
        f"{dst}: {kind} log compacted from {len(scratch.log)} records of {src}: "
        f"head version {scratch.version}, {len(head.live)} live entries, "
        f"{len(head.marks)} marked, {len(head.tombs.by_id)} tombstones, "
        f"{len(scratch.staged())} staged removals\n"
    )
    return 0
