"""``quiesce view LOG -o report.html``: a log's history as one page for a person.

What it keeps true:

* **One self-contained file.** The page holds its data, style and script
  inline: no server, no network, no external script or font, nothing fetched
  (a ``Content-Security-Policy`` meta tag forbids it). It opens from disk in
  any browser.
* **Constant memory in the log's length.** The records are streamed once, a
  page at a time (the same readers as ``quiesce inspect``: SQLite, JSONL,
  PostgreSQL). What is held is the window's live entries and staged removals
  (bounded by the buffer's own bounded memory), a fixed number of timeline
  buckets and a bounded table of entry histories — never the records.
* **Untrusted text stays text.** A log is untrusted input: the data is
  embedded as ASCII JSON with ``<``, ``>`` and ``&`` escaped, so no id or
  reason can close the script element, and the script puts every string into
  the page with ``textContent``, never as markup.

The timeline. Versions are grouped into at most ``2 * buckets`` columns: it
starts one version a column and, whenever the columns overflow, merges
neighbours pairwise (each column then spans twice as many versions), so a
log of any length gives a few hundred columns and the page stays quick to
draw (a 1e6-record log renders like a short one). Each column shows the live
window at its end by kind, and what happened in it: appends, marks,
removals, refusals, escalations and checkpoints.

Provenance. For the ``max_entries`` entries touched most recently (an LRU;
the count of the others is shown), the page keeps each entry's events:
appended (and re-admitted with an override), marked stale, a removal
deferred to its grace point, held back by a pinned reader (a
``READER_PINNED`` escalation naming the task, for every staged removal whose
grace point lies past the reader's version), rewritten, moved, summarized,
pruned (by whom, why, at which turn), refused (prune, edit, re-admission,
removal at the grace point). At most ``_EVENTS`` events an entry: the first
one and the newest.

Bad input: a log the page cannot read gives the same :class:`LogFormatError`
as ``inspect``, one line on stderr and exit status 1; nothing is written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from .._core.errors import LogFormatError, LogWriteError
from .._core.records import EscalationKind, LogRecord
from .._core.wire import parse_append, parse_escalate, parse_refuse, parse_remove

__all__ = ["History", "main", "read_history", "render_html"]

#: Events kept per entry: its first one and the newest.
_EVENTS = 40


@dataclass
class _Column:
    """One timeline column: versions ``v0`` .. ``v1``, what happened in them,
    and the window by kind at its end."""

    v0: int
    v1: int
    seq0: int
    seq1: int
    t1: float
    counts: dict[str, int] = field(default_factory=dict)
    window: dict[str, int] = field(default_factory=dict)
    marked: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "v0": self.v0,
            "v1": self.v1,
            "seq0": self.seq0,
            "seq1": self.seq1,
            "t": self.t1,
            "counts": self.counts,
            "window": self.window,
            "marked": self.marked,
        }


@dataclass
class _Entry:
    kind: str
    state: str = "live"
    first: list[Any] | None = None
    events: deque[list[Any]] = field(default_factory=lambda: deque(maxlen=_EVENTS - 1))


@dataclass
class History:
    """What the page shows of one log (see the module docstring)."""

    source: str
    kind: str
    records: int = 0
    head: int = 0
    first_time: float | None = None
    last_time: float | None = None
    width: int = 1
    columns: list[_Column] = field(default_factory=list)
    entries: OrderedDict[str, _Entry] = field(default_factory=OrderedDict)
    forgotten: int = 0  #: entries that entered the window but are not kept here
    totals: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        entries = []
        for eid, e in self.entries.items():
            events = ([e.first] if e.first is not None else []) + list(e.events)
            entries.append({"id": eid, "kind": e.kind, "state": e.state, "events": events})
        return {
            "source": self.source,
            "kind": self.kind,
            "records": self.records,
            "head": self.head,
            "first_time": self.first_time,
            "last_time": self.last_time,
            "versions_per_column": self.width,
            "columns": [c.to_json() for c in self.columns],
            "entries": entries,
            "forgotten": self.forgotten,
            "totals": self.totals,
        }


class _Reader:
    """Folds records, in ``seq`` order, into a :class:`History`.

    O(1) amortized per record plus O(ids it names); memory is the live
    window, the staged removals, ``2 * buckets`` columns and ``max_entries``
    entry histories."""

    def __init__(self, history: History, buckets: int, max_entries: int) -> None:
        self.h = history
        self.buckets = max(1, buckets)
        self.max_entries = max(1, max_entries)
        self.live: dict[str, str] = {}
        self.marked: set[str] = set()
        self.staged: dict[str, int] = {}
        self.window: dict[str, int] = {}
        self.seen = 0

    # -- entries -----------------------------------------------------------

    def _entry(self, eid: str, kind: str | None = None) -> _Entry:
        entries = self.h.entries
        e = entries.get(eid)
        if e is None:
            e = entries[eid] = _Entry(kind or self.live.get(eid, "?"))
            if len(entries) > self.max_entries:
                entries.popitem(last=False)
        else:
            entries.move_to_end(eid)
            if kind is not None:
                e.kind = kind
        return e

    def _event(
        self, rec: LogRecord, eid: str, what: str, text: str, kind: str | None = None
    ) -> None:
        e = self._entry(eid, kind)
        if what in ("appended", "readmitted"):
            e.state = "live"
        ev = [rec.seq, rec.version, rec.time, what, text]
        if e.first is None:
            e.first = ev
        else:
            e.events.append(ev)

    # -- the window ----------------------------------------------------------

    def _add(self, eid: str, kind: str) -> None:
        old = self.live.get(eid)
        if old is not None:
            self._count_window(old, -1)
        else:
            self.seen += 1  # an id enters the window once: ids are never reused
        self.live[eid] = kind
        self._count_window(kind, 1)

    def _drop(self, eid: str) -> None:
        kind = self.live.pop(eid, None)
        if kind is not None:
            self._count_window(kind, -1)
        self.marked.discard(eid)
        self.staged.pop(eid, None)

    def _count_window(self, kind: str, by: int) -> None:
        n = self.window.get(kind, 0) + by
        if n:
            self.window[kind] = n
        else:
            self.window.pop(kind, None)

    # -- the timeline --------------------------------------------------------

    def _column(self, rec: LogRecord) -> _Column:
        cols = self.h.columns
        v = rec.version if rec.version is not None else self.h.head
        if cols and v < cols[-1].v0 + self.h.width:
            col = cols[-1]
        else:
            start = v - v % self.h.width
            col = _Column(start, start, rec.seq, rec.seq, rec.time)
            cols.append(col)
            if len(cols) > 2 * self.buckets:
                self._merge()
                col = cols[-1]
        col.v1 = max(col.v1, v)
        col.seq1 = rec.seq
        col.t1 = rec.time
        return col

    def _merge(self) -> None:
        """Halve the columns: each now spans twice the versions."""
        self.h.width *= 2
        merged: list[_Column] = []
        for col in self.h.columns:
            start = col.v0 - col.v0 % self.h.width
            if merged and merged[-1].v0 == start:
                last = merged[-1]
                last.v1, last.seq1, last.t1 = col.v1, col.seq1, col.t1
                last.window, last.marked = col.window, col.marked
                for k, n in col.counts.items():
                    last.counts[k] = last.counts.get(k, 0) + n
            else:
                col.v0 = start
                merged.append(col)
        self.h.columns = merged

    def _tally(self, col: _Column, what: str, n: int = 1) -> None:
        if n:
            col.counts[what] = col.counts.get(what, 0) + n
            self.h.totals[what] = self.h.totals.get(what, 0) + n

    # -- records -------------------------------------------------------------

    def feed(self, rec: LogRecord) -> None:
        h = self.h
        h.records += 1
        if h.first_time is None:
            h.first_time = rec.time
        h.last_time = rec.time
        if rec.version is not None:
            h.head = max(h.head, rec.version)
        col = self._column(rec)
        handler = getattr(self, "_on_" + rec.op, None)
        if handler is not None:
            try:
                handler(rec, col)
            except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
                raise LogFormatError(
                    f"log record {rec.seq} ({rec.op}): cannot be read for the page: {exc!r}"
                ) from None
        col.window = dict(self.window)
        col.marked = len(self.marked)

    def _on_append(self, rec: LogRecord, col: _Column) -> None:
        if rec.version is None:
            return
        append = parse_append(rec)
        eid, kind = append.entry.id, append.entry.kind.value
        self._add(eid, kind)
        self._tally(col, "appended")
        override = append.override
        refs = list(append.entry.refs) or None
        text = _join(("turn", rec.turn), ("actor", rec.actor), ("refs", refs))
        if override:
            self._tally(col, "readmitted")
            why = override.get("reason") if isinstance(override, Mapping) else override
            self._event(
                rec, eid, "readmitted", f"re-admitted with an override: {why}. {text}", kind
            )
        else:
            self._event(rec, eid, "appended", text, kind)

    def _on_mark(self, rec: LogRecord, col: _Column) -> None:
        if rec.version is None:
            return
        for eid in rec.ids:
            self.marked.add(eid)
            self._tally(col, "marked")
            self._event(rec, eid, "marked", _join(("reason", rec.reason), ("turn", rec.turn)))

    def _staged(self, rec: LogRecord, col: _Column, staged: Iterable[Sequence[Any]]) -> None:
        for _gid, ids, grace, _at in staged:
            for eid in ids:
                self.staged[str(eid)] = int(grace)
                self._tally(col, "deferred")
                self._event(
                    rec,
                    str(eid),
                    "deferred",
                    f"removal staged; due when no reader pinned below version {grace} remains. "
                    + _join(("reason", rec.reason), ("actor", rec.actor), ("turn", rec.turn)),
                )

    def _marks(self, rec: LogRecord, col: _Column, marks: Iterable[Sequence[Any]]) -> None:
        for item in marks:
            eid, reason = str(item[0]), item[1]
            self.marked.add(eid)
            self._tally(col, "marked")
            self._event(rec, eid, "marked", _join(("reason", reason), ("turn", rec.turn)))

    def _on_prune(self, rec: LogRecord, col: _Column) -> None:
        detail = rec.detail
        outcomes = detail.get("outcomes") or {}
        for eid, (status, refusal) in outcomes.items():
            if refusal is not None:
                self._tally(col, "refused")
                self._event(
                    rec,
                    str(eid),
                    "refused",
                    f"prune refused ({refusal}), {status} instead. "
                    + _join(("reason", rec.reason), ("actor", rec.actor)),
                )
        self._marks(rec, col, detail.get("marks") or ())
        self._staged(rec, col, detail.get("staged") or ())

    def _on_edit(self, rec: LogRecord, col: _Column) -> None:
        detail = rec.detail
        if rec.version is None:
            why = "; ".join(str(w) for w in detail.get("why") or ()) or "refused"
            self._tally(col, "refused")
            if detail.get("escalation"):
                self._tally(col, "escalations")  # a refused edit is escalated in its record
            for eid in rec.ids:
                self._event(
                    rec,
                    eid,
                    "refused",
                    f"edit refused and escalated: {why}. "
                    + _join(("reason", rec.reason), ("actor", rec.actor)),
                )
            return
        plan = detail.get("plan") or {}
        for op in plan.get("ops") or ():
            name = op.get("op")
            if name == "rewrite":
                self._event(
                    rec,
                    str(op["id"]),
                    "rewritten",
                    _join(("reason", rec.reason), ("actor", rec.actor)),
                )
            elif name == "move":
                where = op.get("before")
                place = f"before {where}" if where is not None else "to the end"
                self._event(
                    rec, str(op["id"]), "moved", f"moved {place}. " + _join(("actor", rec.actor))
                )
            elif name == "summarize":
                into = (op.get("into") or {}).get("id")
                for eid in op.get("ids") or ():
                    self._event(
                        rec,
                        str(eid),
                        "summarized",
                        f"summarized into {into}. " + _join(("actor", rec.actor)),
                    )
        for d in detail.get("inserted") or ():
            ent = d["entry"]
            eid, kind = str(ent["id"]), str(ent["kind"])
            self._add(eid, kind)
            self._tally(col, "appended")
            self._event(
                rec,
                eid,
                "appended",
                "inserted by an edit. " + _join(("reason", rec.reason), ("actor", rec.actor)),
                kind,
            )
        self._marks(rec, col, detail.get("marks") or ())
        self._staged(rec, col, detail.get("staged") or ())

    def _on_remove(self, rec: LogRecord, col: _Column) -> None:
        removal = parse_remove(rec)
        for t in removal.tombstones:
            eid = t.id
            self._drop(eid)
            self._tally(col, "removed")
            e = self._entry(eid, t.kind.value if t.kind else self.live.get(eid, "?"))
            e.state = "pruned"
            self._event(
                rec,
                eid,
                "pruned",
                f"pruned: tombstone {t.content_hash}. "
                + _join(("by", t.actor), ("reason", t.reason), ("turn", t.turn)),
            )
        for eid, why in removal.refused.items():
            self.staged.pop(str(eid), None)
            self._tally(col, "refused")
            self._event(
                rec, str(eid), "refused", f"removal refused at its grace point ({why}): kept"
            )

    def _on_refuse(self, rec: LogRecord, col: _Column) -> None:
        self._tally(col, "refused")
        tomb = parse_refuse(rec).tombstone
        for eid in rec.ids:
            self._event(
                rec,
                eid,
                "refused",
                f"{rec.outcome} refused"
                + f": matches the tombstone of {tomb.id}"
                + ". "
                + _join(("reason", rec.reason)),
            )

    def _on_escalate(self, rec: LogRecord, col: _Column) -> None:
        self._tally(col, "escalations")
        escalation = parse_escalate(rec)
        data = escalation.data
        if escalation.kind == EscalationKind.READER_PINNED.value:
            pinned = int(data.get("version", 0))
            task = data.get("task")
            age = data.get("age")
            for eid, grace in list(self.staged.items()):
                if grace > pinned:
                    self._event(
                        rec,
                        eid,
                        "held back",
                        f"removal held back by reader {task!r}, pinned at version {pinned}"
                        + (f" for {float(age):.1f} s" if isinstance(age, (int, float)) else ""),
                    )

    def _on_checkpoint(self, rec: LogRecord, col: _Column) -> None:
        self._tally(col, "checkpoints")
        if rec.seq != 0 or self.live:
            return
        state = rec.detail.get("state") or {}
        for entry_d, _key, _changed in state.get("live") or ():  # a compacted log's start
            self._add(str(entry_d["id"]), str(entry_d["kind"]))
        for item in state.get("marks") or ():
            self.marked.add(str(item[0]))


def _join(*pairs: tuple[str, object]) -> str:
    return ", ".join(f"{k} {v}" for k, v in pairs if v is not None and v != "")


def read_history(path: str, *, buckets: int = 200, max_entries: int = 2_000) -> History:
    """Stream the log at ``path`` (a SQLite or JSONL file, or a
    ``postgresql://`` URI) into a :class:`History`. Raises
    :class:`LogFormatError` for a log that cannot be read, like ``inspect``;
    :class:`LogWriteError` for a PostgreSQL server that cannot be reached."""
    from .inspect import _open  # the same readers as inspect, chosen by content

    kind, _fmt, _torn, stream = _open(path)
    history = History(source=path, kind=kind)
    reader = _Reader(history, buckets, max_entries)
    for rec in stream():
        reader.feed(rec)
    history.forgotten = max(0, reader.seen - len(history.entries))
    for eid, e in history.entries.items():
        if e.state == "live" and eid in reader.staged:
            e.state = "staged"
        elif e.state == "live" and eid in reader.marked:
            e.state = "marked"
        elif e.state == "live" and eid not in reader.live:
            e.state = "gone"
    return history


def _script_json(value: object) -> str:
    """JSON safe inside a ``<script>`` element: ASCII, and no ``<``, ``>`` or
    ``&`` that could end the element or start a comment."""
    text = json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_html(history: History) -> str:
    """The page for ``history``: one HTML document, everything inline (the
    template is ``view.html`` beside this module; the data replaces its one
    ``/*DATA*/null`` placeholder)."""
    template = resources.files(__package__).joinpath("view.html").read_text(encoding="ascii")
    return template.replace("/*DATA*/null", _script_json(history.to_json()), 1)


def main(argv: Sequence[str] | None = None) -> int:
    """``quiesce view LOG [-o report.html]``; exit status 0, or 1 (one line on
    stderr) for a log that cannot be read or a page that cannot be written."""
    parser = argparse.ArgumentParser(
        prog="quiesce view",
        description="Write one self-contained HTML page showing a log's history: "
        "the window over versions, marks, removals, refusals, escalations and "
        "checkpoints, and each entry's provenance.",
    )
    parser.add_argument("log", help="a SQLite or JSONL log file, or a postgresql:// URI")
    parser.add_argument("-o", "--output", default="report.html", help="the page to write")
    parser.add_argument(
        "--columns", type=int, default=200, help="timeline columns, about (default 200)"
    )
    parser.add_argument(
        "--entries",
        type=int,
        default=2_000,
        help="entries whose history the page keeps, the most recently touched (default 2000)",
    )
    args = parser.parse_args(argv)
    if args.columns < 1 or args.entries < 1:
        parser.error("--columns and --entries must be at least 1")
    try:
        history = read_history(args.log, buckets=args.columns, max_entries=args.entries)
    except (LogFormatError, LogWriteError, OSError) as exc:
        print(f"quiesce view: {exc}", file=sys.stderr)
        return 1
    page = render_html(history)
    out = os.path.abspath(args.output)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".quiesce-view-", dir=os.path.dirname(out))
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(page)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, out)
    except OSError as exc:
        print(f"quiesce view: cannot write {args.output}: {exc}", file=sys.stderr)
        return 1
    print(
        f"wrote {args.output}: {history.records} records, versions 0-{history.head}, "
        f"{len(history.columns)} columns, {len(history.entries)} entries"
    )
    return 0
