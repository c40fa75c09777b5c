"""``quiesce verify LOG``: prove a log's checkpoints by a full replay.

What it keeps true: the log is only read, exactly as ``quiesce inspect``
reads it (SQLite through a read-only connection, JSONL with plain reads, a
``postgresql://`` URI with ``SELECT`` statements; the kind detected by
content). Its records are streamed once, in order, through
:func:`quiesce._core.verify.verify_records`: a full replay into a scratch
buffer that compares every checkpoint with the state replayed up to it.
Memory holds the replayed state and one chunk of records, never the whole
log; time is one read of the log plus O(state) per checkpoint.

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
import os
import sys
from collections.abc import Sequence

from .._core.buffer import Buffer
from .._core.errors import LogFormatError
from .._core.verify import VerifyResult, verify_records
from .inspect import _open, printable

__all__ = ["main", "verify_path"]


def verify_path(path: str) -> tuple[str, int, VerifyResult]:
    """The kind, format and :class:`VerifyResult` of the log at ``path``
    (a file or a ``postgresql://`` URI). Raises :class:`LogFormatError` for
    a log that cannot be replayed, ``OSError`` for one that cannot be read."""
    kind, fmt, _torn, stream = _open(path)
    return kind, fmt, verify_records(stream(), Buffer)


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
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    path = args.path
    if os.path.exists(path) and not os.path.isfile(path):
        sys.stderr.write(f"quiesce verify: error: {printable(path)} is not a regular file\n")
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
