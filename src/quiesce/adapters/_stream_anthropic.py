"""Anthropic Messages stream events (``RawMessageStreamEvent`` or their dicts)
into open entries: the reader :func:`quiesce.adapters.anthropic.append_stream`
runs (:func:`~quiesce.adapters._stream.run_stream`).

What it keeps true (see :mod:`quiesce.adapters._stream` for what every
stream keeps): the message it returns is the SDK's — what
``accumulate_event`` builds, as ``{"role": ..., "content": [blocks]}`` with
every ``None`` field left out. Per block, by its type:

* ``text``: an open entry from its first text, one ``write`` per
  ``text_delta``; closed at ``content_block_stop`` with the final block
  (``citations`` from ``citations_delta`` included);
* ``thinking``: an open entry never rendered; *sealed* when its
  ``signature_delta`` arrives (closed with ``{"type": "thinking",
  "thinking": ..., "signature": ...}``), after which a thinking delta is
  malformed; a block that stops unsigned is aborted (it stays, unrendered);
* ``tool_use`` / ``server_tool_use``: ``input_json_delta`` fragments are
  joined and parsed at ``content_block_stop``, then the ``TOOL_CALL`` is
  appended — never before;
* any other block (``redacted_thinking``, ``web_search_tool_result``…) comes
  whole in ``content_block_start`` and is appended at its stop.

Every block after a signed one cites it, as ``append_messages`` does. A
``content_block_start`` whose index is not the next block's, a delta or stop
for an index with no open block, a delta of the wrong kind for its block, or
an unknown event type is malformed; an ``error`` event is a
:class:`~quiesce.adapters.StreamFailed`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .._core.entry import SEALED_TYPES, Entry, Kind, canonical_json, freeze, result_id, thaw
from .._core.errors import QuiesceError
from ._common import RESERVED
from ._stream import (
    ASSEMBLERS,
    Sink,
    StreamFailed,
    as_event,
    event_type,
    field,
    malformed,
    plain_event,
    register_streamed,
    stream_key,
)

API = "anthropic"

_CALLS = ("tool_use", "server_tool_use")

#: Which block type each delta type belongs to.
_DELTA_BLOCK = {
    "text_delta": ("text",),
    "citations_delta": ("text",),
    "thinking_delta": ("thinking",),
    "signature_delta": ("thinking",),
    "input_json_delta": _CALLS,
}

_IGNORED = frozenset({"message_delta", "ping"})


class _Block:
    __slots__ = ("citations", "eid", "json", "kind", "signed", "start", "stopped", "text", "writer")

    def __init__(self, kind: str, start: dict[str, Any]) -> None:
        self.kind = kind
        self.start = start
        self.text: list[str] = []
        self.json: list[str] = []
        self.citations: list[Any] = []
        self.writer: Any = None
        self.eid: str | None = None
        self.signed = False
        self.stopped = False


class AnthropicStream:
    """One Messages stream: its blocks and their entries."""

    def __init__(
        self, sink: Sink, assistant_kind: Kind, block_text: Any, is_server_result: Any
    ) -> None:
        self.sink = sink
        self.kind = assistant_kind
        self.block_text = block_text
        self.is_server_result = is_server_result
        self.blocks: list[_Block] = []
        self.final_blocks: list[dict[str, Any] | None] = []
        self.signed: list[str] = []
        self.ids: list[str] = []
        self.role = "assistant"
        self.base: object = None
        self.key: str | None = None
        self.started = False
        self.final: dict[str, Any] | None = None

    def _key(self) -> str:
        if self.key is None:
            self.key = stream_key(self.sink.head(), self.base, self.sink.taken)
        return self.key

    def _meta(self, kind: str) -> dict[str, Any]:
        return {
            "api": API,
            "role": self.role,
            "msg": self._key(),
            "after": None,
            "form": "blocks",
            "block": kind,
        }

    # -- events ---------------------------------------------------------------

    def handle(self, index: int, event: object) -> None:
        if type(event) is not dict:
            # The fast path: a text delta of an SDK event for an open text
            # block (most events of a stream), read as plain attributes (an
            # SDK event's fields are instance attributes; anything else falls
            # through to the checks below).
            w = None
            try:
                if event.type == "content_block_delta":  # type: ignore[attr-defined]
                    delta = event.delta  # type: ignore[attr-defined]
                    n = event.index  # type: ignore[attr-defined]
                    if delta.type == "text_delta" and type(n) is int and n >= 0:
                        b = self.blocks[n]
                        text = delta.text
                        if b.kind == "text" and not b.stopped and type(text) is str:
                            w = b.writer
            except (AttributeError, IndexError):
                pass
            if w is not None:
                if text:
                    w.write(text)  # its text is the block's from now on
                return
        kind = event_type(index, event)
        if kind == "message_start":
            if self.started:
                raise malformed(index, "a second message_start")
            self.started = True
            message = field(event, "message")
            self.base = field(message, "id")
            role = field(message, "role")
            if role not in (None, "assistant"):
                raise malformed(index, f"message.role must be 'assistant', not {role!r}")
            for block in field(message, "content") or ():
                self._start(index, len(self.blocks), block)
                self._stop(index, len(self.blocks) - 1)
            return
        if kind == "error":
            error = plain_event(field(event, "error"))
            raise StreamFailed(
                f"event {index}: the stream reported an error: {error!r}", index, error
            )
        if not self.started:
            raise malformed(index, f"{kind!r} before message_start")
        if kind == "content_block_start":
            self._start(index, field(event, "index"), field(event, "content_block"))
        elif kind == "content_block_delta":
            self._delta(index, self._open(index, event), field(event, "delta"))
        elif kind == "content_block_stop":
            self._stop(index, self._open(index, event, stop=True))
        elif kind == "message_stop":
            return
        elif kind not in _IGNORED:
            raise malformed(index, f"unknown event type {kind!r}")

    def _open(self, index: int, event: object, *, stop: bool = False) -> int:
        n = field(event, "index")
        if type(n) is not int or not 0 <= n < len(self.blocks) or self.blocks[n].stopped:
            what = "content_block_stop" if stop else "content_block_delta"
            raise malformed(index, f"{what}: index {n!r} has no open block")
        return n

    def _start(self, index: int, n: object, raw: object) -> None:
        if n != len(self.blocks):
            raise malformed(
                index, f"content_block_start: index {n!r}, but the next block is {len(self.blocks)}"
            )
        block = plain_event(raw)
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise malformed(index, "content_block_start: content_block must be a block with a type")
        b = _Block(block["type"], block)
        self.blocks.append(b)
        self.final_blocks.append(None)
        if b.kind == "text":
            text = block.get("text", "")
            if not isinstance(text, str):
                raise malformed(index, "content_block.text must be a str", type_error=True)
            b.citations = list(block.get("citations") or ())
            self._write(index, b, text)
        elif b.kind == "thinking":
            text = block.get("thinking", "")
            if not isinstance(text, str):
                raise malformed(index, "content_block.thinking must be a str", type_error=True)
            self._write(index, b, text)

    def _write(self, index: int, b: _Block, text: str) -> None:
        b.text.append(text)
        if not text:
            return
        w = b.writer
        if w is None:
            n = len(self.blocks) - 1 if b is self.blocks[-1] else self.blocks.index(b)
            b.eid = f"{self._key()}{RESERVED}{n}"
            w = b.writer = self.sink.open(b.eid, self.kind, self._meta(b.kind), tuple(self.signed))
        w.write(text)

    def _delta(self, index: int, n: int, delta: object) -> None:
        b = self.blocks[n]
        dtype = field(delta, "type")
        owners = _DELTA_BLOCK.get(dtype) if isinstance(dtype, str) else None
        if owners is None:
            raise malformed(index, f"content_block_delta: unknown delta type {dtype!r}")
        if b.kind not in owners:
            raise malformed(index, f"content_block_delta: a {dtype} for the {b.kind} block {n}")
        if dtype == "text_delta" or dtype == "thinking_delta":
            name = "text" if dtype == "text_delta" else "thinking"
            text = field(delta, name)
            if type(text) is not str:
                raise malformed(index, f"delta.{name} must be a str", type_error=True)
            if b.signed:
                raise malformed(index, f"a thinking_delta after block {n}'s signature")
            self._write(index, b, text)
        elif dtype == "input_json_delta":
            part = field(delta, "partial_json")
            if type(part) is not str:
                raise malformed(index, "delta.partial_json must be a str", type_error=True)
            b.json.append(part)
        elif dtype == "citations_delta":
            b.citations.append(plain_event(field(delta, "citation")))
        else:  # signature_delta: the block is final
            sig = field(delta, "signature")
            if type(sig) is not str:
                raise malformed(index, "delta.signature must be a str", type_error=True)
            if b.signed:
                raise malformed(index, f"a second signature for block {n}")
            block = {**b.start, "thinking": _joined(b), "signature": sig}
            b.signed = True
            self.final_blocks[n] = block
            if b.writer is not None:
                assert b.eid is not None
                self.sink.close(b.eid, block)
                self.signed.append(b.eid)
            else:
                self._whole(index, n, block)

    def _stop(self, index: int, n: int) -> None:
        b = self.blocks[n]
        b.stopped = True
        if b.kind == "text":
            block = {**b.start, "text": _joined(b)}
            if b.citations:
                block["citations"] = b.citations
            self.final_blocks[n] = block
            if b.writer is not None:
                assert b.eid is not None
                self.sink.close(b.eid, block)
            else:
                self._whole(index, n, block)
        elif b.kind == "thinking":
            if not b.signed:
                self.final_blocks[n] = {**b.start, "thinking": _joined(b)}
                if b.writer is not None:
                    w = self.sink.writers.pop(b.writer.id)
                    w.abort("stream interrupted: the thinking block ended without a signature")
        elif b.kind in _CALLS:
            block = dict(b.start)
            if b.json:
                text = "".join(b.json)
                try:
                    block["input"] = json.loads(text) if text else {}
                except ValueError as exc:
                    raise malformed(
                        index, f"{b.kind} block {n}: input is not valid JSON: {exc}"
                    ) from None
            self.final_blocks[n] = block
            self._whole(index, n, block)
        else:
            self.final_blocks[n] = b.start
            self._whole(index, n, b.start)

    def _whole(self, index: int, n: int, block: dict[str, Any]) -> None:
        """The entry ``append_messages`` makes of block ``n``, queued."""
        kind = block["type"]
        meta = self._meta(kind)
        refs: tuple[str, ...] = tuple(self.signed)
        call_key: str | None = None
        try:
            if kind in _CALLS:
                eid = _foreign(index, block.get("id"), f"content[{n}].id")
                name = block.get("name")
                if not isinstance(name, str) or not name:
                    raise malformed(index, f"content[{n}].name must be a non-empty str")
                tool_input = block.get("input")
                if not isinstance(tool_input, dict):
                    raise malformed(index, f"content[{n}].input must be a dict", type_error=True)
                arguments = canonical_json(freeze(tool_input, "input"))
                body = call_key = f"{name} {arguments}"
                ekind = Kind.TOOL_CALL
                meta.update(tool=name, arguments=arguments)
            elif kind == "tool_result":
                raise malformed(
                    index, f"content[{n}]: a tool_result block belongs in a user message"
                )
            elif self.is_server_result(block):
                call_id = _foreign(index, block.get("tool_use_id"), f"content[{n}].tool_use_id")
                if call_id not in self.ids:
                    raise malformed(
                        index, f"content[{n}].tool_use_id {call_id!r} answers no earlier tool_use"
                    )
                body = f"[{kind}]"
                eid = result_id(call_id)
                ekind = Kind.TOOL_OUTPUT
                refs = (call_id,)
            else:
                body = self.block_text(0, block, kind, f"content[{n}]")
                eid = f"{self._key()}{RESERVED}{n}"
                ekind = self.kind
            e = Entry(eid, ekind, body, refs, self.sink.turn, call_key, meta, block)
        except QuiesceError as exc:
            raise as_event(index, exc) from None
        if e.id in self.ids:
            raise malformed(index, f"content[{n}]: id {e.id!r} is used twice")
        self.ids.append(e.id)
        self.blocks[n].eid = e.id
        if kind in SEALED_TYPES:
            self.signed.append(e.id)
        self.sink.add(index, e)

    def finish(self, count: int) -> None:
        if not self.started:
            raise malformed(count, "the stream ended before message_start")
        for n, b in enumerate(self.blocks):
            if not b.stopped:
                self._stop(count, n)
        blocks = [b for b in self.final_blocks if b is not None]
        self.final = {"role": self.role, "content": blocks}

    def entry_ids(self) -> list[str]:
        """The message's entries, in block order."""
        return [b.eid for b in self.blocks if b.eid is not None]

    def result(self) -> dict[str, Any]:
        """The final message, remembered as the entries it streamed into (a
        sync given it back finds them)."""
        final = self.final
        assert final is not None
        register_streamed(self.sink.local, API, final, self.entry_ids())
        return final


def assemble(entries: list[Entry]) -> dict[str, Any] | None:
    """The message a streamed message's entries (window order, one per
    block) make: its role and the blocks' contents; ``None`` if a block has
    none (a thinking block aborted unsigned)."""
    if not all(isinstance(e.content, Mapping) for e in entries):
        return None
    role = entries[0].meta.get("role", "assistant")
    return {"role": role, "content": [thaw(e.content) for e in entries]}


ASSEMBLERS[API] = assemble


def _joined(b: _Block) -> str:
    """The block's text: its open entry's once it has one (every delta after
    the first goes only there), else the pieces that arrived (all empty but
    perhaps the start's)."""
    return b.writer.text if b.writer is not None else "".join(b.text)


def _foreign(index: int, value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise malformed(index, f"{what} must be a non-empty str")
    if RESERVED in value:
        raise malformed(index, f"{what} {value!r} contains {RESERVED!r}, which quiesce reserves")
    return value
