"""``quiesce verify LOG``: prove a log's checkpoints by a full replay.

What it keeps true: the log is only read, exactly as ``quiesce inspect``
reads it (SQLite through a read-only connection, JSONL with plain reads, a
``postgresql://`` URI with ``SELECT`` statements; the kind detected by
content). Its records are streamed once, in order, through
:func:`quiesce._core.verify.verify_records`: a full replay into a scratch
buffer that compares every checkpoint with the state replayed up to it.
Memory holds the replayed state and one chunk of records, never the whole
log, whatever its length: the removal records' tombstone lists, which the
replayed tombstones and each checkpoint's index are read back from, go to
a temporary file (:class:`TempRemovals`: 16 bytes of memory per removal
record, removed when the run ends), and checkpoints are compared as
digests (``_core/verify.py``). Time is one read of the log, one write and
one read back of its removals, plus O(state) per checkpoint.

Output: one line on stdout when every checkpoint agrees (``PATH: quiesce
KIND edit log, format F: N records, C checkpoints agree with a full
replay``), exit status 0. The first disagreement is one line on stderr
naming the checkpoint's seq, the field and the first differing item,
exit status 1; so is a log that cannot be replayed (damaged, crafted, not
a log). A path that is not a regular file: exit status 2. Every line goes
through :func:`~.inspect.printable` (a log is untrusted input).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from array import array
from bisect import bisect_left
from collections.abc import Sequence

from .._core.buffer import Buffer
from .._core.errors import LogFormatError
from .._core.records import LogRecord
from .._core.verify import VerifyResult, verify_records
from ._sink import ClosesOnExit
from .inspect import _open, not_a_regular_file, parse_command, printable

__all__ = ["TempRemovals", "main", "verify_path"]


class TempRemovals(ClosesOnExit):
    """A ``RemovalStore`` (``_core/verify.py``) in a temporary file: each
    kept removal record's tombstone list is appended as one JSON line; in
    memory only its seq and offset (two ``array('q')`` items, 16 bytes).
    ``read_range`` seeks and decodes (a seq that is not a kept removal is
    :class:`LogFormatError`, as the tombstone index must point at one).
    Seqs come in ascending order (a log's). The file is unlinked when
    created (``tempfile.TemporaryFile``) and closed by :meth:`close` or the
    ``with`` block. O(1) memory per record; O(log removals) per read."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        self._seqs = array("q")
        self._offsets = array("q")
        self._end = 0
        self._template: LogRecord | None = None

    def keep(self, rec: LogRecord) -> None:
        line = json.dumps(rec.detail["tombstones"], ensure_ascii=True).encode("ascii") + b"\n"
        self._file.seek(self._end)
        self._file.write(line)
        self._seqs.append(rec.seq)
        self._offsets.append(self._end)
        self._end += len(line)
        if self._template is None:
            self._template = rec._replace(detail={})

    def read_range(self, start: int, stop: int) -> Sequence[LogRecord]:
        out = []
        for s in range(start, stop):
            j = bisect_left(self._seqs, s)
            if j == len(self._seqs) or self._seqs[j] != s or self._template is None:
                raise LogFormatError(f"the tombstone index points at record {s}, no removal")
            self._file.seek(self._offsets[j])
            tombs = json.loads(self._file.readline())
            out.append(self._template._replace(seq=s, detail={"tombstones": tombs}))
        return out

    def close(self) -> None:
        """Close (and so remove) the temporary file. Idempotent."""
        self._file.close()


def verify_path(path: str) -> tuple[str, int, VerifyResult]:
    """The kind, format and :class:`VerifyResult` of the log at ``path``
    (a file or a ``postgresql://`` URI). Raises :class:`LogFormatError` for
    a log that cannot be replayed, ``OSError`` for one that cannot be read."""
    kind, fmt, _torn, stream = _open(path)
    with TempRemovals() as removals:
        return kind, fmt, verify_records(stream(), Buffer, removals=removals)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``quiesce verify``; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="quiesce verify",
        description=(
            "Replay a quiesce log in full and check every checkpoint against it: "
            "a SQLite or JSONL file, or a postgresql:// URI (buffer_id=ID in its query)"
        ),
    )
    parser.add_argument("path", metavar="LOG", help="a SQLiteLog or JsonlLog file, or a URI")
    args = parse_command(parser, argv)
    if isinstance(args, int):
        return args
    path = args.path
    if not_a_regular_file("quiesce verify", path):
        return 2
    try:
        kind, fmt, result = verify_path(path)
    except (OSError, LogFormatError) as exc:
        sys.stderr.write(f"quiesce verify: error: {printable(str(exc))}\n")
        return 1
    if result.disagreement is not None:
        message = printable(result.disagreement.message())
        sys.stderr.write(f"quiesce verify: error: {printable(path)}: {message}\n")
        return 1
    sys.stdout.write(
        f"{printable(path)}: quiesce {kind} edit log, format {fmt}: {result.records} records, "
        f"{result.checkpoints} checkpoints agree with a full replay\n"
    )
    return 0
