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
  recognised as those entries, not appended again (:func:`streamed_ids`:
  an index of the buffer's streamed messages by the fingerprint of the
  message they make, fed by ``append_stream`` and, for a buffer this
  process did not stream into — one reopened from its log — rebuilt once
  from its head, so it holds across a restart).
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

import re
from collections.abc import AsyncIterable, Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import anyio

from .._core.buffer import Buffer
from .._core.entry import Entry, Kind, thaw
from .._core.errors import InvalidArgument, InvalidType, QuiesceError
from .._core.version import Version
from .._protocol import local_buffer
from . import _sync
from ._checks import check_kind
from ._common import (
    RESERVED,
    Keys,
    Read,
    aadmit,
    admit,
    check_readmit,
    fail,
    fingerprint,
    recognise,
)
from ._per_buffer import PerBuffer

__all__ = ["StreamFailed", "drop_none", "hidden", "streamed_ids"]

_T = TypeVar("_T")
_T_co = TypeVar("_T_co", covariant=True)


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


def event_type(index: int, event: object) -> str:
    """The ``type`` of event ``index`` (a dict's key or an SDK object's
    attribute, as :func:`field` reads it); a malformed event without a str
    one. O(1): it stands in for the ``field`` read, adding no call."""
    kind = event.get("type") if type(event) is dict else getattr(event, "type", None)
    if not isinstance(kind, str):
        raise malformed(
            index,
            f"must be a stream event with a type, not {type(event).__name__}",
            type_error=True,
        )
    return kind


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


# -- recognising a streamed message: the buffer's streamed messages by form --

#: The generated keys' prefix (``#stream.``): what marks a streamed message.
STREAM_PREFIX = f"{RESERVED}stream."

#: Per API, the message a streamed message's entries make (its entries in
#: window order), or ``None`` when they make none a sync could be given
#: (an aborted part, a message of tool calls only: those are matched by
#: their ids). Set by the API's stream module when it is imported.
ASSEMBLERS: dict[str, Callable[[list[Entry]], Mapping[str, Any] | None]] = {}


class _Streamed:
    """One buffer's streamed messages of one API: ``by_form`` maps the
    fingerprint of each one's recognised message to its entry ids;
    ``scanned`` says the head was read once for those streamed before this
    process knew the buffer."""

    __slots__ = ("by_form", "scanned")

    def __init__(self) -> None:
        self.by_form: dict[str, tuple[str, ...]] = {}
        self.scanned = False


_STREAMED_BY_BUFFER: PerBuffer[_Streamed] = PerBuffer(_Streamed)


def _streamed(buf: Buffer, api: str) -> _Streamed:
    return _STREAMED_BY_BUFFER.get(buf, api)


def register_streamed(
    buf: Buffer | None, api: str, message: Mapping[str, Any], ids: Sequence[str]
) -> None:
    """Remember that ``append_stream`` stored ``message`` in ``buf`` as the
    entries ``ids``: a sync given it back finds them (:func:`streamed_ids`).
    O(size of the message)."""
    form = recognise(message)
    if buf is None or form is None or not ids:
        return
    _streamed(buf, api).by_form[fingerprint(form)] = tuple(ids)


def _scan(head: Version, api: str, index: _Streamed) -> None:
    """Index the streamed messages of ``head`` (its live entries whose
    message key is a generated stream key), as :data:`ASSEMBLERS` makes
    them. O(n) once per buffer and API in a process."""
    assemble = ASSEMBLERS.get(api)
    if assemble is None:
        return
    groups: dict[str, list[tuple[float, Entry]]] = {}
    for slot in head.live.values():
        e = slot.entry
        msg = e.meta.get("msg")
        if type(msg) is str and msg.startswith(STREAM_PREFIX) and e.meta.get("api") == api:
            groups.setdefault(msg, []).append((slot.key, e))
    for members in groups.values():
        members.sort(key=lambda m: m[0])
        entries = [e for _, e in members]
        if any(e.streaming for e in entries):
            continue  # still open: its message is not known yet
        message = assemble(entries)
        form = None if message is None else recognise(message)
        if form is not None:
            index.by_form.setdefault(fingerprint(form), tuple(e.id for e in entries))


def streamed_ids(
    buf: Buffer, api: str, head: Version, form: Mapping[str, Any]
) -> tuple[str, ...] | None:
    """The entries ``append_stream`` stored a message as, if ``form`` (a
    message given to ``sync_messages``, recognised) is that message and
    ``head`` knows them all (live or pruned); else ``None``. The first call
    for a buffer this process has not streamed into reads its head once
    (O(n)); then O(size of the message)."""
    index = _streamed(buf, api)
    if not index.scanned:
        index.scanned = True
        _scan(head, api, index)
    if not index.by_form:
        return None
    ids = index.by_form.get(fingerprint(form))
    if ids is None:
        return None
    live, tombs = head.live, head.tombs.by_id
    return ids if all(i in live or i in tombs for i in ids) else None


_sync.STREAMED = streamed_ids


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
        "unsettled",
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
        #: writers of a shared buffer closed since the last flush: their
        #: closes are still being forwarded to the sequencer
        self.unsettled: list[Any] = []

    def head(self) -> Version:
        return self.buf.head()  # type: ignore[no-any-return]

    def read(self, reader: Callable[..., list[Read]], items: list[Any], kind: Kind) -> list[Read]:
        """What ``append_messages`` reads ``items`` (messages or items) as
        against the head now (``reader``: the adapter's checked reader;
        ``kind``: the assistant kind); the caller renames its validation
        errors to its event (:func:`as_event`). O(size of ``items``)."""
        head = self.head()
        return reader(
            items,
            head=head,
            keys=Keys(head),
            calls=(),
            turn=self.turn,
            user_kind=Kind.INSTRUCTION,
            assistant_kind=kind,
        )

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
        """Finish the open entry ``eid`` with its final structured form
        (given as plain JSON: a shared buffer's writer sends it as is)."""
        w = self.writers.pop(eid)
        w.close(content=thaw(content))
        if self.local is None and callable(getattr(w, "wait_closed", None)):
            self.unsettled.append(w)

    def add(self, index: int, e: Entry) -> None:
        """Queue the complete entry ``e`` (made from event ``index``)."""
        self.pending.append(Read(index, e.id, [e]))

    async def flush(self) -> None:
        """Append what the last event completed (sync on an in-process
        buffer: no await between the event and its append). On a shared
        buffer, first wait until the sequencer applied the closes the event
        made (a later entry may cite a closed one: a signed thinking block),
        so the replica's head holds them."""
        while self.unsettled:
            version = await self.unsettled.pop(0).wait_closed()
            applied = getattr(self.buf, "wait_applied", None)
            if callable(applied):
                await applied(version)
        reads, self.pending = self.pending, []
        # the same admission, made sync on an in-process buffer
        how: dict[str, Any] = {
            "api": self.api,
            "readmit": self.readmit,
            "turn": self.turn,
            "actor": self.actor,
        }
        if self.local is not None:
            admit(self.local, reads, sync=False, **how)
        else:
            await aadmit(self.buf, reads, sync=False, **how)
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
    ``finish(count)``; on a shared buffer, wait until the sequencer
    applied every close (so the entries are there on return, as on a local
    buffer). On any exception — cancellation included — every open entry
    is aborted with a reason naming it, and it propagates.
    Returns the number of events. A checkpoint at the start and the end."""
    await anyio.lowlevel.checkpoint()
    if isinstance(source, AsyncIterable):
        events: AsyncIterable[Any] | Iterable[Any] = source
    elif isinstance(source, Iterable) and not isinstance(source, str | bytes | Mapping):
        events = source
    else:
        raise InvalidType(
            f"events must be an iterable or async iterable of SDK events or dicts, "
            f"not {type(source).__name__}"
        )
    n = 0
    try:
        try:
            # The same four lines for either kind of iterable; ``n`` is the
            # event being handled or appended when a QuiesceError escapes.
            if isinstance(events, AsyncIterable):
                async for event in events:
                    handle(n, event)
                    if sink.pending or sink.unsettled:
                        await sink.flush()
                    n += 1
            else:
                for event in events:
                    handle(n, event)
                    if sink.pending or sink.unsettled:
                        await sink.flush()
                    n += 1
        except QuiesceError as exc:
            raise at_event(n, exc) from None
        finish(n)
        if sink.pending or sink.unsettled:  # (a shared buffer: its closes applied)
            await sink.flush()
    except BaseException as exc:
        sink.abort(interrupted(exc))
        raise
    await anyio.lowlevel.checkpoint()
    return n


_NAMED = re.compile(r"^(?:message|item) (\d+): ")


def at_event(index: int, exc: QuiesceError) -> QuiesceError:
    """``exc`` (raised while event ``index`` was handled or what it
    completed was appended: a used id, a dangling reference, a refused
    re-admission) with its message naming the event, ``"event 7: ..."``:
    the same object and type, its ``args[0]`` renamed (an adapter's
    ``"message 7: "`` becomes ``"event 7: "``)."""
    text = str(exc)
    if text.startswith("event "):
        return exc
    m = _NAMED.match(text)
    text = f"event {m.group(1)}: {text[m.end() :]}" if m else f"event {index}: {text}"
    exc.args = (text, *exc.args[1:])
    return exc


def as_event(index: int, exc: QuiesceError) -> QuiesceError:
    """An adapter's validation error about what event ``index`` completed
    (a tool call, a block, an item, read as ``"message 0: ..."`` or
    ``"item 2: ..."``) as the malformed event ``index``; an error that names
    its event already is ``exc`` itself."""
    text = str(exc)
    if text.startswith("event "):
        return exc
    m = _NAMED.match(text)
    return malformed(index, text[m.end() :] if m else text, type_error=isinstance(exc, TypeError))


class EventReader(Protocol[_T_co]):
    """An API's stream reader as :func:`run_stream` drives it: fed each
    event, told the stream ended (where it sets its final form), then asked
    for what ``append_stream`` returns (where a reader whose message has
    generated ids registers it: :func:`register_streamed`)."""

    def handle(self, count: int, event: Any) -> None: ...

    def finish(self, count: int) -> None: ...

    def result(self) -> _T_co: ...


#: An API's stream reader of a :class:`Sink`, given the kind its text entries take.
ReaderFactory = Callable[[Sink, Kind], EventReader[_T]]


async def run_stream(
    buf: object,
    events: object,
    reader: ReaderFactory[_T],
    *,
    api: str,
    readmit: object = "record",
    turn: int | None = None,
    actor: str | None = None,
    assistant_kind: Kind = Kind.REASONING,
) -> _T:
    """What every ``append_stream`` does: check ``assistant_kind``, open a
    :class:`Sink` on ``buf`` (which checks ``buf``, ``readmit`` and
    ``turn``), make the API's reader of it, :func:`drive` ``events``
    through it and return the reader's result. On any exception,
    cancellation included, every open entry is aborted (:func:`drive`) and
    it propagates. A checkpoint at the start and the end."""
    check_kind(assistant_kind, "assistant_kind")
    sink = Sink(buf, api=api, readmit=readmit, turn=turn, actor=actor)
    stream = reader(sink, assistant_kind)
    await drive(events, sink, stream.handle, stream.finish)
    return stream.result()


def interrupted(exc: BaseException) -> str:
    """The reason an aborted entry is marked stale with."""
    if isinstance(exc, QuiesceError):
        return f"stream interrupted: {exc}"
    return f"stream interrupted: {type(exc).__name__}"
