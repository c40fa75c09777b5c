"""The process ``log/test_log_crash.py`` kills with SIGKILL.

Usage: ``python _crash_child.py KIND PATH SEED [OPS_PER_FLUSH]``

Opens (or recovers) ``Buffer(log=SQLiteLog(PATH))`` or ``JsonlLog``, then runs
the seeded random workload forever: appends, marks, prunes (removals commit
durably), edits, pins that defer removals, streams opened, written, closed
and aborted (so kills land with streams in flight), and a ``flush()`` every
few operations. Whenever nothing is pending — every change so far is durable —
and the log grew since the last report, it prints one JSON line
``{"log": n, "digest": ...}``: the log length and the digest of
``state(buf)``. The parent trusts only complete lines; each
one is a promise that recovery must keep.
"""

from __future__ import annotations

import json
import random
import sys

from _workload import STREAM_OP_NAMES, Workload, digest, random_op, state
from quiesce import Buffer, JsonlLog, LogWriteError, SQLiteLog


def main() -> None:
    kind, path, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    per_flush = int(sys.argv[4]) if len(sys.argv) > 4 else 8
    # checkpoints: every N records, and flush(checkpoint=True) every third flush
    every = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    sink = SQLiteLog(path) if kind == "sqlite" else JsonlLog(path)
    buf = Buffer(log=sink, checkpoint_every=every)
    rng = random.Random(seed)
    work = Workload(buf, prefix=f"p{seed}-", streams=True)
    out = sys.stdout
    out.write(json.dumps({"ready": len(buf.log)}) + "\n")
    out.flush()
    i = 0
    reported = len(buf.log)
    while True:
        i += 1
        try:
            work.run(random_op(rng, STREAM_OP_NAMES))
            if i % per_flush == 0:
                buf.flush(checkpoint=bool(every) and i % (3 * per_flush) == 0)
        except LogWriteError as exc:  # pragma: no cover - would fail the parent's checks
            out.write(json.dumps({"error": str(exc)}) + "\n")
            out.flush()
            raise
        if buf.pending_records == 0 and len(buf.log) != reported:
            reported = len(buf.log)
            out.write(json.dumps({"log": len(buf.log), "digest": digest(state(buf))}) + "\n")
            out.flush()
        if len(work.snaps) > 3:
            work.release_all()


if __name__ == "__main__":
    main()
