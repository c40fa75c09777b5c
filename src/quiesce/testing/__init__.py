"""Record a history of a buffer's use and check it for anomalies.

Proof by trying to break it (FoundationDB's deterministic simulation, Jepsen's
Elle): drive a buffer hard, record everything that happened, then check the
*whole history* against the seven invariants of docs/design.md and name
every anomaly with the vocabulary of Adya's isolation levels.

* :class:`Recorder` wraps a :class:`~quiesce.Buffer` (or the runtime's
  :class:`~quiesce.RuntimeBuffer`). Use its methods instead of the buffer's:
  each call is recorded with its arguments, result or exception, the head
  version before and after, and the task that made it. ``recorder.snapshot()``
  records the version a reader pinned and what it read at entry, at exit and
  in between. Every version the buffer publishes is captured as it is
  published — from a call, from the barrier scheduler, from an unpin or from a
  worker thread — by intercepting the buffer's head pointer. Versions are
  immutable, so keeping a reference to each costs nothing but memory.
* :func:`check_history` returns a list of :class:`Anomaly` (empty: the history
  is consistent).
* :func:`preloaded` builds a buffer already holding many entries, as one
  version and without log records (a 1e6-entry buffer in a second, for
  benchmarks and tests that measure or exercise the operations after it).

Anomaly kinds (:class:`AnomalyKind`; an :class:`Anomaly`'s ``kind`` compares
equal to the plain string):

``G1a`` (aborted read)
    a refused or failed (raised, cancelled) edit's effect is visible: it
    published a version, or its rewritten or summary content appears.
``G1b`` (intermediate read)
    a snapshot saw part of a batch: it pinned a version that no complete
    operation published (no log record), or its reads mix the states before
    and after one published version; or an applied edit's version lacks
    some of its writes (the batch was split).
``G-single`` (read skew)
    two versions mixed in one snapshot: a read that is not its pinned version.
``garbage-read``
    a removed entry's bytes read from a version that no longer holds them.
``early-removal``
    a removal before its grace point (invariant 5): a reader that pinned the
    entry unmarked was still pinned when the removal was published.
``lost-mark``
    a mark vanished or changed while its entry stayed live (marks are monotone
    and the first mark stands).
``protected-removed`` / ``immutable-changed``
    invariant 4. The one removal of a protected entry it accepts is the
    host's retraction: an applied edit by actor ``"host"`` with an override
    listing the id under ``retracted``, the removal record of that version
    listing it again, and a tombstone whose actor is ``"host"``.
``dangling-reference``
    a live entry cites a removed one (invariant 2).
``missing-tombstone`` / ``log-mismatch`` / ``log-rewritten``
    invariant 3: a removal without exactly one tombstone and one log record,
    a published version with no record, a log that lost or changed a record.
``undurable-removal``
    a removal published before its tombstone was durable in the sink.
``refused-change``
    invariant 6: a refused prune did more than mark.
``pin-leak``
    invariant 7.
``version-order``
    version numbers not strictly increasing.
``seq-gap`` / ``epoch-regression`` / ``lost-flush``
    the cross-process checks of :func:`check_shared_history` (one buffer
    shared by many processes): a shared log whose ``seq`` skips or repeats a
    number, a record of an old writer epoch after a newer epoch's first, and
    a ``flush()`` that returned in some member although what it made durable
    is not in the log.
``stale-snapshot``
    a snapshot pinned an older version than the head published before it
    was entered (a snapshot pins *the head*).
``lost-update``
    an applied edit with a ``base`` overwrote an entry changed after that
    base (the optimistic check let a stale plan through).
``silent-readmission``
    content whose hash or key matches a tombstone was appended or written
    back without an ``Override`` (seed 002's prune/re-admit oscillation).

The checker is deliberately independent of the core's own ``_check()``: it
recomputes everything from the recorded versions, so a bug in the core's
bookkeeping cannot hide a bug in its behaviour. Cost: O(versions · entries +
snapshots · removals) — meant for many small histories, not one huge one.

A buffer shared by many processes (``open_shared_buffer``) is checked with
:func:`check_shared_history`: the shared log merged by ``seq``, replayed
version by version into one history that must pass :func:`check_history`,
plus each member's :class:`MemberReport` (its readers, the flushes that
returned, when it lost its lease) for the cross-process checks.

Modules (every public name is importable from ``quiesce.testing`` itself):
:mod:`.events` (the history's data and the anomaly names), :mod:`.recorder`
(:class:`Recorder`), :mod:`.checker` (:func:`check_history`),
:mod:`.shared` (:func:`check_shared_history` and the members' reports),
:mod:`.fixtures` (:func:`preloaded`).

It imports no event loop and no test framework; users may record and
check their own workloads::

    async with open_buffer() as buf:
        rec = Recorder(buf)
        ...  # tasks call rec.append / rec.prune / rec.edit / rec.snapshot()
    assert check_history(rec.history()) == []
"""

from __future__ import annotations

from .checker import check_history as check_history
from .events import Anomaly as Anomaly
from .events import AnomalyKind as AnomalyKind
from .events import History as History
from .events import OpEvent as OpEvent
from .events import Publication as Publication
from .events import Read as Read
from .events import SnapshotEvent as SnapshotEvent
from .fixtures import preloaded as preloaded
from .recorder import RecordedSnapshot as RecordedSnapshot
from .recorder import Recorder as Recorder
from .shared import MemberPin as MemberPin
from .shared import MemberReport as MemberReport
from .shared import check_shared_history as check_shared_history

__all__ = [
    "Anomaly",
    "AnomalyKind",
    "History",
    "MemberPin",
    "MemberReport",
    "OpEvent",
    "Publication",
    "Read",
    "RecordedSnapshot",
    "Recorder",
    "SnapshotEvent",
    "check_history",
    "check_shared_history",
    "preloaded",
]
