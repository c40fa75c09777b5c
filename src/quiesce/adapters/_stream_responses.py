"""Responses API stream events (the SDK's ``ResponseStreamEvent`` types or
their dicts) into open entries: the reader
:func:`quiesce.adapters.responses.append_stream` runs
(:func:`~quiesce.adapters._stream.run_stream`).

What it keeps true (see :mod:`quiesce.adapters._stream` for what every
stream keeps): the items it returns are the SDK's — the output of the
response ``ResponseStreamState`` completes (``response.completed``'s
``output``, or each ``response.output_item.done`` item in output order when
that is absent), every ``None`` field left out. Per output item:

* ``message``: an open entry (the item's own ``id``) from its first text;
  ``output_text`` and ``refusal`` deltas are written as they arrive, a new
  content part after a newline (the body is the parts' text joined by
  newlines, as ``append_messages`` reads it); closed with the final item at
  ``response.output_item.done``;
* ``reasoning``: the same with ``reasoning_summary_text`` and
  ``reasoning_text`` deltas, but never rendered until it is closed with its
  final item (``encrypted_content`` seals it);
* ``function_call`` and every other item: appended whole at
  ``response.output_item.done`` (arguments complete), never before.

The entries' ids, kinds, refs (each item of the turn cites its reasoning),
meta and content are exactly ``append_messages``'s of the returned items:
each is made by the adapter's own reader over the items so far. An event for
an output index with no item, a delta of the wrong kind for its item or
part, a second item at one index, or an unknown event type is malformed;
``error``, ``response.failed`` and ``response.incomplete`` are a
:class:`~quiesce.adapters.StreamFailed`.
"""

from __future__ import annotations

from typing import Any

from .._core.entry import Entry, Kind
from .._core.errors import QuiesceError
from ._common import Read
from ._stream import (
    Sink,
    StreamFailed,
    as_event,
    drop_none,
    event_type,
    field,
    malformed,
    plain_event,
)

API = "responses"

#: Events that carry nothing the items need (their content comes again in
#: ``response.output_item.done``) or belong to hosted tools' progress.
_IGNORED = frozenset(
    {
        "response.created",
        "response.in_progress",
        "response.queued",
        "response.output_text.done",
        "response.output_text.annotation.added",
        "response.refusal.done",
        "response.content_part.done",
        "response.function_call_arguments.done",
        "response.reasoning_summary_part.done",
        "response.reasoning_summary_text.done",
        "response.reasoning_text.done",
        "response.custom_tool_call_input.done",
        "response.mcp_call_arguments.done",
        "response.code_interpreter_call_code.done",
        "response.audio.done",
        "response.audio.transcript.done",
    }
)

#: Progress events of hosted tools and audio: accepted, not kept (the
#: item's final form comes in ``response.output_item.done``).
_PROGRESS = (
    "response.web_search_call.",
    "response.file_search_call.",
    "response.code_interpreter_call.",
    "response.code_interpreter_call_code.",
    "response.image_generation_call.",
    "response.mcp_call.",
    "response.mcp_call_arguments.",
    "response.mcp_list_tools.",
    "response.custom_tool_call_input.",
    "response.shell_call_command.",
    "response.shell_call_output_content.",
    "response.audio.",
    "response.compaction.",
    "response.steer",
)

_FAILED = frozenset({"error", "response.failed", "response.incomplete"})


class _Item:
    __slots__ = ("done", "held", "item", "kind", "parts", "writer")

    def __init__(self, item: dict[str, Any]) -> None:
        self.item = item
        self.kind = item.get("type") or ("message" if "role" in item else None)
        self.done = False
        #: the buffer held the item's entry before its first text (``held``
        #: streams only): nothing of it is written or appended
        self.held = False
        self.writer: Any = None
        #: how many text parts were written (a newline goes before each later one)
        self.parts = 0


class ResponsesStream:
    """One Responses stream: its output items and their entries. ``read`` is
    the adapter's checked item reader.

    ``held`` (the Agents SDK's ``feed_stream``, whose run's session may add
    an item before the stream reaches it): an item whose entry the buffer
    already holds when its first text arrives, or when it is done, is
    neither written nor appended — the session's copy is the whole item.
    Without it, a used id is a :class:`~quiesce.DuplicateEntry`."""

    def __init__(self, sink: Sink, assistant_kind: Kind, read: Any, held: bool = False) -> None:
        self.sink = sink
        self.kind = assistant_kind
        self.read = read
        self.held = held
        self.items: dict[int, _Item] = {}
        self.completed: list[dict[str, Any]] | None = None
        self.final: list[dict[str, Any]] | None = None

    # -- events ---------------------------------------------------------------

    def handle(self, index: int, event: object) -> None:
        kind = event_type(index, event)
        if kind == "response.output_text.delta":
            self._text(index, event, "output_text", "text")
        elif kind == "response.refusal.delta":
            self._text(index, event, "refusal", "refusal")
        elif kind == "response.function_call_arguments.delta":
            it = self._item(index, event, "function_call")
            delta = field(event, "delta")
            if type(delta) is not str:
                raise malformed(index, "delta must be a str", type_error=True)
            it.item["arguments"] = it.item.get("arguments", "") + delta
        elif kind == "response.reasoning_summary_text.delta":
            self._reasoning(index, event, "summary", "summary_index")
        elif kind == "response.reasoning_text.delta":
            self._reasoning(index, event, "content", "content_index")
        elif kind == "response.output_item.added":
            self._added(index, event)
        elif kind == "response.content_part.added":
            self._part(index, event)
        elif kind == "response.reasoning_summary_part.added":
            it = self._item(index, event, "reasoning")
            self._new_part(
                index, it, "summary", field(event, "summary_index"), field(event, "part")
            )
        elif kind == "response.output_item.done":
            self._done(index, event)
        elif kind == "response.completed":
            self._completed(index, event)
        elif kind in _FAILED:
            error = plain_event(field(event, "error") or field(field(event, "response"), "error"))
            if kind == "error":
                error = error or {"message": field(event, "message"), "code": field(event, "code")}
            raise StreamFailed(
                f"event {index}: the stream reported {kind}: {error!r}", index, error
            )
        elif kind in _IGNORED or kind.startswith(_PROGRESS):
            return
        else:
            raise malformed(index, f"unknown event type {kind!r}")

    def _item(self, index: int, event: object, want: str | None = None) -> _Item:
        n = field(event, "output_index")
        it = self.items.get(n) if type(n) is int else None
        if it is None or it.done:
            raise malformed(index, f"output_index {n!r} has no open item")
        if want is not None and it.kind != want:
            kind = field(event, "type")
            raise malformed(index, f"a {kind} for the {it.kind} item {n}")
        return it

    def _added(self, index: int, event: object) -> None:
        n = field(event, "output_index")
        if type(n) is not int or n < 0:
            raise malformed(index, f"output_index must be an int >= 0, not {n!r}")
        if n in self.items:
            raise malformed(index, f"a second item at output_index {n}")
        item = plain_event(field(event, "item"))
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            raise malformed(index, "response.output_item.added: item must be an item with a type")
        it = self.items[n] = _Item(item)
        if it.kind == "message":
            for part in item.get("content") or ():
                self._write(index, n, it, _part_text(part), new=True)
        elif it.kind == "reasoning":
            for name in ("summary", "content"):
                for part in item.get(name) or ():
                    self._write(index, n, it, _part_text(part), new=True)

    def _part(self, index: int, event: object) -> None:
        it = self._item(index, event)
        if it.kind not in ("message", "reasoning"):
            raise malformed(index, f"response.content_part.added for the {it.kind} item")
        self._new_part(index, it, "content", field(event, "content_index"), field(event, "part"))

    def _new_part(self, index: int, it: _Item, name: str, at: object, raw: object) -> None:
        parts = it.item.setdefault(name, [])
        if at != len(parts):
            raise malformed(index, f"{name} part index {at!r}, but the next part is {len(parts)}")
        part = plain_event(raw)
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise malformed(index, f"the new {name} part must be a part with a type")
        parts.append(part)
        n = next(k for k, v in self.items.items() if v is it)
        self._write(index, n, it, _part_text(part), new=True)

    def _text(self, index: int, event: object, part_type: str, key: str) -> None:
        it = self._item(index, event, "message")
        parts = it.item.get("content") or []
        at = field(event, "content_index")
        if type(at) is not int or at != len(parts) - 1:
            raise malformed(index, f"content_index {at!r} is not the item's open part")
        part = parts[at]
        if part.get("type") != part_type:
            kind = field(event, "type")
            raise malformed(index, f"a {kind} for the {part.get('type')} part {at}")
        delta = field(event, "delta")
        if type(delta) is not str:
            raise malformed(index, "delta must be a str", type_error=True)
        part[key] = part.get(key, "") + delta
        n = field(event, "output_index")
        self._write(index, n, it, delta)

    def _reasoning(self, index: int, event: object, name: str, at_field: str) -> None:
        it = self._item(index, event, "reasoning")
        parts = it.item.get(name) or []
        at = field(event, at_field)
        if type(at) is not int or at != len(parts) - 1:
            raise malformed(index, f"{at_field} {at!r} is not the item's open {name} part")
        delta = field(event, "delta")
        if type(delta) is not str:
            raise malformed(index, "delta must be a str", type_error=True)
        parts[at]["text"] = parts[at].get("text", "") + delta
        self._write(index, field(event, "output_index"), it, delta)

    def _write(self, index: int, n: int, it: _Item, text: str, *, new: bool = False) -> None:
        if new:
            if it.parts:
                text = "\n" + text
            it.parts += 1
        if not text or it.held:
            return
        w = it.writer
        if w is None:
            e = self._entry(index, n, it.item)
            if self.held and e.id in self.sink.head().live:
                it.held = True  # appended whole meanwhile (the run's session)
                return
            w = it.writer = self.sink.open(e.id, e.kind, e.meta, e.refs)
        w.write(text)

    def _done(self, index: int, event: object) -> None:
        it = self._item(index, event)
        n = field(event, "output_index")
        item = plain_event(field(event, "item"))
        if not isinstance(item, dict) or item.get("type") != it.item.get("type"):
            raise malformed(index, f"response.output_item.done: the item at {n} changed its type")
        if it.item.get("id") is not None and item.get("id") != it.item.get("id"):
            raise malformed(index, f"response.output_item.done: the item at {n} changed its id")
        it.item = item
        it.done = True
        if it.writer is not None:
            e = self._entry(index, n, item)
            if e.id != it.writer.id:
                raise malformed(index, f"response.output_item.done: the item at {n} changed its id")
            self.sink.close(e.id, e.content)
        elif not it.held:
            e = self._entry(index, n, item)
            if self.held and e.id in self.sink.head().live:
                return  # appended whole meanwhile (the run's session)
            self.sink.pending.append(Read(index, "", [e]))

    def _entry(self, index: int, n: int, item: dict[str, Any]) -> Entry:
        """The entry ``append_messages`` makes of ``item`` at output index
        ``n``, read (by the adapter's own reader) after the items before it."""
        before = [self.items[k].item for k in sorted(self.items) if k < n]
        try:
            reads = self.sink.read(self.read, [*before, item], self.kind)
        except QuiesceError as exc:
            raise as_event(index, exc) from None
        made: Entry = reads[-1].entries[0]
        return made

    def _completed(self, index: int, event: object) -> None:
        open_items = [n for n, it in sorted(self.items.items()) if not it.done]
        output = field(field(event, "response"), "output")
        if output:
            self.completed = [plain_event(i) for i in output]
        elif open_items:
            raise malformed(
                index, f"response.completed with the item at {open_items[0]} unfinished"
            )

    def finish(self, count: int) -> None:
        if self.completed is not None:
            self.final = self.completed
            for it in self.items.values():
                if not it.done and it.writer is not None:
                    self.sink.writers.pop(it.writer.id).abort(
                        "stream interrupted: the response completed without this item"
                    )
            return
        open_items = [n for n, it in sorted(self.items.items()) if not it.done]
        if open_items:
            raise malformed(count, f"the stream ended with the item at {open_items[0]} unfinished")
        self.final = [self.items[n].item for n in sorted(self.items)]

    def result(self) -> list[dict[str, Any]]:
        """The response's output items, their ``None`` fields left out (the
        items carry their own ids: nothing to register)."""
        assert self.final is not None
        return drop_none(self.final)  # type: ignore[no-any-return]


def _part_text(part: object) -> str:
    """What a content or summary part adds to the body (see the adapter's
    ``_parts_text`` and ``_reasoning_text``)."""
    if not isinstance(part, dict):
        return ""
    kind = part.get("type")
    if kind in ("output_text", "input_text", "summary_text", "reasoning_text"):
        text = part.get("text", "")
        return text if isinstance(text, str) else ""
    if kind == "refusal":
        text = part.get("refusal", "")
        return text if isinstance(text, str) else ""
    return f"[{kind}]"
