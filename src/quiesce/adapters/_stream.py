"""What the three adapters' ``append_stream`` share: reading an SDK's raw
event stream into open entries.

What it keeps true, for every stream and at every version it publishes:

* **Every snapshot renders a valid request.** Text, refusal, reasoning and
  thinking deltas go into *open* entries (``buf.open_stream``: the body is the
  text so far, ``entry.streaming`` is true); a tool call is appended only once
  its arguments are complete, so a partial call is never a call; a thinking
  block or a reasoning item is closed with its final form (signature,
  encrypted content) and until then is never rendered (:func:`hidden`).
* **The entries are the final message's.** Kinds, refs, bodies, ``content``
  and ``meta`` are what ``append_messages`` of the returned message stores.
  Ids are too wherever the API names the thing (tool-call ids, tool-use ids,
  Responses item ids). A message the API gives no id (a Chat Completions
  message, an Anthropic message's blocks) is keyed by its content in
  ``append_messages``, which is not known until the stream ends, so its
  entries take a generated stream key, ``#stream.<API's id>.<n>``, known
  at the first delta; the rendered window names no such key, so ``render``
  is the whole append's, and ``sync_messages`` of the final message is
  recognised as those entries (:func:`~quiesce.adapters._common.
  remember_rendered`), not appended again.
* **An interrupted stream poisons nothing.** Cancellation, an exception from
  the iterator, an ``error`` event or a malformed event aborts every entry
  still open (``w.abort(reason)``: it stays with the text that arrived,
  marked stale with the reason) and appends no incomplete call; the
  exception propagates (a malformed event as
  :class:`~quiesce.InvalidArgument`/``InvalidType`` naming its position,
  ``"event 7: ..."``; an error event as :class:`StreamFailed`). Aborting is
  sync, so cancellation cannot skip it.

Cost: the SDK's event objects are read by attribute (no ``model_dump`` per
delta), a delta costs one ``StreamWriter.write`` — O(1) amortized plus what
``mark_stale`` costs, independent of the text's length — plus O(1) parsing.
A sync iterable is consumed without yielding to the loop between events (it
has nothing to wait for); an async one (the SDKs' ``AsyncStream``) yields
wherever it awaits. ``append_stream`` is a checkpoint at its start and end.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

import anyio

from .._core.buffer import Buffer
from .._core.entry import Entry, Kind
from .._core.errors import InvalidArgument, InvalidType, QuiesceError
from .._core.version import Version
from .._protocol import local_buffer
from ._checks import check_kind
from ._common import (
    RESERVED,
    Read,
    aadmit,
    admit,
    check_readmit,
    fail,
)

__all__ = ["StreamFailed", "drop_none", "hidden"]


class StreamFailed(QuiesceError):
    """The stream reported a failure (an ``error`` event, ``response.failed``
    or ``response.incomplete``): every entry still open was aborted, the
    text that arrived stays, marked interrupted. ``event`` is the position
    of the event that reported it and ``error`` what it said (a plain
    dict, or ``None``)."""

    def __init__(self, message: str, event: int, error: object = None) -> None:
        super().__init__(message)
        self.event = event
        self.error = error


def drop_none(value: Any) -> Any:
    """``value`` (plain JSON) with every ``None`` field of every dict left
    out, at every depth: the form an SDK object and its dump are compared in.
    O(size)."""
    if type(value) is dict:
        return {k: drop_none(v) for k, v in value.items() if v is not None}
    if type(value) is list:
        return [drop_none(v) for v in value]
    return value


def plain_event(value: object) -> Any:
    """An SDK object (anything with ``model_dump``) as a plain dict with its
    ``None`` fields left out, or a dict with them dropped; other values as
    they are. Used for the parts of an event that are kept (a block, an
    item), never per text delta."""
    dump = getattr(type(value), "model_dump", None)
    if dump is not None and callable(dump):
        value = value.model_dump(mode="json", by_alias=True, exclude_none=True)  # type: ignore[attr-defined]
    return drop_none(value)


def field(obj: object, name: str) -> Any:
    """``obj[name]`` for a dict, else the attribute (``None`` when absent):
    an SDK event object and its dict read alike, at attribute speed."""
    if type(obj) is dict:
        return obj.get(name)
    return getattr(obj, name, None)


#: Block and item kinds that are signed reasoning: never rendered before
#: their final form arrives (``content`` is set at close).
_SIGNED_BLOCKS = frozenset({"thinking", "redacted_thinking"})


def hidden(e: Entry) -> bool:
    """``e`` must not be rendered: an unsigned or unfinished thinking block or
    reasoning item (open, or aborted before its final form), or an open entry
    with no text yet (an empty text block is refused by the Messages API).
    Entries ``append_messages`` made always have ``content``, so they are
    never hidden. O(1)."""
    if e.content is not None:
        return False
    meta = e.meta
    if meta.get("block") in _SIGNED_BLOCKS or meta.get("type") == "reasoning":
        return "api" in meta
    return e.streaming and not e.body


def renderable(entries: tuple[Entry, ...]) -> tuple[Entry, ...]:
    """``entries`` without the :func:`hidden` ones (the same tuple when none
    is: the render cache keys on it). O(n)."""
    if not any(e.content is None and hidden(e) for e in entries):
        return entries
    return tuple(e for e in entries if not hidden(e))


def stream_key(head: Version, base: object, taken: set[str]) -> str:
    """A fresh generated key for a streamed message:
    ``#stream.<base>.<n>``, ``n`` the first number no entry of ``head``
    (live or pruned) nor ``taken`` uses, the ``#n`` block ids under it
    included. ``base`` is the API's id of the message (its chunk or message
    id), ``"_"`` when it has none. O(k log n) for k keys of that base."""
    text = base if isinstance(base, str) and base else "_"
    text = text.replace(RESERVED, "_")
    live, tombs = head.live, head.tombs.by_id
    n = 0
    while True:
        key = f"{RESERVED}stream.{text}.{n}"
        first = f"{key}{RESERVED}0"
        if key not in taken and not any(k in live or k in tombs for k in (key, first)):
            taken.add(key)
            return key
        n += 1


class Sink:
    """The buffer side of one stream: opens, writes, appends and aborts.

    ``pending`` holds the complete entries an event produced (a tool call, a
    whole block or item), appended by :meth:`flush` after the event — through
    the adapter's admission (``readmit`` decides a re-run of a pruned call),
    synchronously on an in-process buffer. ``writers`` are the open entries,
    by id, in the order they were opened.
    """

    __slots__ = (
        "actor",
        "api",
        "appended",
        "buf",
        "local",
        "pending",
        "readmit",
        "taken",
        "turn",
        "writers",
    )

    def __init__(
        self, buf: object, *, api: str, readmit: object, turn: int | None, actor: str | None
    ) -> None:
        if not callable(getattr(buf, "open_stream", None)):
            raise InvalidType(
                f"buf must be a Buffer or an AsyncBuffer with open_stream, not {type(buf).__name__}"
            )
        check_readmit(readmit)
        if turn is not None and (type(turn) is not int or turn < 0):
            raise InvalidArgument(f"turn must be an int >= 0 or None, not {turn!r}")
        self.buf: Any = buf
        self.local: Buffer | None = buf if isinstance(buf, Buffer) else local_buffer(buf)  # type: ignore[arg-type]
        self.api = api
        self.readmit = readmit
        self.turn = turn
        self.actor = actor
        self.writers: dict[str, Any] = {}
        self.pending: list[Read] = []
        self.appended: list[str] = []
        self.taken: set[str] = set()

    def head(self) -> Version:
        return self.buf.head()  # type: ignore[no-any-return]

    def open(
        self,
        eid: str,
        kind: Kind,
        meta: Mapping[str, Any],
        refs: tuple[str, ...] = (),
    ) -> Any:
        """Open the entry ``eid`` (sync, a fast path) and keep its writer."""
        w = self.buf.open_stream(eid, kind, refs=refs, turn=self.turn, meta=dict(meta))
        self.writers[eid] = w
        return w

    def close(self, eid: str, content: object) -> None:
        """Finish the open entry ``eid`` with its final structured form."""
        w = self.writers.pop(eid)
        w.close(content=content)

    def add(self, index: int, e: Entry) -> None:
        """Queue the complete entry ``e`` (made from event ``index``)."""
        self.pending.append(Read(index, e.id, [e]))

    async def flush(self) -> None:
        """Append what the last event completed (sync on an in-process
        buffer: no await between the event and its append)."""
        reads, self.pending = self.pending, []
        if self.local is not None:
            admit(
                self.local,
                reads,
                api=self.api,
                readmit=self.readmit,
                turn=self.turn,
                sync=False,
                actor=self.actor,
            )
        else:
            await aadmit(
                self.buf,
                reads,
                api=self.api,
                readmit=self.readmit,
                turn=self.turn,
                sync=False,
                actor=self.actor,
            )
        self.appended.extend(r.key for r in reads)

    def abort(self, reason: str) -> None:
        """Abort every entry still open (sync: cancellation cannot skip it);
        queued entries are dropped, never appended."""
        self.pending.clear()
        writers, self.writers = self.writers, {}
        for w in writers.values():
            if not w.closed:
                w.abort(reason)


def malformed(index: int, message: str, *, type_error: bool = False) -> QuiesceError:
    """The error a malformed event raises: ``"event <index>: <message>"``."""
    return fail(index, message, type_error=type_error, noun="event")


Handler = Callable[[int, Any], None]


async def drive(source: object, sink: Sink, handle: Handler, finish: Callable[[int], None]) -> int:
    """Feed every event of ``source`` (an async or sync iterable) to
    ``handle(position, event)``, appending what each completes, then call
    ``finish(count)``. On any exception — cancellation included — every
    open entry is aborted with a reason naming it, and it propagates.
    Returns the number of events. A checkpoint at the start and the end."""
    await anyio.lowlevel.checkpoint()
    n = 0
    try:
        if isinstance(source, AsyncIterable):
            async for event in source:
                handle(n, event)
                n += 1
                if sink.pending:
                    await sink.flush()
        elif isinstance(source, Iterable) and not isinstance(source, str | bytes | Mapping):
            for event in source:
                handle(n, event)
                n += 1
                if sink.pending:
                    await sink.flush()
        else:
            raise InvalidType(
                f"events must be an iterable or async iterable of SDK events or dicts, "
                f"not {type(source).__name__}"
            )
        finish(n)
        if sink.pending:
            await sink.flush()
    except BaseException as exc:
        sink.abort(interrupted(exc))
        raise
    await anyio.lowlevel.checkpoint()
    return n


class EventReader(Protocol):
    """An API's stream reader as :func:`run_stream` drives it: fed each
    event, then told the stream ended (where it sets its final form)."""

    def handle(self, count: int, event: Any) -> None: ...

    def finish(self, count: int) -> None: ...


_R = TypeVar("_R", bound=EventReader)


async def run_stream(
    buf: object,
    events: object,
    reader: Callable[[Sink, Kind], _R],
    *,
    api: str,
    readmit: object,
    turn: int | None,
    actor: str | None,
    assistant_kind: Kind,
) -> _R:
    """What every ``append_stream`` does before its API's ending: check
    ``assistant_kind``, open a :class:`Sink` on ``buf`` (which checks
    ``buf``, ``readmit`` and ``turn``), make the API's reader of it and
    :func:`drive` ``events`` through it. Returns the reader, its final form
    set. On any exception, cancellation included, every open entry is
    aborted (:func:`drive`) and it propagates. A checkpoint at the start
    and the end."""
    check_kind(assistant_kind, "assistant_kind")
    sink = Sink(buf, api=api, readmit=readmit, turn=turn, actor=actor)
    stream = reader(sink, assistant_kind)
    await drive(events, sink, stream.handle, stream.finish)
    return stream


def interrupted(exc: BaseException) -> str:
    """The reason an aborted entry is marked stale with."""
    if isinstance(exc, QuiesceError):
        return f"stream interrupted: {exc}"
    return f"stream interrupted: {type(exc).__name__}"
