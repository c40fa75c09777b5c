"""Chat Completions chunks (``ChatCompletionChunk`` or their dicts) into open
entries: the reader :func:`quiesce.adapters.openai.append_stream` runs
(:func:`~quiesce.adapters._stream.run_stream`).

What it keeps true (see :mod:`quiesce.adapters._stream` for what every
stream keeps): the message it returns is the SDK's —
``ChatCompletionStreamState().get_final_completion().choices[0].message``
dumped with its ``None`` fields left out, a tool call's ``index`` included —
because it accumulates as the SDK's ``accumulate_delta`` does (strings
concatenated, lists of dicts merged by their ``index``, ``index`` and
``type`` replaced); the text fields that make an entry's body (``content``,
``refusal``, ``reasoning_content``) go straight into the message's open
entry, one ``write`` per delta, in the order they arrive (the body is
``append_messages``'s when they arrive in that order, as models send them).

A tool call is complete when a delta for another call arrives or the stream
ends; it is appended then (a ``TOOL_CALL`` with its id, ``key`` and meta as
``append_messages`` makes them), never before. A delta for a call already
complete, a second choice (``n > 1``), a tool call without an int
``index``, or text that is not a str is a malformed event.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._core.entry import Entry, Kind, thaw
from .._core.errors import QuiesceError
from ._stream import (
    ASSEMBLERS,
    Sink,
    as_event,
    drop_none,
    malformed,
    plain_event,
    register_streamed,
    stream_key,
)

API = "openai"

#: The delta fields streamed into the message's entry, in its body's order.
TEXT_FIELDS = ("content", "refusal", "reasoning_content")
_TEXT_SET = frozenset(TEXT_FIELDS)
_PLAIN = (str, int, float, bool)


def _fields(obj: object) -> dict[str, Any] | None:
    """A dict as it is; an SDK (pydantic) object as its fields' values plus
    its extra fields — read from ``__dict__``, no dump and no attribute
    lookup per field; ``None`` for anything else."""
    if type(obj) is dict:
        return obj
    values = getattr(obj, "__dict__", None)
    if type(values) is not dict:
        return None
    extra = getattr(obj, "__pydantic_extra__", None)
    return {**values, **extra} if extra else values


def merge_delta(acc: dict[str, Any], delta: Mapping[str, Any]) -> dict[str, Any]:
    """The SDK's ``accumulate_delta`` (``openai/lib/streaming/_deltas.py``)
    on plain dicts without ``None`` values: strings concatenate, numbers
    add, dicts merge, lists of dicts merge by ``index``, other lists extend;
    ``index`` and ``type`` are replaced. Mutates and returns ``acc``."""
    for key, value in delta.items():
        if key not in acc or acc[key] is None:
            if _indexed(value):
                acc[key] = []
            else:
                acc[key] = _copy(value)
                continue
        have = acc[key]
        if key in ("index", "type"):
            acc[key] = value
        elif (isinstance(have, str) and isinstance(value, str)) or (
            isinstance(have, int | float) and isinstance(value, int | float)
        ):
            acc[key] = have + value  # type: ignore[operator]
        elif isinstance(have, dict) and isinstance(value, dict):
            merge_delta(have, value)
        elif isinstance(have, list) and isinstance(value, list):
            if all(isinstance(x, str | int | float) for x in have) and (
                have or not _indexed(value)
            ):
                have.extend(value)
                continue
            for item in value:
                if not isinstance(item, dict) or type(item.get("index")) is not int:
                    raise TypeError(f"a list delta entry needs an int index: {item!r}")
                n = item["index"]
                if n < len(have):
                    merge_delta(have[n], item)
                else:
                    have.insert(n, _copy(item))
    return acc


def _indexed(value: object) -> bool:
    return isinstance(value, list) and any(isinstance(x, dict) and "index" in x for x in value)


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _tool_call_delta(tc: object) -> dict[str, Any]:
    """A tool-call delta as a plain dict without ``None`` fields (attribute
    reads for SDK objects: no dump per delta)."""
    if type(tc) is dict:
        return drop_none(tc)  # type: ignore[no-any-return]
    out: dict[str, Any] = {}
    for name in ("index", "id", "type"):
        value = getattr(tc, name, None)
        if value is not None:
            out[name] = value
    fn = getattr(tc, "function", None)
    if fn is not None:
        f: dict[str, Any] = {}
        for name in ("name", "arguments"):
            value = getattr(fn, name, None)
            if value is not None:
                f[name] = value
        out["function"] = f
    extra = getattr(tc, "__pydantic_extra__", None)
    if extra:
        out.update(drop_none(plain_event(extra)))
    return out


class ChatStream:
    """One Chat Completions stream: the accumulated message and its entries."""

    def __init__(self, sink: Sink, assistant_kind: Kind, call: Any, read: Any) -> None:
        self.sink = sink
        self.kind = assistant_kind
        self.call = call
        self.read = read
        self.acc: dict[str, Any] = {}
        self.texts: dict[str, list[str]] = {}
        self.calls: list[dict[str, Any]] = []
        self.current: int | None = None
        self.done: set[int] = set()
        self.call_ids: list[str] = []
        self.key: str | None = None
        self.base: object = None
        self.writer: Any = None
        self.last_field: str | None = None
        self.final: dict[str, Any] | None = None

    # -- events ---------------------------------------------------------------

    def handle(self, index: int, chunk: object) -> None:
        c = _fields(chunk)
        if c is None:
            raise malformed(
                index,
                f"must be a ChatCompletionChunk or its dict, not {type(chunk).__name__}",
                type_error=True,
            )
        if self.base is None:
            self.base = c.get("id") or "chat"
        choices = c.get("choices")
        if not choices:
            return
        for choice in choices:
            ch = _fields(choice)
            n = None if ch is None else ch.get("index")
            if n != 0:
                raise malformed(index, f"choice index {n!r}: append_stream reads one choice (n=1)")
            assert ch is not None
            delta = ch.get("delta")
            if delta is not None:
                self._delta(index, delta)

    def _delta(self, index: int, delta: object) -> None:
        values = _fields(delta)
        if values is None:
            raise malformed(index, "delta must be a dict or an SDK object", type_error=True)
        texts: list[tuple[str, Any]] = []
        calls: Any = None
        rest: dict[str, Any] = {}
        for k, v in values.items():
            if v is None:
                continue
            if k in _TEXT_SET:
                texts.append((k, v))
            elif k == "tool_calls":
                calls = v
            else:
                rest[k] = v if type(v) in _PLAIN else plain_event(v)
        if len(texts) > 1:
            texts.sort(key=lambda t: TEXT_FIELDS.index(t[0]))
        if rest:
            try:
                merge_delta(self.acc, rest)
            except TypeError as exc:
                raise malformed(index, str(exc), type_error=True) from None
        for name, text in texts:
            if type(text) is not str:
                raise malformed(
                    index, f"delta.{name} must be a str, not {type(text).__name__}", type_error=True
                )
            parts = self.texts.get(name)
            if parts is None:
                parts = self.texts[name] = []
            parts.append(text)
            if text:
                self._write(name, text)
        if calls:
            for tc in calls:
                self._call_delta(index, _tool_call_delta(tc))

    def _write(self, name: str, text: str) -> None:
        w = self.writer
        if w is None:
            key = self._key()
            meta = {"api": API, "role": self._role(), "msg": key, "after": None}
            w = self.writer = self.sink.open(key, self.kind, meta)
        elif name != self.last_field and w.text:
            text = "\n" + text
        self.last_field = name
        w.write(text)

    def _call_delta(self, index: int, d: dict[str, Any]) -> None:
        n = d.get("index")
        if type(n) is not int or n < 0:
            raise malformed(index, f"tool_calls[].index must be an int >= 0, not {n!r}")
        if n in self.done:
            raise malformed(index, f"tool_calls[{n}] continues after it was complete")
        call_id = d.get("id")
        if isinstance(call_id, str) and "#" in call_id:  # (the adapter's rule, at its event)
            raise malformed(
                index, f"tool_calls[{n}].id {call_id!r} contains '#', which quiesce reserves"
            )
        if self.current is not None and n != self.current:
            self._complete(index, self.current)
        self.current = n
        try:
            merge_delta({"calls": self.calls}, {"calls": [d]})
        except TypeError as exc:
            raise malformed(index, str(exc), type_error=True) from None

    def _complete(self, index: int, n: int) -> None:
        """Tool call ``n`` has all its arguments: append it."""
        self.done.add(n)
        if n >= len(self.calls):
            return
        raw = self.calls[n]
        try:
            call_id, name, arguments = self.call(0, n, raw, set(self.call_ids))
        except QuiesceError as exc:
            raise as_event(index, exc) from None
        self.call_ids.append(call_id)
        key = self._key()
        env = {k: v for k, v in self._message().items() if k != "tool_calls"}
        meta = {
            "api": API,
            "role": "assistant",
            "msg": key,
            "after": None,
            "tool": name,
            "arguments": arguments,
            "env": env,
        }
        call_key = f"{name} {arguments}"
        try:
            e = Entry(call_id, Kind.TOOL_CALL, call_key, (), self.sink.turn, call_key, meta, raw)
        except QuiesceError as exc:
            raise as_event(index, exc) from None
        self.sink.add(index, e)

    def finish(self, count: int) -> None:
        if self.current is not None and self.current not in self.done:
            self._complete(count, self.current)
        final = self.final = self._message()
        if self.writer is not None:
            content = {k: v for k, v in final.items() if k != "tool_calls"}
            self.sink.close(self.writer.id, content)
        elif not self.calls:
            self._whole(count, final)

    def _whole(self, index: int, final: dict[str, Any]) -> None:
        """A message with no text and no call (``content`` ``""`` or none):
        appended whole, as ``append_messages`` reads it."""
        try:
            reads = self.sink.read(self.read, [final], self.kind)
        except QuiesceError as exc:
            raise as_event(index, exc) from None
        self.sink.pending.extend(reads)

    # -- the message ----------------------------------------------------------

    def _role(self) -> str:
        role = self.acc.get("role")
        return role if isinstance(role, str) and role else "assistant"

    def _key(self) -> str:
        if self.key is None:
            self.key = stream_key(self.sink.head(), self.base, self.sink.taken)
        return self.key

    def _message(self) -> dict[str, Any]:
        out: dict[str, Any] = _copy(self.acc)
        for name, parts in self.texts.items():
            have = out.get(name)
            text = "".join(parts)
            out[name] = have + text if isinstance(have, str) else text
        if self.calls:
            out["tool_calls"] = _copy(self.calls)
        return out

    def ids(self) -> list[str]:
        """The entries of the message, in window order."""
        out = [self.writer.id] if self.writer is not None else []
        return out + [i for i in self.sink.appended]

    def result(self) -> dict[str, Any]:
        """The final message, its ``None`` fields left out, remembered as
        the entries it streamed into (a sync given it back finds them)."""
        final = self.final
        assert final is not None
        register_streamed(self.sink.local, API, final, self.ids())
        return drop_none(final)  # type: ignore[no-any-return]


def assemble(entries: list[Entry]) -> dict[str, Any] | None:
    """The message a streamed message's entries (window order) make: the
    text entry's content with the calls' as ``tool_calls``; ``None`` without
    a closed text entry (calls alone are matched by their ids)."""
    text = [e for e in entries if e.kind is not Kind.TOOL_CALL]
    if len(text) != 1 or not isinstance(text[0].content, Mapping):
        return None
    out: dict[str, Any] = thaw(text[0].content)
    calls = [thaw(e.content) for e in entries if e.kind is Kind.TOOL_CALL]
    if calls:
        out["tool_calls"] = calls
    return out


ASSEMBLERS[API] = assemble
