"""A checkpoint is a claim: what recovery checks before it applies one (issue 21).

What it keeps true: a checkpoint state that passes :func:`check_claims`
states nothing the engine could not have written of the protected content
(constraints, instructions, negative results, prohibitions — the
``PROTECTED_KINDS`` — and sealed, provider-signed entries), and every host
retraction it relies on is a real record of the log:

* no mark of an immutable entry and no staged removal of a protected or
  immutable one, unless the host's retraction record it names (the record
  publishing the mark's or the group's version) says so: an applied host
  edit with an override, retracting that id and, for a group, staging
  exactly that group;
* no listed tombstone of a protected entry unless the removal record
  publishing its version holds that tombstone and names it retracted;
* the immutable-bytes table names exactly the live immutable entries, with
  their content hashes;
* every live protected or sealed entry is named in the ledger
  (``state["protected"]``: ``[id, seq]``) with the seq of the record that
  wrote it, and that record holds the entry byte for byte (read back);
* the counters agree with what the checkpoint holds (``removed`` with the
  tombstones, no negative count), every version and key within range.

A failing claim raises :class:`LogFormatError`; recovery then falls back to
an older checkpoint or a full replay, as for a damaged one. Cost: O(live +
marks + groups + listed tombstones) in memory, plus one record read per
protected or sealed live entry and O(log records) reads (a bisection on
versions) per host retraction the checkpoint relies on: a few records,
whatever the log's length.

These checks are the second layer: recovery first requires the
checkpoint's anchor (checkpoint.py), which catches any change to a
checkpoint by whoever did not also write the record before it. What the
claims still catch is a lie told by someone who wrote both.

What it cannot catch (from someone who wrote the anchor too): a lie that
is consistent within the checkpoint and leaves no trace in the records it
reads — a protected entry dropped together with its ledger line (and its
immutable-table line), a dropped mark or staged removal of an ordinary
entry, rewritten counters other than ``removed``, the order of the window
(an entry's order key: a ``Move`` may change any key, so only a replay
knows which is right). Only a full replay
sees those: :func:`.verify.verify_records` (``quiesce verify``,
``Buffer.verify()``, ``verify=True`` on open).

The ledger is kept by the engine as it writes (:func:`.ledger.note_written`, a dict
of id -> seq for the live protected and sealed entries, a few dozen bytes
each), so building a checkpoint reads no record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .entry import Entry, Kind
from .errors import LogFormatError
from .ledger import guarded
from .log import check_read
from .policy import IMMUTABLE_KINDS, PROTECTED_KINDS
from .records import HOST_ACTOR, LogRecord

__all__ = ["check_claims", "protected_ledger", "record_of_version"]

#: ``read_range(start, stop)`` of a readable sink (``ReadableSink``)
Reader = Callable[[int, int], Sequence[LogRecord]]

#: records read at a time while looking for the record of a version
_WINDOW = 32

#: the kinds (as stored) whose entries recovery checks closely
_SPECIAL_KINDS = frozenset(k.value for k in PROTECTED_KINDS | IMMUTABLE_KINDS)
_IMMUTABLE_VALUES = frozenset(k.value for k in IMMUTABLE_KINDS)


def protected_ledger(at: Mapping[str, int], live: Iterable[str]) -> list[list[Any]]:
    """The checkpoint's ledger: ``[id, seq]`` of each live id noted in
    ``at``, sorted by id. O(live)."""
    return sorted([i, at[i]] for i in live if i in at)


def _fail(seq: int, message: str) -> LogFormatError:
    return LogFormatError(f"checkpoint {seq} claims {message}")


def record_of_version(read: Reader, version: int, before: int) -> LogRecord | None:
    """The record below seq ``before`` that published ``version``, or None.
    Versions grow with seqs (each record publishes at most one, the next),
    so a bisection finds it: O(log before) windows of :data:`_WINDOW` reads
    (more only where many records in a row publish none)."""
    lo, hi = max(version - 1, 0), before  # the record is in [lo, hi)
    while lo < hi:
        mid = (lo + hi) // 2
        probe: LogRecord | None = None
        start = mid
        while probe is None and start < hi:
            stop = min(start + _WINDOW, hi)
            for rec in check_read(read(start, stop), start, stop):
                if rec.version is not None:
                    probe = rec
                    break
            start = stop
        if probe is None:
            hi = mid  # nothing from mid on publishes a version
        elif probe.version == version:
            return probe
        elif type(probe.version) is not int:
            return None
        elif probe.version < version:
            lo = probe.seq + 1
        else:
            hi = mid
    return None


def _retraction(
    read: Reader, seq: int, version: object, what: str
) -> tuple[LogRecord, Mapping[str, Any]]:
    """The host edit record publishing ``version``: applied, the host's, with
    an override (edit.py: only such a plan retracts)."""
    if type(version) is not int or version <= 0:
        raise _fail(seq, f"{what} at version {version!r}")
    rec = record_of_version(read, version, seq)
    if rec is None:
        raise _fail(seq, f"{what} by a record of version {version} the log does not hold")
    det = rec.detail
    plan = det.get("plan")
    if not (
        rec.op == "edit"
        and rec.outcome == "applied"
        and rec.actor == HOST_ACTOR
        and isinstance(plan, dict)
        and plan.get("override") is not None
        and isinstance(det.get("retracted"), list)
    ):
        raise _fail(seq, f"{what}, but record {rec.seq} is no host retraction")
    return rec, det


def _written(rec: LogRecord, entry_id: str) -> dict[str, Any] | None:
    """The entry dict record ``rec`` wrote for ``entry_id``, if it did."""
    det = rec.detail
    if rec.op in ("append", "stream_close", "stream_abort"):  # (a sealed stream's close)
        d = det.get("entry")
        return d if isinstance(d, dict) and d.get("id") == entry_id else None
    if rec.op == "edit" and rec.outcome == "applied":
        for d in det.get("rewrites", ()):
            if isinstance(d, dict) and d.get("id") == entry_id:
                return d
        for ins in det.get("inserted", ()):
            d = ins.get("entry") if isinstance(ins, dict) else None
            if isinstance(d, dict) and d.get("id") == entry_id:
                return d
    return None


def check_claims(state: dict[str, Any], seq: int, read: Reader | None) -> None:
    """Check the claims of checkpoint ``state`` (record ``seq``, checksum
    already verified) against itself and, through ``read`` (the sink's
    ``read_range``), the few records it names; ``read`` None (a compacted
    log's base, whose history is elsewhere): a claim that needs a record is
    refused. Raises :class:`LogFormatError` naming the first false claim;
    changes nothing. Cost: see the module docstring."""
    try:
        _check(state, seq, read)
    except LogFormatError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise LogFormatError(f"checkpoint {seq} is malformed: {exc!r}") from exc


def _check(state: dict[str, Any], seq: int, read: Reader | None) -> None:
    version = state["version"]
    next_key = state["next_key"]
    held = seq
    base = state.get("compacted_from")
    if base is not None:
        # a compacted log's base (``quiesce compact``): the records it sums
        # up are in SRC, not here
        read = None
        held = base["records"]
    # each version has its record, except those of a stream's writes, which
    # its records count (stream.py)
    writes = dict(state.get("counts", ())).get("stream_writes", 0)
    if (
        type(version) is not int
        or type(held) is not int
        or type(writes) is not int
        or not 0 <= version <= held + writes
    ):
        raise _fail(seq, f"version {version!r} after {held!r} records")
    if type(next_key) not in (int, float):
        raise _fail(seq, f"next key {next_key!r}")
    # every live id with its kind; an Entry is built (its content hash
    # computed) only for what may be protected, immutable or sealed: the
    # rest is decoded once, by the restore
    kinds: dict[str, object] = {}
    live: dict[str, Entry] = {}
    special = _SPECIAL_KINDS
    keys: set[float] = set()
    for entry_d, key, changed in state["live"]:
        i = entry_d["id"]
        if i in kinds:
            raise _fail(seq, f"{i!r} live twice")
        if type(key) not in (int, float) or key in keys or not key < next_key:
            raise _fail(seq, f"order key {key!r} for {i!r}")
        if type(changed) is not int or not 0 < changed <= version:
            raise _fail(seq, f"{i!r} changed at version {changed!r}")
        keys.add(key)
        kind = entry_d["kind"]
        kinds[i] = kind
        if kind in special or isinstance(entry_d.get("content"), dict):
            e = Entry.from_dict(entry_d)
            if e.id != i:  # pragma: no cover - from_dict keeps the id
                raise _fail(seq, f"{i!r} decodes as {e.id!r}")
            live[i] = e
    marks: dict[str, list[Any]] = {}
    for m in state["marks"]:
        i, _reason, _turn, mv = m
        if i not in kinds or i in marks:
            raise _fail(seq, f"a mark of {i!r}, which is not live or marked twice")
        if type(mv) is not int or not 0 < mv <= version:
            raise _fail(seq, f"a mark of {i!r} at version {mv!r}")
        marks[i] = m
    immutable = {i: h for i, h in state["immutable"]}
    want = {i: e.content_hash for i, e in live.items() if e.kind in IMMUTABLE_KINDS}
    if immutable != want:
        bad = sorted(set(immutable.items()) ^ set(want.items()))[0][0]
        raise _fail(seq, f"immutable bytes of {bad!r} that the live entries do not hold")
    counts = {k: v for k, v in state["counts"]}
    refusals = {k: v for k, v in state["refusals"]}
    for name, v in [*counts.items(), *refusals.items()]:
        if type(v) is not int or v < 0:
            raise _fail(seq, f"counter {name!r} = {v!r}")
    index = state.get("tomb_index")
    n_tombs = index.get("n") if isinstance(index, dict) else len(state["tombstones"])
    if counts.get("removed", 0) != n_tombs:
        raise _fail(seq, f"{counts.get('removed', 0)} removals but holds {n_tombs} tombstones")
    # the host retractions: immutable marks, groups staging protected entries
    for i, m in marks.items():
        if kinds[i] in _IMMUTABLE_VALUES:
            if read is None:
                raise _fail(seq, f"a mark of immutable {i!r}: no record here vouches for it")
            rec, det = _retraction(read, seq, m[3], f"a mark of immutable {i!r}")
            if i not in det["retracted"] or [i, m[1], m[2]] not in det.get("marks", ()):
                raise _fail(seq, f"a mark of immutable {i!r} that record {rec.seq} does not make")
    gids: set[int] = set()
    for gid, ids, grace, staged, _reason, actor, _turn, retracted in state["groups"]:
        if type(gid) is not int or gid in gids:
            raise _fail(seq, f"staged group {gid!r} twice or not an int")
        gids.add(gid)
        for i in ids:
            if i not in marks:
                raise _fail(seq, f"staged {i!r} of group {gid}, which is not live and marked")
        for v in (grace, staged):
            if type(v) is not int or not 0 <= v <= version:
                raise _fail(seq, f"group {gid} at version {v!r}")
        need = {i for i in ids if kinds[i] in special}
        if not need <= set(retracted):
            raise _fail(seq, f"a staged removal of protected {sorted(need)[0]!r} (group {gid})")
        if retracted:
            if actor != HOST_ACTOR or not set(retracted) <= set(ids):
                raise _fail(seq, f"group {gid} retracts {retracted!r} without the host")
            if read is None:
                why = "no record here vouches for it"
                raise _fail(seq, f"group {gid} retracts {retracted!r}: {why}")
            rec, det = _retraction(read, seq, staged, f"group {gid} retracting {retracted!r}")
            entry = [gid, list(ids), grace, staged]
            if not set(retracted) <= set(det["retracted"]) or entry not in det.get("staged", ()):
                raise _fail(seq, f"group {gid}, which record {rec.seq} does not stage")
    if index is None:
        _check_tombstones(state["tombstones"], seq, read)
    _check_ledger(state, seq, read, live)


def _check_tombstones(tombs: list[Any], seq: int, read: Reader | None) -> None:
    """A listed tombstone of a protected kind: the host's, and the removal
    record publishing its version holds it and names it retracted."""
    protected = {k.value for k in PROTECTED_KINDS}
    for t in tombs:
        if t.get("kind") not in protected:
            continue
        i = t.get("id")
        if t.get("actor") != HOST_ACTOR:
            raise _fail(seq, f"a tombstone of protected {i!r} not written by the host")
        if read is None:
            raise _fail(seq, f"a tombstone of protected {i!r}: no record here vouches for it")
        v = t.get("version")
        rec = record_of_version(read, v, seq) if type(v) is int else None
        if (
            rec is None
            or rec.op != "remove"
            or t not in rec.detail.get("tombstones", ())
            or i not in rec.detail.get("retracted", ())
        ):
            raise _fail(seq, f"a tombstone of protected {i!r} no host retraction record holds")


def _check_ledger(
    state: dict[str, Any], seq: int, read: Reader | None, live: dict[str, Entry]
) -> None:
    """Every live protected or sealed entry named with the seq of the record
    that wrote it, and that record holding it byte for byte."""
    ledger = {i: s for i, s in state.get("protected", ())}
    want = {i for i, e in live.items() if guarded(e)}
    if set(ledger) != want:
        bad = sorted(set(ledger) ^ want)[0]
        raise _fail(seq, f"a protected-entry ledger that disagrees with the live {bad!r}")
    if not want or read is None:
        # a compacted log's base: its live entries are what ``quiesce compact``
        # verified in SRC, whose records stay there
        return
    kinds = {k.value: k for k in Kind}
    for i, s in ledger.items():
        if type(s) is not int or not 0 <= s < seq:
            raise _fail(seq, f"protected {i!r} written by record {s!r}")
    for i, rec in _read_all(read, ledger, want):
        s = ledger[i]
        written = _written(rec, i)
        if written is None or written != live[i].to_dict() or written.get("kind") not in kinds:
            raise _fail(seq, f"protected {i!r} as record {s} did not write it")


#: ledger records closer than this are read in one range (fewer round trips)
_GAP = 32


def _read_all(
    read: Reader, ledger: Mapping[str, int], ids: Iterable[str]
) -> Iterable[tuple[str, LogRecord]]:
    """``(id, the record the ledger names for it)``, in seq order; records
    within :data:`_GAP` of each other are read in one ``read_range``.
    O(ids + records read)."""
    order = sorted(ids, key=lambda i: ledger[i])
    k = 0
    while k < len(order):
        start = last = ledger[order[k]]
        end = k + 1
        while end < len(order) and ledger[order[end]] - last <= _GAP:
            last = ledger[order[end]]
            end += 1
        got = check_read(read(start, last + 1), start, last + 1)
        for i in order[k:end]:
            yield i, got[ledger[i] - start]
        k = end
