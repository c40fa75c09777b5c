"""A shared member's open entries: a message streamed into the shared buffer (issue 24).

:meth:`SharedBuffer.open_stream <quiesce.SharedBuffer.open_stream>` returns a
:class:`SharedStreamWriter`. Its ``write``, ``close`` and ``abort`` are sync,
as the core's are: they check their argument, queue the text and return;
the writer's forwarder task sends the stream to the sequencer as forwarded
requests (``stream_open``, ``stream_write``, ``stream_close`` /
``stream_abort``) and the sequencer applies them to its own open entry
(:mod:`.serve`), whose text the log carries to every member, coalesced per
flush.

What it keeps true:

1. **Coalesced.** At most one forwarded request per stream per
   :data:`FORWARD_INTERVAL` (20 ms): the text written meanwhile goes in one
   request, and the close or abort carries the rest of the text itself.
2. **Whole prefixes, in order, once.** Each request names the offset its
   text starts at; the sequencer applies it only at exactly that offset (a
   request applied already is answered again, not applied twice; a gap is
   refused), so the sequencer's entry is always a prefix of what was
   written, and every member's is a prefix of the sequencer's (the log's
   ``stream_text`` records, applied as whole batches: within the replica
   lag).
3. **An interrupted stream stays, aborted.** If the sequencer fails over
   mid-stream, the new one aborts every stream left open in the log (the
   durable text stays, marked stale); if a member's lease expires
   mid-stream, the sequencer aborts that member's streams with the text it
   applied. The writer then refuses more text (:class:`StreamClosed`,
   naming why) and :meth:`SharedStreamWriter.wait_closed` raises it.

Bad input — a non-str chunk (:class:`InvalidType`), a lone surrogate
(:class:`InvalidArgument`), a write after close or abort
(:class:`StreamClosed`), an open with a used id (:class:`DuplicateEntry`,
checked against this member's head; a race another member won is refused
by the sequencer and reported the same way) — raises at once and queues
nothing.

Threads: call a writer from its member's event loop (the forwarder is
woken with an :class:`anyio.Event`). Cancellation: the sync calls cannot
be interrupted; the forwarder runs in the member's task group, so leaving
``open_shared_buffer`` with a stream open stops forwarding it (the
sequencer aborts it once this member's lease is gone).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, Unpack

import anyio

from .._core.entry import Entry, Kind, check_text, check_utf8
from .._core.errors import InvalidArgument, InvalidType, QuiesceError, StreamClosed
from .._core.policy import PROTECTED_KINDS
from .._core.stream import StreamWriter
from .._core.version import Version
from .._protocol import StreamOptions

__all__ = ["FORWARD_INTERVAL", "SharedStreamWriter", "check_header", "header_to_dict"]

#: Seconds between two forwarded requests of one stream, at least.
FORWARD_INTERVAL = 0.02

#: The kinds a stream may not have (the core refuses them too: a protected
#: entry and a tool call are appended whole).
_REFUSED_KINDS = PROTECTED_KINDS | {Kind.TOOL_CALL}

_OPEN, _CLOSING, _CLOSED, _ABORTED, _FAILED = "open", "closing", "closed", "aborted", "failed"

#: send(op, args) -> the sequencer's result (forwarded, or applied there)
Send = Callable[[str, dict[str, Any]], Awaitable[Any]]


def check_header(head: Version, id: str, kind: Kind, **options: Unpack[StreamOptions]) -> Entry:
    """The stream's entry (body ``""``), checked as the core's
    ``open_stream`` checks it, against ``head`` (this member's): the
    :class:`Entry` fields, the kind, a used id (:class:`DuplicateEntry`) and
    unknown refs (:class:`DanglingReference`). O(refs)."""
    from .._core.errors import DanglingReference, DuplicateEntry

    refs = options.get("refs", ())
    if isinstance(refs, str | bytes) or not hasattr(refs, "__iter__"):
        raise InvalidType(f"refs must be a collection of str ids, not {type(refs).__name__}")
    meta = options.get("meta")
    turn, key = options.get("turn"), options.get("key")
    header = Entry(id, kind, "", tuple(refs), turn, key, {} if meta is None else meta)
    if header.kind in _REFUSED_KINDS:
        raise InvalidArgument(
            f"stream {header.id!r}: a {header.kind.name} is never streamed (it is appended whole)"
        )
    if header.id in head.live:
        raise DuplicateEntry(f"entry {header.id!r} is already in the buffer")
    tomb = head.tombs.by_id.get(header.id)
    if tomb is not None:
        raise DuplicateEntry(
            f"entry {header.id!r} was pruned at version {tomb.version}; ids are not reused"
        )
    for ref in header.refs:
        if ref not in head.live:
            raise DanglingReference(f"entry {header.id!r} cites unknown entry {ref!r}", ref, None)
    return header


def header_to_dict(header: Entry) -> dict[str, Any]:
    """The wire form of a stream's entry (its fields, no body)."""
    return {
        "id": header.id,
        "kind": header.kind.value,
        "refs": list(header.refs),
        "turn": header.turn,
        "key": header.key,
        "meta": json.loads(json.dumps(dict(header.meta))),
    }


class SharedStreamWriter(StreamWriter):
    """The writing end of a shared member's open entry (see the module
    docstring). The same face as :class:`~quiesce.StreamWriter`: ``id``,
    ``write``, ``close``, ``abort``, ``closed``, ``text``, ``aborted`` and
    the ``with`` block; plus :meth:`wait_closed`, which waits until the
    sequencer has finished the entry.

    ``write``, ``close`` and ``abort`` return this member's head version
    (the version the sequencer publishes reaches this member within the
    replica lag: :meth:`wait_closed` returns the close's)."""

    __slots__ = (
        "_chunks",
        "_done",
        "_ending",
        "_error",
        "_local_version",
        "_result",
        "_send",
        "_sent",
        "_size",
        "_status",
        "_wake",
        "header",
        "requests",
    )

    def __init__(self, header: Entry, send: Send, local_version: Callable[[], int]) -> None:
        self.id = header.id
        self.header = header
        self._send = send
        self._local_version = local_version
        self._chunks: list[str] = []
        self._size = 0  #: characters written
        self._sent = 0  #: chunks sent (the rest wait for the forwarder)
        self._status = _OPEN
        self._ending: tuple[str, dict[str, Any]] | None = None
        self._error: QuiesceError | None = None
        self._result: int | None = None
        self._wake = anyio.Event()
        self._done = anyio.Event()
        #: forwarded requests sent so far (open, writes and the final one)
        self.requests = 0

    def __repr__(self) -> str:
        return f"<SharedStreamWriter {self.id!r} {self._status}, {self._size} chars>"

    # -- the StreamWriter face -------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once closed, aborted, or refused by the sequencer."""
        return self._status != _OPEN

    @property
    def aborted(self) -> bool:
        """True once aborted (here, or by the sequencer: a failover, a lease
        loss) or refused."""
        return self._status in (_ABORTED, _FAILED) or (
            self._ending is not None and self._ending[0] == "stream_abort"
        )

    @property
    def text(self) -> str:
        """All the text written so far. O(len)."""
        return "".join(self._chunks)

    def _refuse_if_closed(self) -> None:
        if self._status == _OPEN:
            return
        if self._error is not None:
            raise StreamClosed(
                f"stream {self.id!r} is closed: the sequencer refused it ({self._error})"
            )
        raise StreamClosed(f"stream {self.id!r} is {self._status}: it takes no more text")

    def write(self, text: str) -> int:
        """Queue ``text`` for the sequencer (sent within
        :data:`FORWARD_INTERVAL`, coalesced with the writes around it).
        Sync, never waits; O(1) amortized (O(len(text)) for a non-ASCII
        chunk: the UTF-8 check). Raises :class:`InvalidType`,
        :class:`InvalidArgument` or :class:`StreamClosed`, queueing
        nothing."""
        if type(text) is not str:
            raise InvalidType(
                f"stream {self.id!r}: a chunk must be a str, not {type(text).__name__}"
            )
        if not text.isascii():
            check_utf8(text, f"a chunk of stream {self.id!r}")
        self._refuse_if_closed()
        if text:
            self._chunks.append(text)
            self._size += len(text)
            self._wake.set()
        return self._local_version()

    def close(self, *, content: object = None) -> int:
        """Finish the entry (sent with the text not yet sent; ``content``, a
        JSON value, its final structured form). Sync. Raises
        :class:`StreamClosed` after close or abort and
        :class:`InvalidArgument` for a ``content`` that is not JSON; each
        changes nothing."""
        self._refuse_if_closed()
        try:
            wire = None if content is None else json.loads(json.dumps(content, allow_nan=False))
        except (TypeError, ValueError, RecursionError) as exc:
            raise InvalidArgument(f"stream {self.id!r}: content is not JSON: {exc}") from None
        self._queue_end("stream_close", {"content": wire})
        return self._local_version()

    def abort(self, reason: str) -> int:
        """Finish the entry as interrupted, with ``reason`` (sent with the
        text not yet sent). Sync. Raises :class:`StreamClosed` after close
        or abort, :class:`InvalidType`/:class:`InvalidArgument` for a bad
        ``reason``; each changes nothing."""
        check_text(reason, "reason")
        self._refuse_if_closed()
        self._queue_end("stream_abort", {"reason": reason})
        return self._local_version()

    def _queue_end(self, op: str, args: dict[str, Any]) -> None:
        self._ending = (op, args)
        self._status = _CLOSING
        self._wake.set()

    # -- forwarding ----------------------------------------------------------------

    async def wait_closed(self, *, timeout: float | None = None) -> int:
        """Wait until the sequencer has finished the entry; return the version
        its close (or abort) published there. Raises the sequencer's refusal
        (e.g. :class:`StreamClosed` after a failover, :class:`DuplicateEntry`
        for an id another member used first) or ``TimeoutError``."""
        with anyio.fail_after(math.inf if timeout is None else timeout):
            await self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    async def run(self) -> None:
        """The forwarder (one task per stream, in the member's task group):
        send the open, then the text at most once per
        :data:`FORWARD_INTERVAL`, then the close or abort with the rest. A
        refusal ends the stream here (``closed``; the error is kept for
        :meth:`wait_closed` and named by the next write)."""
        try:
            await self._send("stream_open", {"entry": header_to_dict(self.header)})
            self.requests += 1
            offset = 0
            last = -math.inf
            while True:
                if self._sent == len(self._chunks) and self._status == _OPEN:
                    await self._wake.wait()
                    self._wake = anyio.Event()
                delay = last + FORWARD_INTERVAL - time.monotonic()
                if delay > 0:
                    await anyio.sleep(delay)
                upto = len(self._chunks)
                text = "".join(self._chunks[self._sent : upto])
                final = self._ending
                last = time.monotonic()
                if final is not None and upto == len(self._chunks):
                    op, extra = final
                    args = {"id": self.id, "offset": offset, "text": text, **extra}
                    self.requests += 1
                    self._result = int(await self._send(op, args))
                    self._sent = upto
                    if self._status == _CLOSING:
                        self._status = _CLOSED if op == "stream_close" else _ABORTED
                    return
                if text:
                    self.requests += 1
                    await self._send(
                        "stream_write", {"id": self.id, "offset": offset, "text": text}
                    )
                    self._sent = upto
                    offset += len(text)
        except QuiesceError as exc:
            self._error = exc
            self._status = _FAILED
        finally:
            self._done.set()
