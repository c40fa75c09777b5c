"""A deterministic workload over a Buffer, shared by the recovery tests and the
crash child: operations are plain tuples of ints, so hypothesis can draw and
shrink them and a seeded ``random.Random`` can generate them.

``state(buf)`` is everything recovery must rebuild exactly, as JSON-ready
data: ordered entries with their order keys and last-change versions, marks,
tombstones and the re-admission indexes, staged removals, the version
number, counters, and the whole log.
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

from quiesce import (
    Buffer,
    EditPlan,
    Entry,
    EscalationKind,
    Kind,
    LogWriteError,
    Move,
    Override,
    Prune,
    QuiesceError,
    Rewrite,
    Snapshot,
    StreamWriter,
    Summarize,
)

KINDS = (
    Kind.REASONING,
    Kind.REASONING,
    Kind.TOOL_CALL,
    Kind.TOOL_OUTPUT,
    Kind.SUMMARY,
    Kind.NEGATIVE,
    Kind.CONSTRAINT,
    Kind.RATIONALE,
)
# A small pool, so that re-admission of tombstoned content happens; some are
# negative results by the default classifier.
BODIES = (
    "read the config",
    "endpoint X is read-only",
    "attempt 2 timed out, do not retry",
    "kubectl describe pod: healthy",
    "plan: write to X",
    "summary of steps 1-4",
    "the cache is warm",
    "rationale: the dump is noise",
)
OP_NAMES = ("append", "append", "append", "mark", "prune", "edit", "pin", "unpin", "flush", "due")
#: OP_NAMES and the operations of open entries (issue 24): a workload made
#: with ``streams=True`` draws from these (``random_op(rng, STREAM_OP_NAMES)``)
STREAM_OP_NAMES = (*OP_NAMES, "open", "write", "write", "write", "close", "abort")
STREAM_KINDS = (Kind.REASONING, Kind.REASONING, Kind.TOOL_OUTPUT, Kind.SUMMARY)

Op = tuple[int, ...]


def random_op(rng: random.Random, names: tuple[str, ...] = OP_NAMES) -> Op:
    """One operation: (name index, four small ints)."""
    return (rng.randrange(len(names)), *(rng.randrange(16) for _ in range(4)))


class Workload:
    """Applies operations to ``buf``; refusals and bad requests are expected
    and ignored (they are logged by the buffer). ``LogWriteError`` propagates."""

    def __init__(self, buf: Buffer, prefix: str = "e", *, streams: bool = False) -> None:
        self.buf = buf
        self.prefix = prefix
        self.names = STREAM_OP_NAMES if streams else OP_NAMES
        self.writers: list[StreamWriter] = []
        head = buf.head()
        self.ids: list[str] = [e.id for e in head.entries()] + sorted(head.tombs.by_id)
        self.snaps: list[Snapshot] = []
        self.n = 0

    def _id(self, i: int) -> str:
        return self.ids[i % len(self.ids)] if self.ids else "missing"

    def _new_id(self) -> str:
        self.n += 1
        new = f"{self.prefix}{self.n}"
        self.ids.append(new)
        return new

    def run(self, op: Op) -> None:
        name = self.names[op[0] % len(self.names)]
        a, b, c, d = op[1:5]
        buf = self.buf
        try:
            if name == "append":
                refs = (self._id(b),) if b % 3 == 0 and self.ids else ()
                entry = Entry(
                    self._new_id(),
                    KINDS[a % len(KINDS)],
                    BODIES[c % len(BODIES)] + ("" if d % 2 else f" #{self.n}"),
                    refs,
                    turn=self.n if d % 3 else None,
                    key=f"k{d}" if d % 4 == 0 else None,
                    meta={"step": self.n, "tags": ["x", "y"]} if d % 5 == 0 else {},
                )
                override = Override("re-run on purpose", self.n) if c % 7 == 0 else None
                buf.append(entry, override=override)
            elif name == "mark":
                buf.mark_stale(self._id(a), f"stale {b}", turn=c if d % 2 else None)
            elif name == "prune":
                ids = {self._id(a), self._id(a + b)} if c % 2 else {self._id(a)}
                buf.prune(sorted(ids), reason=f"low relevance {d}", actor="pruner", turn=c)
            elif name == "edit":
                self._edit(a, b, c, d)
            elif name == "pin":
                snap = buf.snapshot()
                snap.__enter__()
                self.snaps.append(snap)
            elif name == "unpin":
                if self.snaps:
                    self.snaps.pop(a % len(self.snaps)).__exit__(None, None, None)
            elif name == "flush":
                buf.flush()
            elif name == "due":
                buf.apply_due()
            elif name == "open":
                refs = (self._id(b),) if b % 3 == 0 and self.ids else ()
                w = buf.open_stream(
                    self._new_id(),
                    STREAM_KINDS[a % len(STREAM_KINDS)],
                    refs=refs,
                    turn=self.n if d % 3 else None,
                    meta={"step": self.n} if d % 5 == 0 else None,
                )
                self.writers.append(w)
            elif name == "write" and self.writers:
                text = BODIES[c % len(BODIES)][: d + 1] + ("\u00e9" if b % 4 == 0 else " ")
                self.writers[a % len(self.writers)].write(text)
            elif name == "close" and self.writers:
                content = {"type": "text", "n": c} if c % 2 else None
                self.writers.pop(a % len(self.writers)).close(content=content)
            elif name == "abort" and self.writers:
                self.writers.pop(a % len(self.writers)).abort(f"interrupted {b}")
        except LogWriteError:
            raise
        except QuiesceError:
            pass

    def _edit(self, a: int, b: int, c: int, d: int) -> None:
        buf = self.buf
        which = a % 4
        base = buf.version - 1 if d % 5 == 0 else None
        rationale = (self._id(c),) if d % 3 == 0 else ()
        if which == 0:
            ops: tuple[Any, ...] = (Rewrite(self._id(b), BODIES[c % len(BODIES)] + " (rewritten)"),)
        elif which == 1:
            before = None if c % 2 else self._id(c)
            if before == self._id(b):
                before = None
            ops = (Move(self._id(b), before=before),)
        elif which == 2:
            covered = tuple(dict.fromkeys((self._id(b), self._id(b + 1))))
            into = Entry(self._new_id(), Kind.SUMMARY, f"summary of {', '.join(covered)}")
            ops = (Summarize(covered, into=into),)
        else:
            ops = (Prune(self._id(b)),)
        # Some prunes are the host's: with an override, a retraction of any kind.
        host = which == 3 and d % 2 == 1
        buf.edit(
            EditPlan(
                ops,
                reason=f"self-edit {a}",
                rationale=rationale,
                actor="host" if host else "editor",
                turn=self.n,
                base=base,
                override=Override("allowed", self.n) if c % 5 == 0 else None,
            )
        )

    def release_all(self) -> None:
        while self.snaps:
            self.snaps.pop().__exit__(None, None, None)


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def state(buf: Buffer) -> dict[str, Any]:
    """Everything recovery must rebuild, JSON-normalized (see the module docstring)."""
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
            "log": [r.to_dict() for r in buf.log],
        }
    )


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def escalate(buf: Buffer) -> None:
    """An escalation record (the runtime's reader-age alarm writes these)."""
    buf.escalate(EscalationKind.READER_PINNED, "reader pinned too long", data={"ids": ["x"]})
