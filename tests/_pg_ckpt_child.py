"""The process ``log/test_log_postgres_checkpoint.py`` kills with SIGKILL while it
writes checkpoints to PostgreSQL.

Usage: ``python _pg_ckpt_child.py DSN BUFFER_ID SEED PREFILL``, or
:func:`run` in a child process (the test forks it from the forkserver of
``tests/_shared_child.py``, which has this module imported already).
:func:`big_flush` is the writer ``log/test_log_postgres.py`` kills mid-COPY.

Opens (or recovers) ``Buffer(log=PostgresLog(DSN, BUFFER_ID),
checkpoint_every=7)``; on an empty log it first appends ``PREFILL`` entries
(so that each checkpoint is large and takes a while to build and COPY).
Then it runs the seeded random workload forever, with a ``flush()`` every
four operations and ``flush(checkpoint=True)`` every third flush. Before a
flush that writes a checkpoint it prints ``{"ckpt": n}``; whenever nothing is
pending it prints ``{"log": n, "digest": ...}`` (the log length and the
digest of :func:`head_state`): a promise recovery must keep. The parent
trusts only complete lines.
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any

from _workload import Workload, _json, digest, random_op
from quiesce import Buffer, Entry, Kind, LogWriteError, PostgresLog


def head_state(buf: Buffer) -> dict[str, Any]:
    """``state(buf)`` of ``_workload`` with the log's length instead of its
    records (reading every record back from the server per report would
    dominate the run)."""
    head = buf.head()
    stats = buf.stats()
    tombs = head.tombs
    return _json(
        {
            "version": buf.version,
            "entries": [
                [e.to_dict(), head.live[e.id].key, head.live[e.id].changed] for e in head.entries()
            ],
            "next_key": head.next_key,
            "marks": sorted(list(m) for m in head.marks.values()),
            "tombstones": sorted(
                [t.id, t.content_hash, t.reason, t.turn, t.actor, t.version, t.kind, t.key]
                for t in tombs.by_id.values()
            ),
            "by_hash": sorted([h, t.id] for h, t in tombs.by_hash.items()),
            "by_key": sorted([k, t.id] for k, t in tombs.by_key.items()),
            "staged": sorted(buf.staged().items()),
            "refusals": sorted((r.value, n) for r, n in stats.refusals.items()),
            "escalations": stats.escalations,
            "readmissions_refused": stats.readmissions_refused,
            "readmissions_overridden": stats.readmissions_overridden,
            "tombstone_to_edit_ratio": stats.tombstone_to_edit_ratio,
            "log_length": len(buf.log),
        }
    )


def main() -> None:
    """The command line: ``DSN BUFFER_ID SEED PREFILL``."""
    run(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))


def run(dsn: str, buffer_id: str, seed: int, prefill: int) -> None:
    """The child's work (never returns; the parent SIGKILLs it), reporting on
    ``sys.stdout``: the test starts it with ``_shared_child.process``, its
    stdout a pipe."""
    buf = Buffer(log=PostgresLog(dsn, buffer_id), checkpoint_every=7)
    if len(buf.log) == 0:
        for i in range(prefill):
            buf.append(Entry(f"pre{i}", Kind.REASONING, f"prefilled step {i} " + "x" * 100))
        buf.flush()
    rng = random.Random(seed)
    work = Workload(buf, prefix=f"p{seed}-")
    out = sys.stdout
    out.write(json.dumps({"ready": len(buf.log)}) + "\n")
    out.flush()
    i = 0
    reported = len(buf.log)
    while True:
        i += 1
        try:
            work.run(random_op(rng))
            if i % 4 == 0:
                ckpt = i % 12 == 0
                if ckpt:
                    out.write(json.dumps({"ckpt": len(buf.log)}) + "\n")
                    out.flush()
                buf.flush(checkpoint=ckpt)
        except LogWriteError as exc:  # pragma: no cover - would fail the parent's checks
            out.write(json.dumps({"error": str(exc)}) + "\n")
            out.flush()
            raise
        if buf.pending_records == 0 and len(buf.log) != reported:
            reported = len(buf.log)
            out.write(json.dumps({"log": reported, "digest": digest(head_state(buf))}) + "\n")
            out.flush()
        if len(work.snaps) > 3:
            work.release_all()


def big_flush(dsn: str, buffer_id: str, n: int) -> None:
    """For ``test_log_postgres``'s SIGKILL mid-COPY: append ``n`` entries to
    ``Buffer(log=PostgresLog(dsn, buffer_id))``, print ``flushing``, flush
    them in one batch (one COPY), print ``flushed``."""
    buf = Buffer(log=PostgresLog(dsn, buffer_id))
    for i in range(n):
        buf.append(Entry(f"e{i}", Kind.REASONING, "x" * 200))
    print("flushing", flush=True)
    buf.flush()
    print("flushed", flush=True)


if __name__ == "__main__":
    main()
