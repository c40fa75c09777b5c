"""Open entries: a message appended while it streams (issue 24).

What it keeps true:

* **Whole, fixed prefixes.** Every version holds an immutable
  :class:`OpenEntry` for each open stream, naming a prefix of the stream's
  text (a count of chunks and characters); a reader pinned at any version
  sees the same prefix for its whole pin, and prefixes only grow.
* **Versions share the prefix.** The text of a stream is one append-only
  chunk store (:class:`_Text`), shared by every version of the entry: new
  chunks go to a short tail list, and every :data:`TAIL` chunks the tail is
  joined into one block and a *new* tail list is started, so the lists an
  older version names never change under it. A write copies no text; the
  body of a version is joined on first read and cached on that version's
  entry (the reader pays O(len), once).
* **The fast path.** :meth:`StreamWriter.write` is sync and does what
  ``mark_stale`` does: argument checks, the write lock (held by writers
  only, never by a reader, never over a disk), one persistent-map ``set``, a
  new :class:`~.version.Version`. O(1) amortized plus that, independent of
  the text's length (the tail join every :data:`TAIL` writes is O(those
  chunks)). Successive writes fold into one ``REPLACE`` view delta
  (:mod:`.version`), so a run of writes never lengthens a version chain.
  Everything O(len(body)) — the content hash, the UTF-8 check of the whole
  body, the classifier — happens at close (:meth:`StreamWriter.close`).
* **Nothing applies to an open entry.** A prune of an open entry is refused
  (``UNCHANGED``, ``CONFLICT``: nothing is marked or staged), and an edit
  plan touching one is refused as a whole (``CONFLICT``, escalated); retry
  after the close. Marking an open entry is allowed (a fast annotation).
  Streams are never of a protected kind (appended whole: a protected
  entry's bytes are checked against the one record that wrote them) nor
  tool calls (a call is appended whole, once its arguments are complete).
  A stream closed with sealed content (a signed thinking block) has its
  close record carry the whole entry, for the same check.
* **Durable, coalesced.** The log gets ``stream_open`` at open, one
  ``stream_text`` per flush for the text that arrived since the last record
  (:meth:`Streams.log_streams`, called by ``flush``), and ``stream_close``
  or ``stream_abort`` with the remaining text. Writes publish versions
  without records of their own, so a log's versions may skip while a
  stream is open (replay allows it then, and only then). Recovery of a log
  that ends mid-stream gives the durable prefix as an aborted entry, marked
  stale with a reason saying so (and logged as a ``stream_abort``).

Cancellation: a write, close or abort is sync and all or nothing; ``with
buf.open_stream(...) as w:`` aborts on any exception, cancellation included
(``__exit__`` is sync: cancellation cannot skip it).

Prior art: ropes and piece tables (an append-only store, views as lengths),
RCU (readers on immutable versions), h11 (the writer is a small state
machine: open -> closed | aborted).
"""

from __future__ import annotations

import time
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, Self

from .entry import Entry, Kind, check_text, check_utf8, content_hash, freeze
from .errors import (
    InvalidArgument,
    InvalidType,
    ReadmissionRefused,
    StreamClosed,
    dangling_ref,
    duplicate_id,
)
from .pins import PinRegistry
from .plan import PruneOptions
from .policy import _CACHE_FROM as _CLASSIFY_FROM
from .policy import PROTECTED_KINDS, preclassify
from .publish import Publisher
from .records import Mark, Refusal
from .state import BufferState
from .version import ADD, EMPTY_MAP, MAX_CHAIN, PATCH_MAX, REPLACE, Slot, Version
from .wire import stream_finish_record, stream_open_record, stream_text_record

__all__ = ["TAIL", "OpenEntry", "PruneOptions", "StreamWriter", "Streams"]

#: Chunks a stream's tail holds before they are joined into one block.
TAIL = 16

_new_object = object.__new__
_new_tuple: Any = tuple.__new__
_set = object.__setattr__
_wall_clock = time.time

# The slots of Entry that OpenEntry fills itself (Entry.__init__ is never run
# for an open entry: it would hash and check the whole body).
_ENTRY_SLOTS = {name: Entry.__dict__[name] for name in ("body", "content_hash")}
_BODY = _ENTRY_SLOTS["body"]
_HASH = _ENTRY_SLOTS["content_hash"]

#: kinds a stream may not have (see the module docstring)
_REFUSED_KINDS = PROTECTED_KINDS | {Kind.TOOL_CALL}


class _Text:
    """The append-only text of one stream, shared by every version of it.

    ``blocks`` only grows (joined tails); ``ends[i]`` is the text length
    through ``blocks[i]``; ``tail`` is the current tail list (replaced, never
    cleared, when it is joined); ``size`` the whole length. Mutated by the
    stream's writer under the buffer's write lock; readers only slice
    (atomic under the GIL)."""

    __slots__ = ("blocks", "ends", "size", "tail")

    def __init__(self, text: str = "") -> None:
        self.blocks: list[str] = [text] if text else []
        self.ends: list[int] = [len(text)] if text else []
        self.tail: list[str] = []
        self.size = len(text)

    def add(self, chunk: str) -> None:
        """Append ``chunk`` (non-empty). Amortized O(len(chunk))."""
        tail = self.tail
        tail.append(chunk)
        self.size += len(chunk)
        if len(tail) >= TAIL:
            block = "".join(tail)
            self.blocks.append(block)
            self.ends.append(self.size)
            self.tail = []

    def joined(self) -> str:
        """All of the text. O(len)."""
        return "".join(self.blocks) + "".join(self.tail)

    def since(self, start: int) -> str:
        """The text from character ``start`` on. O(its length + one block)."""
        ends = self.ends
        base = ends[-1] if ends else 0
        if start >= base:
            return "".join(self.tail)[start - base :]
        b = bisect_right(ends, start)
        first = ends[b - 1] if b else 0
        return ("".join(self.blocks[b:]) + "".join(self.tail))[start - first :]


class OpenEntry(Entry):
    """An entry still being written: what a version holds for an open stream.

    An :class:`~quiesce.Entry` in every way a reader uses (``id``, ``kind``,
    ``refs``, ``turn``, ``key``, ``meta``, ``body``, ``content_hash``), with
    :attr:`streaming` True. Its ``body`` is the prefix of the stream's text
    that had arrived by its version: joined from the shared chunk store on
    first read, O(len), and cached; ``content_hash`` is computed on first
    read too. Never appended (``append`` takes a plain ``Entry``)."""

    __slots__ = ("_h", "_p")

    # The write fast path sets these two slots only (each store through
    # object.__setattr__ costs about as much as a persistent-map step, and
    # Entry's seven would be most of a write): ``_h`` is the stream's header
    # (a plain Entry with its id, kind, refs, turn, key and meta, shared by
    # every version of the stream) and ``_p`` the prefix, ``(text, blocks,
    # tail, tail count, characters)``. Entry's own field slots stay unset;
    # the properties below read the header instead.
    _h: Entry
    _p: tuple[_Text, int, list[str], int, int]

    @property
    def id(self) -> str:
        return self._h.id

    @property
    def kind(self) -> Kind:
        return self._h.kind

    @property
    def refs(self) -> tuple[str, ...]:
        return self._h.refs

    @property
    def turn(self) -> int | None:
        return self._h.turn

    @property
    def key(self) -> str | None:
        return self._h.key

    @property
    def meta(self) -> Mapping[str, Any]:
        return self._h.meta

    @property
    def content(self) -> Any:
        return None  # (an open entry's structured form is given at its close)

    @property
    def _chars(self) -> int:
        """The prefix's length in characters."""
        return self._p[4]

    @property
    def body(self) -> str:
        try:
            return _BODY.__get__(self)  # type: ignore[no-any-return]
        except AttributeError:
            text, nb, tail, nt, _ = self._p
            parts = text.blocks[:nb] if nb else []
            if nt:
                parts += tail[:nt]
            body = "".join(parts)
            _BODY.__set__(self, body)
            return body

    @property
    def content_hash(self) -> str:
        try:
            return _HASH.__get__(self)  # type: ignore[no-any-return]
        except AttributeError:
            h = content_hash(self.body)
            _HASH.__set__(self, h)
            return h

    @property
    def streaming(self) -> bool:
        return True

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["streaming"] = True
        return out


def _open_entry(header: Entry, text: _Text) -> OpenEntry:
    """The :class:`OpenEntry` of ``text`` as it is now, with ``header``'s
    fields. O(1): two slot stores (see :class:`OpenEntry`)."""
    e: OpenEntry = _new_object(OpenEntry)
    _SET_HEADER(e, header)
    tail = text.tail
    size = text.size
    _SET_PREFIX(e, (text, len(text.blocks), tail, len(tail), size))
    if not size:
        _BODY.__set__(e, "")
    return e


_SET_HEADER = OpenEntry.__dict__["_h"].__set__
_SET_PREFIX = OpenEntry.__dict__["_p"].__set__


_OPEN, _CLOSED, _ABORTED = "open", "closed", "aborted"


class StreamWriter:
    """The writing end of an open entry (:meth:`Buffer.open_stream`).

    :meth:`write` appends text and publishes a version (sync; the
    ``mark_stale`` fast-path contract); :meth:`close` finishes the entry,
    :meth:`abort` finishes it as interrupted (it stays, marked stale with the
    reason). Used as a context manager it closes on normal exit and aborts on
    an exception or cancellation (the reason names the exception type).
    After close or abort every further call raises :class:`StreamClosed`.
    One writer per stream; it may be called from any thread (each call takes
    the buffer's write lock)."""

    __slots__ = ("_header", "_key", "_logged", "_part", "_state", "_text", "_writes", "id")

    id: str
    _part: Streams  #: the buffer's streams part (never the buffer: no cycle through it)
    _header: Entry  #: the entry's fields, body ""
    _key: float  #: its order key (constant while open)
    _text: _Text
    _logged: int  #: characters of the text covered by log records
    _writes: int  #: versions its writes published since its last record
    _state: str

    def __repr__(self) -> str:
        return f"<StreamWriter {self.id!r} {self._state}, {self._text.size} chars>"

    @property
    def closed(self) -> bool:
        """True once closed or aborted."""
        return self._state is not _OPEN

    @property
    def text(self) -> str:
        """All the text written so far. O(len)."""
        return self._text.joined()

    @property
    def aborted(self) -> bool:
        """True once aborted (by :meth:`abort`, the ``with`` block, or recovery)."""
        return self._state is _ABORTED

    def write(self, text: str) -> int:
        """Append ``text`` and publish a version; returns its number (an
        empty ``text`` publishes nothing and returns the head version).

        Sync; never waits for readers, a lock held by a reader, or a disk.
        O(1) amortized plus one persistent-map ``set`` (what ``mark_stale``
        costs), independent of the text's length; O(len(text)) for a
        non-ASCII chunk (the UTF-8 check). Raises :class:`InvalidType` for a
        non-``str``, :class:`InvalidArgument` for a lone surrogate,
        :class:`StreamClosed` after close or abort; each changes nothing."""
        if type(text) is not str:
            raise InvalidType(
                f"stream {self.id!r}: a chunk must be a str, not {type(text).__name__}"
            )
        if not text.isascii():
            check_utf8(text, f"a chunk of stream {self.id!r}")
        part = self._part
        st = part._st
        lock = st.write_lock
        lock.acquire()
        try:
            if self._state is not _OPEN:
                raise StreamClosed(f"stream {self.id!r} is {self._state}: it takes no more text")
            head = st.head
            if not text:
                return head.number
            store = self._text
            store.add(text)
            self._writes += 1
            entry = _open_entry(self._header, store)
            n = head.number + 1
            key = self._key
            new: Version = _new_object(Version)
            new.number = n
            new.live = head.live.set(self.id, _new_tuple(Slot, (entry, key, n)))
            new.marks = head.marks
            new.tombs = head.tombs
            new.referrers = head.referrers
            new.next_key = head.next_key
            new._entries = None
            new._view = None
            _replace_delta(new, head, key, entry)
            st.head = new
            return n
        finally:
            lock.release()
            # The writer frees the pin order's finished front (the version it
            # replaced, once its readers have left: PinRegistry.trim, which
            # never waits), so the next reader's first pin of the new head
            # finds the order empty and skips the walk (pins.py). A stream
            # publishes versions many times faster than readers pin them, and
            # that walk was the slow part of a reader's first pin of a new
            # version; reclaiming is the writer's work, as in RCU.
            if st.pin_order:
                part._registry.trim()
            if st.due_flag and st.due_hook is None:
                part._pub.drain_due()

    def close(self, *, content: object = None) -> int:
        """Finish the entry: ``streaming`` becomes False, its body is the text
        written, ``content`` (a JSON value, e.g. the adapter's message part)
        its final structured form. Returns the version published.

        O(len(body)): the body's checks, its content hash and the policy's
        classification happen here, once, mostly before the write lock. If
        the finished entry's content hash or key matches a tombstone, it is
        finished as aborted instead (it stays, marked stale with the
        re-admission's reason; the refusal is counted) — a stream cannot be
        taken back. Raises :class:`StreamClosed` after close or abort,
        :class:`InvalidType`/:class:`InvalidArgument` for a bad ``content``;
        each changes nothing."""
        if content is not None:
            content = freeze(content, "content")
        return self._finish(_CLOSED, None, content)

    def abort(self, reason: str) -> int:
        """Finish the entry as interrupted: it stays with the text that
        arrived, ``streaming`` False, marked stale with ``reason`` (the first
        mark stands if it was marked already); ``meta`` is unchanged. Returns
        the version published. O(len(body)). Raises :class:`StreamClosed`
        after close or abort, :class:`InvalidType`/:class:`InvalidArgument`
        for a bad ``reason``; each changes nothing."""
        check_text(reason, "reason")
        return self._finish(_ABORTED, reason, None)

    def _final(self, content: object) -> Entry:
        h = self._header
        return Entry(h.id, h.kind, self._text.joined(), h.refs, h.turn, h.key, h.meta, content)

    def _finish(self, state: str, reason: str | None, content: object) -> int:
        part = self._part
        if self._state is not _OPEN:
            raise StreamClosed(f"stream {self.id!r} is {self._state} already")
        final = self._final(content)  # O(len), outside the lock
        if len(final.body) >= _CLASSIFY_FROM and part._pub.own_policy():
            preclassify(final)
        tombs = part._st.head.tombs
        if tombs.spilled:  # (issue 21: no disk under the write lock)
            values = (final.content_hash,) if final.key is None else (final.content_hash, final.key)
            tombs.prefetch((), values)
        part._st.write_lock.acquire()
        try:
            if self._state is not _OPEN:
                raise StreamClosed(f"stream {self.id!r} is {self._state} already")
            if len(final.body) != self._text.size:  # written meanwhile (another thread)
                final = self._final(content)
            head = part._st.head
            refusal: str | None = None
            if state is _CLOSED and head.tombs.by_id:
                tomb = head.tombs.matching(final.content_hash, final.key)
                if tomb is not None:
                    state = _ABORTED
                    reason = (
                        f"re-admission refused: the stream's content matches the tombstone of "
                        f"{tomb.id!r} (pruned at version {tomb.version}: {tomb.reason})"
                    )
                    refusal = Refusal.READMISSION.value
            return part.publish_finish(self, final, state, reason, refusal)
        finally:
            part._pub.release()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close on normal exit, abort on an exception or cancellation (the
        reason names the exception type). Nothing if finished already (or
        refused: :attr:`closed`). Every writer (the shared buffer's too)
        ends its ``with`` block here."""
        if self.closed:
            return
        if exc_type is None:
            self.close()
        else:
            self.abort(f"stream interrupted by {exc_type.__name__}")


def _replace_delta(new: Version, head: Version, key: float, entry: Entry) -> None:
    """Derive ``new``'s view from ``head``'s with ``entry`` in place at
    ``key`` (version.py's ``REPLACE``): folded into ``head``'s own
    ``REPLACE`` delta when it has one (so successive writes never lengthen
    the chain), else one more link. O(streams in the fold)."""
    try:
        view = head._view
        base = head._base
        delta = head._delta
        depth = head._depth
    except AttributeError:  # pragma: no cover - a version made without a chain
        view = base = delta = None
        depth = 0
    if view is not None:
        new._base = head
        new._delta = (REPLACE, {key: entry})
        new._depth = 1
    elif (
        base is not None and delta is not None and delta[0] == REPLACE and len(delta[1]) < PATCH_MAX
    ):
        payload = dict(delta[1])
        payload[key] = entry
        new._base = base
        new._delta = (REPLACE, payload)
        new._depth = depth
    elif base is not None and depth < MAX_CHAIN:
        new._base = head
        new._delta = (REPLACE, {key: entry})
        new._depth = depth + 1
    else:
        new._base = None
        new._delta = None
        new._depth = 0


class Streams:
    """The open entries of one buffer: opens them, publishes their close or
    abort, logs their text for a flush. Handed the buffer's state, its
    publisher (the log tail) and its reader registry; its writers hold this
    part, never the buffer.
    O(1) to build."""

    __slots__ = ("__weakref__", "_pub", "_registry", "_st")

    def __init__(self, st: BufferState, publisher: Publisher, registry: PinRegistry) -> None:
        self._st = st  #: the buffer's fields (state.py); ``st.streams`` the registry
        self._pub = publisher  #: the log tail and the lock's release (publish.py)
        #: the readers (pins.py): a write frees the pin order's finished front
        self._registry = registry

    def open_stream(
        self,
        id: str,
        kind: Kind,
        *,
        refs: Iterable[str] = (),
        turn: int | None = None,
        key: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> StreamWriter:
        """Publish a new entry that is still being written and return its
        :class:`StreamWriter`: in the new head ``snap[id].streaming`` is True
        and its body ``""``. Sync, never touches a disk; O(log n +
        refs·log n), like ``append``.

        Raises :class:`DuplicateEntry` for a used id (live, open or
        tombstoned), :class:`DanglingReference` for an unknown or tombstoned
        ref, :class:`ReadmissionRefused` for a key matching a tombstone,
        :class:`InvalidArgument` for an immutable kind or a tool call (see
        the module docstring) and :class:`InvalidType`/:class:`InvalidArgument`
        for any field ``Entry`` refuses; each changes nothing."""
        if isinstance(refs, str | bytes) or not hasattr(refs, "__iter__"):
            raise InvalidType(f"refs must be a collection of str ids, not {type(refs).__name__}")
        header = Entry(id, kind, "", tuple(refs), turn, key, {} if meta is None else meta)
        if header.kind in _REFUSED_KINDS:
            raise InvalidArgument(
                f"stream {header.id!r}: a {header.kind.name} is never streamed "
                + (
                    "(a tool call is appended whole, once its arguments are complete)"
                    if header.kind is Kind.TOOL_CALL
                    else "(a protected entry is appended whole)"
                )
            )
        tombs = self._st.head.tombs
        if tombs.spilled:  # (issue 21: no disk under the write lock)
            tombs.prefetch((header.id, *header.refs), () if header.key is None else (header.key,))
        self._st.write_lock.acquire()
        try:
            head = self._st.head
            eid = header.id
            live = head.live
            by_id = head.tombs.by_id
            if eid in live:
                what = "open as a stream" if eid in self._st.streams else "already in the buffer"
                raise duplicate_id(eid, None, what)
            if eid in by_id:
                raise duplicate_id(eid, by_id[eid])
            for ref in header.refs:
                if ref not in live:
                    raise dangling_ref(eid, ref, by_id.get(ref))
            if header.key is not None and by_id:
                tomb = head.tombs.matching("", header.key)
                if tomb is not None and tomb.key == header.key:
                    raise ReadmissionRefused(
                        f"stream {eid!r} has the key of the tombstone of {tomb.id!r} (pruned at "
                        f"version {tomb.version}: {tomb.reason})",
                        tomb,
                    )
            n = head.number + 1
            order = head.next_key
            w = self.new_writer(header, order, _Text())
            entry = _open_entry(header, w._text)
            new = Version(
                n,
                live.set(eid, Slot(entry, order, n)),
                head.marks,
                head.tombs,
                _cite(head.referrers, entry),
                order + 1.0,
            )
            new.derive(head, ADD, (entry, order))
            self._st.unmarked_new.append(eid)
            record = stream_open_record(len(self._st.records), _wall_clock(), n, header, order)
            self._pub.append_record(record)
            self._st.streams[eid] = w
            self._st.head = new
            return w
        finally:
            self._pub.release()

    def new_writer(self, header: Entry, order: float, text: _Text) -> StreamWriter:
        w: StreamWriter = _new_object(StreamWriter)
        w.id = header.id
        w._part = self
        w._header = header
        w._key = order
        w._text = text
        w._logged = text.size
        w._writes = 0
        w._state = _OPEN
        return w

    def reopen(self, header: Entry, key: float, text: str) -> StreamWriter:
        """A writer for an open stream rebuilt from a log, registered as open
        (the state's ``reopen_stream`` hook: recovery calls it). O(len(text))."""
        w = self.new_writer(header, key, _Text(text))
        self._st.streams[header.id] = w
        return w

    def streams(self) -> Mapping[str, StreamWriter]:
        """The open streams by id (a copy). O(open streams)."""
        return dict(self._st.streams)

    def publish_finish(
        self,
        w: StreamWriter,
        final: Entry,
        state: str,
        reason: str | None,
        refusal: str | None,
    ) -> int:
        """Publish the close or abort of ``w`` (under the write lock): the
        finished entry in place, a mark if aborted, the record with the text
        not yet logged. O(log n + the unlogged text)."""
        head = self._st.head
        eid = w.id
        n = head.number + 1
        marks = head.marks
        mark: Mark | None = None
        if state is _ABORTED:
            assert reason is not None
            if eid not in marks:
                mark = Mark(eid, reason, final.turn, n)
                marks = marks.set(eid, mark)
        new: Version = _new_object(Version)
        new.number = n
        new.live = head.live.set(eid, Slot(final, w._key, n))
        new.marks = marks
        new.tombs = head.tombs
        new.referrers = head.referrers
        new.next_key = head.next_key
        new._entries = None
        new._view = None
        _replace_delta(new, head, w._key, final)
        self._pub.append_record(
            stream_finish_record(
                len(self._st.records),
                _wall_clock(),
                n,
                final,
                aborted=state is not _CLOSED,
                reason=reason,
                offset=w._logged,
                text=w._text.since(w._logged),
                writes=w._writes,
                mark=mark is not None,
                refusal=refusal if state is _ABORTED else None,
            )
        )
        if mark is not None:
            self._st.markable().discard(eid)
        if final.sealed:
            self._st.protected_at[eid] = len(self._st.records) - 1
        w._state = state
        w._logged = w._text.size
        del self._st.streams[eid]
        self._st.head = new
        return n

    def log_streams(self) -> None:
        """Log the text that arrived since the last record of each open
        stream, one ``stream_text`` record per stream (``flush`` calls it
        before it writes). O(open streams + that text), under the write
        lock."""
        self._st.write_lock.acquire()
        try:
            self.log_streams_locked()
        finally:
            self._pub.release()

    def log_streams_locked(self) -> None:
        """:meth:`log_streams`, under the write lock already held (a
        checkpoint logs them in the same hold: its state then has no write
        that no record counts)."""
        live = self._st.head.live
        for w in self._st.streams.values():
            size = w._text.size
            if size > w._logged:
                # the version of its last write: replay gives the entry
                # that version as its last change, as the live slot has
                through = live[w.id].changed
                text = w._text.since(w._logged)
                self._pub.append_record(
                    stream_text_record(
                        len(self._st.records),
                        _wall_clock(),
                        w.id,
                        w._logged,
                        text,
                        through,
                        w._writes,
                    )
                )
                w._logged = size
                w._writes = 0

    def unlogged_text(self) -> bool:
        """Whether an open stream has text no record holds yet. O(streams)."""
        return any(w._text.size > w._logged for w in self._st.streams.values())

    def abort_recovered(self) -> None:
        """Finish every stream a recovery left open as aborted (the log ended
        before its close): the durable prefix stays, marked stale, and a
        ``stream_abort`` record says so."""
        for w in list(self._st.streams.values()):
            w.abort(
                "stream interrupted: the log ends before its close "
                f"(recovered its durable prefix of {w._text.size} characters)"
            )


def _cite(referrers: Any, entry: Entry) -> Any:
    for ref in entry.refs:
        referrers = referrers.set(ref, referrers.get(ref, EMPTY_MAP).set(entry.id, None))
    return referrers
