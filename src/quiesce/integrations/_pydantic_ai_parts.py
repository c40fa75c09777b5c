"""pydantic-ai messages ⇄ units: what :mod:`quiesce.integrations.pydantic_ai`
reads a run's history with and renders a window back into.

What it keeps true:

* **A message is held as the framework dumps it.** A unit's native form is
  ``ModelMessagesTypeAdapter``'s own JSON dump of the message (without the
  legacy id stamp), so a ``ThinkingPart``'s signature, binary content,
  provider fields and timestamps come back unchanged; its body is the text
  the policy classifies.
* **Every rendered window pairs.** :func:`pair_calls` answers each shown
  call in the request after it (a stand-in return for a pruned result) and
  drops results whose call is not shown.
* **The run's objects are never mutated.** A message trimmed to its live
  calls and results is a copy (:func:`rebuild`); an untouched one is given
  back as the very object the run gave.
* **quiesce's own parts never become entries.** The note
  ``SystemPromptPart`` and stand-in returns it rendered are recognised
  (:func:`is_quiesce_part`) and stripped (:func:`unnoted`) when handed back.

Imported by :mod:`quiesce.integrations.pydantic_ai` after its check that
pydantic-ai is installed. Everything here is sync and O(size of what it
reads or renders).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from .._core.buffer import Snapshot
from .._core.entry import Kind, canonical_json
from .._core.errors import InvalidArgument
from ..adapters._common import NOTE_PREFIX, fingerprint
from . import _store

__all__ = [
    "FRAMEWORK",
    "ID_KEY",
    "checked",
    "conversation_of",
    "dump_message",
    "first_key",
    "has_quiesce_parts",
    "held_dump",
    "history_reader",
    "init_fields",
    "is_quiesce_part",
    "load_message",
    "pair_calls",
    "read_unit",
    "rebuild",
    "render_given",
    "render_messages",
    "stand_in_part",
    "text_of",
    "to_units",
    "trimmed_dumps",
    "unnoted",
]

FRAMEWORK = "pydantic-ai"
#: The metadata key older versions stamped a rendered message's entry id under
#: (still read, never written).
ID_KEY = "quiesce"

_ASSISTANT_KINDS = frozenset({Kind.REASONING, Kind.RATIONALE, Kind.SUMMARY, Kind.TOOL_CALL})


def dump_message(m: ModelMessage) -> Any:
    return ModelMessagesTypeAdapter.dump_python([m], mode="json")[0]


def load_message(native: Any) -> ModelMessage:
    return ModelMessagesTypeAdapter.validate_python([native])[0]


def read_unit(index: int, m: object, known: str | None = None) -> _store.Unit:
    if not isinstance(m, ModelRequest | ModelResponse):
        raise InvalidArgument(
            f"pydantic-ai: message {index}: expected a ModelRequest or ModelResponse, "
            f"not {type(m).__name__}"
        )
    metadata = dict(m.metadata or {})
    mid = metadata.pop(ID_KEY, None)  # the stamp of quiesce < 0.2, still honoured
    if known is not None:
        mid = known
    if mid is not None and (not isinstance(mid, str) or not mid):
        raise InvalidArgument(f"pydantic-ai: message {index}: metadata[{ID_KEY!r}] is not an id")
    # Held without the id stamp, so a rendered copy and the original are one message.
    native = dump_message(m.__class__(**{**init_fields(m), "metadata": metadata or None}))
    texts: list[str] = []
    calls: list[_store.Call] = []
    results: list[_store.Result] = []
    kind = Kind.REASONING
    for j, part in enumerate(m.parts):
        where = f"pydantic-ai: message {index}: {type(m).__name__}.parts[{j}]"
        if isinstance(part, ToolCallPart):
            if not part.tool_call_id:
                raise InvalidArgument(f"{where} (ToolCallPart).tool_call_id is empty")
            args = part.args_as_json_str()
            calls.append(_store.Call(part.tool_call_id, part.tool_name, args))
        elif isinstance(part, ToolReturnPart):
            if not part.tool_call_id:
                raise InvalidArgument(f"{where} (ToolReturnPart).tool_call_id is empty")
            results.append(_store.Result(part.tool_call_id, part.model_response_str()))
        elif isinstance(part, RetryPromptPart):
            if part.tool_call_id and part.tool_name:
                results.append(_store.Result(part.tool_call_id, part.model_response()))
            else:
                texts.append(part.model_response())
        elif isinstance(part, SystemPromptPart | UserPromptPart):
            kind = Kind.INSTRUCTION
            content = part.content
            texts.append(content if isinstance(content, str) else text_of(content))
        elif isinstance(part, TextPart):
            texts.append(part.content)
        # ThinkingPart, builtin tool parts, files: kept whole in the dump.
    return _store.Unit(
        mid, kind, "\n".join(texts), native, calls=tuple(calls), results=tuple(results)
    )


def init_fields(m: ModelRequest | ModelResponse) -> dict[str, Any]:
    return {f.name: getattr(m, f.name) for f in dataclasses.fields(m) if f.init}


def text_of(content: Sequence[object]) -> str:
    return "\n".join(c for c in content if isinstance(c, str))


def to_units(
    messages: Sequence[object], known: Sequence[str | None] | None = None
) -> list[_store.Unit]:
    """pydantic-ai messages read into units (all checked before any is used);
    ``known[i]``, if given, is the entry id of message ``i`` (else it is
    matched by content).

    Raises :class:`InvalidArgument` naming the message index, the part and
    the field it cannot represent."""
    ids = list(known) if known is not None else [None] * len(messages)
    return [read_unit(i, m, k) for i, (m, k) in enumerate(zip(messages, ids, strict=True))]


def checked(messages: Sequence[object]) -> Sequence[object]:
    if not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
        raise InvalidArgument(
            f"pydantic-ai: messages must be a list, not {type(messages).__name__}"
        )
    return messages


def history_reader(
    known: Sequence[str | None] | None,
) -> Any:
    """``read(index, message)`` for :func:`~quiesce.integrations._store.sync_history`:
    the message without quiesce's parts (``None``: nothing else), read with
    its ``known`` entry id."""

    def read(index: int, m: object) -> _store.Unit | None:
        if isinstance(m, ModelRequest):
            stripped = unnoted([m])
            if not stripped:
                return None
            m = stripped[0]
        return read_unit(index, m, known[index] if known is not None else None)

    return read


def rebuild(slot: _store.Slot, original: ModelMessage | None = None) -> ModelMessage | None:
    """The message of ``slot``: ``original`` (the run's own object whose dump
    the slot holds) when given, trimmed to the slot's live calls and results
    as a copy; else built from the dump or, for a text slot, from its text."""
    if slot.native is None:
        if slot.results:
            part = ToolReturnPart(tool_name="tool", content=slot.text, tool_call_id=slot.results[0])
            return ModelRequest(parts=[part])
        if slot.calls or slot.kind in _ASSISTANT_KINDS:
            parts: list[Any] = [TextPart(slot.text)] if slot.text else []
            parts += [ToolCallPart(c.name, json.loads(c.arguments), c.call_id) for c in slot.calls]
            return ModelResponse(parts=parts)
        return ModelRequest(parts=[UserPromptPart(slot.text)])
    m = original if original is not None else load_message(slot.native)
    calls, results = slot.call_ids, set(slot.results)
    kept = [
        p
        for p in m.parts
        if not (isinstance(p, ToolCallPart) and p.tool_call_id not in calls)
        and not (isinstance(p, ToolReturnPart) and p.tool_call_id not in results)
        and not (
            isinstance(p, RetryPromptPart)
            and p.tool_call_id
            and p.tool_name
            and p.tool_call_id not in results
        )
    ]
    if not kept:
        return None
    if len(kept) == len(m.parts):
        return m
    return dataclasses.replace(m, parts=kept)  # type: ignore[arg-type]


def pair_calls(
    messages: list[ModelMessage], unit_of: dict[int, str] | None = None
) -> list[ModelMessage]:
    """Each response's calls answered in the request after it (stand-ins for
    pruned results); result parts whose call is not shown are dropped.
    ``unit_of`` (``id()`` of a message → its entry id) is extended with each
    copy made here."""
    out: list[ModelMessage] = []
    open_calls: dict[str, str] = {}
    for m in messages:
        if isinstance(m, ModelRequest):
            parts = [
                p
                for p in m.parts
                if not isinstance(p, ToolReturnPart | RetryPromptPart)
                or not p.tool_call_id
                or not getattr(p, "tool_name", None)
                or p.tool_call_id in open_calls
            ]
            answered = {p.tool_call_id for p in parts if isinstance(p, ToolReturnPart)} | {
                p.tool_call_id for p in parts if isinstance(p, RetryPromptPart) and p.tool_name
            }
            stand_ins = [
                ToolReturnPart(
                    tool_name=name, content=_store.stand_in(call_id), tool_call_id=call_id
                )
                for call_id, name in open_calls.items()
                if call_id not in answered
            ]
            open_calls = {}
            if len(parts) != len(m.parts) or stand_ins:
                copy = dataclasses.replace(m, parts=[*stand_ins, *parts])  # never the run's object
                if unit_of is not None and id(m) in unit_of:
                    unit_of[id(copy)] = unit_of[id(m)]
                m = copy
            if m.parts:
                out.append(m)
            continue
        if open_calls:
            out.append(ModelRequest(parts=[stand_in_part(i, n) for i, n in open_calls.items()]))
        open_calls = {p.tool_call_id: p.tool_name for p in m.parts if isinstance(p, ToolCallPart)}
        out.append(m)
    if open_calls:
        out.append(ModelRequest(parts=[stand_in_part(i, n) for i, n in open_calls.items()]))
    return out


def stand_in_part(call_id: str, name: str) -> ToolReturnPart:
    return ToolReturnPart(tool_name=name, content=_store.stand_in(call_id), tool_call_id=call_id)


def render_messages(snap: Snapshot, originals: Sequence[ModelMessage] = ()) -> list[ModelMessage]:
    """The window of ``snap`` as pydantic-ai messages, paired, with the quiesce
    note (if any) as a ``SystemPromptPart`` of the first request. A slot
    whose dump equals the dump of one of ``originals`` is given back as that
    object (or a trimmed copy of it; ``originals`` are never mutated). O(n)."""
    by_dump: dict[str, list[ModelMessage]] = {}
    for m in originals:
        by_dump.setdefault(canonical_json(held_dump(m)), []).append(m)
    given: dict[str, ModelMessage] = {}
    for slot in _store.window(snap, FRAMEWORK):
        same = by_dump.get(canonical_json(slot.native)) if slot.native is not None else None
        if same:
            given[slot.unit] = same.pop(0)
    return render_given(snap, given)[0]


def render_given(
    snap: Snapshot,
    given: dict[str, ModelMessage],
    state: _store.SyncState | None = None,
    loaded: dict[str, tuple[Any, ModelMessage]] | None = None,
) -> tuple[list[ModelMessage], dict[int, str]]:
    """:func:`render_messages` with ``given`` (entry id → the run's own
    object holding that entry's dump), and the entry id each rendered
    message stands for (by ``id()``; stand-in requests and the note's own
    request stand for none). ``state`` reuses thawed dumps, ``loaded``
    (entry id → (dump, message)) messages built from an unchanged dump:
    O(n) look-ups plus the messages built from new dumps."""
    unit_of: dict[int, str] = {}
    rebuilt: list[ModelMessage] = []
    fresh: dict[str, tuple[Any, ModelMessage]] = {}
    for slot in _store.window(snap, FRAMEWORK, state):
        original = given.get(slot.unit) if slot.native is not None else None
        if original is None and slot.native is not None and loaded is not None:
            hit = loaded.get(slot.unit)
            reuse = hit is not None and hit[0] is slot.native
            original = hit[1] if hit is not None and reuse else load_message(slot.native)
            fresh[slot.unit] = (slot.native, original)
        shown = rebuild(slot, original)
        if shown is None:
            continue
        unit_of[id(shown)] = slot.unit
        rebuilt.append(shown)
    if loaded is not None:
        loaded.clear()
        loaded.update(fresh)
    messages = pair_calls(rebuilt, unit_of)
    note = _store.notes(snap)
    if note is not None:
        if messages and isinstance(messages[0], ModelRequest):
            first = messages[0]
            messages[0] = dataclasses.replace(first, parts=[SystemPromptPart(note), *first.parts])
            if id(first) in unit_of:
                unit_of[id(messages[0])] = unit_of[id(first)]
        else:
            messages.insert(0, ModelRequest(parts=[SystemPromptPart(note)]))
    return messages, {id(m): unit_of[id(m)] for m in messages if id(m) in unit_of}


def held_dump(m: ModelMessage) -> Any:
    """The dump a message is held as (without a legacy id stamp)."""
    metadata = dict(m.metadata or {})
    if metadata.pop(ID_KEY, None) is None:
        return dump_message(m)
    return dump_message(m.__class__(**{**init_fields(m), "metadata": metadata or None}))


def has_quiesce_parts(m: object) -> bool:
    return isinstance(m, ModelRequest) and any(is_quiesce_part(p) for p in m.parts)


def unnoted(messages: Sequence[ModelMessage]) -> list[ModelMessage]:
    """``messages`` without the parts quiesce rendered into them before (its
    note ``SystemPromptPart`` and stand-in returns), which the run hands back
    and which never become entries. Untouched messages stay the same objects;
    a message left without parts is dropped. O(parts)."""
    out: list[ModelMessage] = []
    for m in messages:
        if not isinstance(m, ModelRequest):
            out.append(m)
            continue
        parts = [p for p in m.parts if not is_quiesce_part(p)]
        if len(parts) == len(m.parts):
            out.append(m)
        elif parts:
            out.append(dataclasses.replace(m, parts=parts))
    return out


def is_quiesce_part(p: object) -> bool:
    if isinstance(p, SystemPromptPart):
        return p.content.startswith(NOTE_PREFIX)
    if isinstance(p, ToolReturnPart):
        return p.content == _store.stand_in(p.tool_call_id)
    return False


def trimmed_dumps(snap: Snapshot) -> dict[str, str]:
    """The dump of each message the window shows trimmed (some of its calls or
    results pruned), keyed to its entry id: how a trimmed copy handed back is
    recognised. O(n)."""
    out: dict[str, str] = {}
    for slot in _store.window(snap, FRAMEWORK):
        if slot.native is None:
            continue
        shown = rebuild(slot)
        if shown is not None:
            dump = canonical_json(dump_message(shown))
            if dump != canonical_json(slot.native):
                out[dump] = slot.unit
    return out


def conversation_of(ctx: object) -> str | None:
    """pydantic-ai's conversation id of the run (``None`` before 1.x had one)."""
    conversation = getattr(ctx, "conversation_id", None)
    return conversation if isinstance(conversation, str) and conversation else None


def first_key(messages: Sequence[ModelMessage]) -> str | None:
    return fingerprint(held_dump(messages[0])) if messages else None
