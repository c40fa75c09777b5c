"""``quiesce compact SRC DST``: a new log that starts from a checkpoint.

What it keeps true: SRC is only read (SQLite through a read-only
connection, JSONL with a plain read), never written, locked or indexed.
DST is a new log of the same kind holding one record: a checkpoint (seq 0)
of the state ``Buffer(log=SRC)`` recovers — live entries in window order
with their keys, marks, every tombstone, staged removals, counters —
marked as compacted from SRC. ``Buffer(log=DST)`` recovers the same state
(checked before the command returns) and continues the log from there. The
history itself stays in SRC: nothing is deleted, SRC is the archive.

SRC is verified first (``quiesce verify``, streaming): a checkpoint of SRC
that disagrees with the full replay of its records is refused, and so is a
state whose compacted base could not vouch for itself at open — a host
retraction of a protected entry (its tombstone, a marked immutable, a
retracting group) needs its record, which stays in SRC. DST must not
exist. Errors (a missing, damaged or lying SRC, an existing DST, a failed
write): one line on stderr and exit status 2, DST not written; a DST left
half written is removed. O(records of SRC) to read and replay it, in
constant memory beyond the state.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

from .._core.buffer import Buffer
from .._core.checkpoint import compacted_records
from .._core.claims import check_claims
from .._core.errors import LogFormatError
from .._core.verify import verify_records
from .inspect import _open, parse_command
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
    args = parse_command(parser, argv)
    if isinstance(args, int):
        return args
    src, dst = args.src, args.dst
    if not os.path.isfile(src):
        return _fail(f"{src} is not a regular file")
    if os.path.lexists(dst):
        return _fail(f"{dst} exists: compact writes a new log and never overwrites one")
    try:
        kind, _fmt, _torn, stream = _open(src)
        if kind not in ("sqlite", "jsonl"):  # pragma: no cover - _open sniffs files only
            return _fail(f"{src}: cannot compact a {kind} log")
        # SRC is verified first (verify.py): a checkpoint of it that
        # disagrees with its records is refused, DST is not written
        scratch = Buffer()
        result = verify_records(stream(), Buffer, into=scratch)
        if result.disagreement is not None:
            found = result.disagreement.message()
            return _fail(f"{src} does not verify: {found}; {dst} not written")
        batch = compacted_records(scratch, os.path.abspath(src), time.time())
        # what DST's open will check of its base (claims.py): a host
        # retraction of a protected entry needs its record, which stays in SRC
        try:
            check_claims(batch[0].detail["state"], 0, None)
        except LogFormatError as exc:
            return _fail(f"cannot compact {src}: {exc}; {dst} not written")
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
            if (again.version, list(again.head().entries()), again.head().tombs) != (
                scratch.version,
                list(scratch.head().entries()),
                scratch.head().tombs,
            ):  # pragma: no cover - a bug, not an input error
                raise LogFormatError(f"{dst} does not recover the state of {src}")
        finally:
            check.close()
    except (OSError, LogFormatError, ValueError) as exc:
        for leftover in (dst, dst + "-wal", dst + "-shm"):
            if os.path.exists(leftover):
                os.unlink(leftover)
        return _fail(str(exc))
    head = scratch.head()
    sys.stdout.write(
        f"{dst}: {kind} log compacted from {len(scratch.log)} records of {src}: "
        f"head version {scratch.version}, {len(head.live)} live entries, "
        f"{len(head.marks)} marked, {len(head.tombs.by_id)} tombstones, "
        f"{len(scratch.staged())} staged removals\n"
    )
    return 0
