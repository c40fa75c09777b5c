"""pydantic-ai: :class:`QuiesceHistoryProcessor`, a history processor.

Use it as ``Agent(..., capabilities=[ProcessHistory(QuiesceHistoryProcessor(buf))])``
(pydantic-ai 2.x; 1.x also took ``history_processors=[fn]``, which 2.x removed:
the processor is a plain async ``(ctx, messages) -> messages`` callable and
fits both). What it keeps true, before each model request:

* the run's conversation picks the buffer: ``ctx.conversation_id`` (one
  buffer per conversation in a :class:`~quiesce.BufferPool`; a single buffer
  is bound to the first conversation and raises
  :class:`~quiesce.ConversationMismatch` for another, before the model is
  called).
* the run's messages are synced into the buffer, as a faithful diff of the
  history last synced (:func:`quiesce.integrations._store.sync_history`): a
  message gone from the run's history is a prune request through the policy
  (a protected one stays, the removal escalated). pydantic-ai messages carry
  no ids: a message is matched by content (a stale copy of a pruned message
  is not re-appended), and a message object the processor itself built (a
  trimmed or rewritten one, handed back by the run) by the processor's weak
  record of what it returned; quiesce's note and stand-in parts handed back
  are stripped and never become entries. Nothing is added to the messages
  (no ``metadata`` the model would not have). The same objects handed back
  are one pass of identity checks. Each message is held as
  ``ModelMessagesTypeAdapter``'s own JSON dump: ``ThinkingPart`` with its
  ``signature``, images and binary ``UserPromptPart`` content, provider
  fields and timestamps come back unchanged.
* the configured pruner runs once; then the window of a pinned snapshot is
  returned: pruned ``ToolCallPart``\\ s and their ``ToolReturnPart`` /
  ``RetryPromptPart`` leave together, a result pruned while its call stays is
  replaced by a stand-in return, and the note of removals and stale marks is
  a ``SystemPromptPart`` added to the first request.
* transparent when idle: every message quiesce did not change is returned
  as the very object the run gave (``BinaryContent`` stays ``BinaryContent``,
  never the ``BinaryImage`` a JSON round trip makes of it); the user's
  message objects are never mutated (a trimmed message is a copy).

pydantic-ai's ``ProcessHistory`` writes the processed list back into the
run's history (``ctx.messages[:] = ...``); the buffer keeps the full history
either way, and ``result.all_messages()`` carries the ids that let a new run
continue over a reopened buffer.

pydantic-ai runs its tools with asyncio tasks: it runs on **asyncio only**.
"""

from __future__ import annotations

import dataclasses
import json
import weakref
from collections.abc import AsyncIterable, Sequence
from typing import Any

from .._core.buffer import Buffer, Snapshot
from .._core.entry import Kind, canonical_json, thaw
from .._core.errors import InvalidArgument
from .._pool import BufferPool, ConversationMismatch
from .._protocol import AsyncBuffer, async_buffer
from ..adapters._common import NOTE_PREFIX, ReadmitPolicy, SyncReport, fingerprint
from ..pruner import Pruner
from . import _store, _stream
from ._conversation import Target, anonymous_id
from ._glue import framework_imports, prune_round

with framework_imports("pydantic-ai", "pydantic-ai"):
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.messages import (
        AgentStreamEvent,
        ModelMessage,
        ModelMessagesTypeAdapter,
        ModelRequest,
        ModelResponse,
        PartDeltaEvent,
        PartStartEvent,
        RetryPromptPart,
        SystemPromptPart,
        TextPart,
        TextPartDelta,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.tools import RunContext

__all__ = [
    "QuiesceHistoryProcessor",
    "QuiesceStream",
    "render_messages",
    "sync_messages",
    "to_units",
]

FRAMEWORK = "pydantic-ai"
#: The metadata key older versions stamped a rendered message's entry id under
#: (still read, never written).
ID_KEY = "quiesce"

_ASSISTANT_KINDS = frozenset({Kind.REASONING, Kind.RATIONALE, Kind.SUMMARY, Kind.TOOL_CALL})


def _dump(m: ModelMessage) -> Any:
    return ModelMessagesTypeAdapter.dump_python([m], mode="json")[0]


def _load(native: Any) -> ModelMessage:
    return ModelMessagesTypeAdapter.validate_python([native])[0]


def _unit(index: int, m: object, known: str | None = None) -> _store.Unit:
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
    native = _dump(m.__class__(**{**_fields(m), "metadata": metadata or None}))
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
            texts.append(content if isinstance(content, str) else _text_of(content))
        elif isinstance(part, TextPart):
            texts.append(part.content)
        # ThinkingPart, builtin tool parts, files: kept whole in the dump.
    return _store.Unit(
        mid, kind, "\n".join(texts), native, calls=tuple(calls), results=tuple(results)
    )


def _fields(m: ModelRequest | ModelResponse) -> dict[str, Any]:
    return {f.name: getattr(m, f.name) for f in dataclasses.fields(m) if f.init}


def _text_of(content: Sequence[object]) -> str:
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
    return [_unit(i, m, k) for i, (m, k) in enumerate(zip(messages, ids, strict=True))]


def _checked(messages: Sequence[object]) -> Sequence[object]:
    if not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
        raise InvalidArgument(
            f"pydantic-ai: messages must be a list, not {type(messages).__name__}"
        )
    return messages


def _reader(
    known: Sequence[str | None] | None,
) -> Any:
    """``read(index, message)`` for :func:`~quiesce.integrations._store.sync_history`:
    the message without quiesce's parts (``None``: nothing else), read with
    its ``known`` entry id."""

    def read(index: int, m: object) -> _store.Unit | None:
        if isinstance(m, ModelRequest):
            stripped = _unnoted([m])
            if not stripped:
                return None
            m = stripped[0]
        return _unit(index, m, known[index] if known is not None else None)

    return read


def sync_messages(
    buffer: Buffer,
    messages: Sequence[object],
    *,
    readmit: ReadmitPolicy = "record",
    known: Sequence[str | None] | None = None,
) -> SyncReport:
    """Sync the run's history into the buffer, faithfully (see the module
    docstring and :mod:`quiesce.integrations._store`): new messages are
    appended (idempotent), quiesce's note and stand-in parts are recognised,
    a message gone from the history is a prune request through the policy.
    ``readmit`` and the report are the adapters'
    (:func:`quiesce.adapters.openai.sync_messages`); ``known`` as in
    :func:`to_units`. The edits are written in the calling thread: on an
    event loop the processor settles them with ``aedit`` instead."""
    messages = _checked(messages)
    if known is not None and len(known) != len(messages):
        raise InvalidArgument("pydantic-ai: known must give one id (or None) per message")
    report, changes = _store.sync_history(
        buffer,
        messages,
        _reader(known),
        framework=FRAMEWORK,
        actor=__name__,
        readmit=readmit,
        new_ids="#pa:",
    )
    if changes:
        _store.apply_changes(buffer, changes)
    return report


def _rebuild(slot: _store.Slot, original: ModelMessage | None = None) -> ModelMessage | None:
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
    m = original if original is not None else _load(slot.native)
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


def _answers(m: ModelRequest) -> set[str]:
    return {
        p.tool_call_id
        for p in m.parts
        if isinstance(p, ToolReturnPart) or (isinstance(p, RetryPromptPart) and p.tool_name)
    }


def _paired(
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
            out.append(ModelRequest(parts=[_stand_in(i, n) for i, n in open_calls.items()]))
        open_calls = {p.tool_call_id: p.tool_name for p in m.parts if isinstance(p, ToolCallPart)}
        out.append(m)
    if open_calls:
        out.append(ModelRequest(parts=[_stand_in(i, n) for i, n in open_calls.items()]))
    return out


def _stand_in(call_id: str, name: str) -> ToolReturnPart:
    return ToolReturnPart(tool_name=name, content=_store.stand_in(call_id), tool_call_id=call_id)


def render_messages(snap: Snapshot, originals: Sequence[ModelMessage] = ()) -> list[ModelMessage]:
    """The window of ``snap`` as pydantic-ai messages, paired, with the quiesce
    note (if any) as a ``SystemPromptPart`` of the first request. A slot
    whose dump equals the dump of one of ``originals`` is given back as that
    object (or a trimmed copy of it; ``originals`` are never mutated). O(n)."""
    by_dump: dict[str, list[ModelMessage]] = {}
    for m in originals:
        by_dump.setdefault(canonical_json(_held_dump(m)), []).append(m)
    given: dict[str, ModelMessage] = {}
    for slot in _store.window(snap, FRAMEWORK):
        same = by_dump.get(canonical_json(slot.native)) if slot.native is not None else None
        if same:
            given[slot.unit] = same.pop(0)
    return _render_given(snap, given)[0]


def _render_given(
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
            original = hit[1] if hit is not None and reuse else _load(slot.native)
            fresh[slot.unit] = (slot.native, original)
        shown = _rebuild(slot, original)
        if shown is None:
            continue
        unit_of[id(shown)] = slot.unit
        rebuilt.append(shown)
    if loaded is not None:
        loaded.clear()
        loaded.update(fresh)
    messages = _paired(rebuilt, unit_of)
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


def _held_dump(m: ModelMessage) -> Any:
    """The dump a message is held as (without a legacy id stamp)."""
    metadata = dict(m.metadata or {})
    if metadata.pop(ID_KEY, None) is None:
        return _dump(m)
    return _dump(m.__class__(**{**_fields(m), "metadata": metadata or None}))


class QuiesceHistoryProcessor:
    """A pydantic-ai history processor over a quiesce buffer (see the module docstring).

    ``buffer`` is a :class:`~quiesce.Buffer` holding one conversation, or a
    :class:`~quiesce.BufferPool` holding one buffer per
    ``ctx.conversation_id`` (so one module-level ``Agent`` can serve many
    conversations). ``await processor(ctx, messages)`` resolves the
    conversation, syncs, runs the pruner once, and returns the pruned window
    (the run's own message objects wherever nothing changed). Cancellation
    while the pruner runs submits nothing; the sync before it is
    synchronous and complete.

    The processor remembers, weakly, the message objects it built (trimmed
    or rewritten messages) and the entries they stand for, so the run handing
    them back is recognised; the record is O(messages built) and dies with
    the objects.
    """

    def __init__(
        self, buffer: Buffer | AsyncBuffer | BufferPool[Any], *, pruner: Pruner | None = None
    ) -> None:
        self._target = Target(buffer, pruner, "QuiesceHistoryProcessor")
        self.buffer = self._target.given
        self.pool = self._target.pool
        self.pruner = pruner
        self._built: dict[int, tuple[weakref.ref[ModelMessage], str]] = {}
        #: per buffer: the first message synced and its key (see _held_first)
        self._firsts: weakref.WeakKeyDictionary[_store.SyncState, tuple[object, str]] = (
            weakref.WeakKeyDictionary()
        )
        #: per buffer: (version, length) of the last call that returned the
        #: run's own list unchanged (see _still_idle)
        self._idle: weakref.WeakKeyDictionary[_store.SyncState, tuple[int, int]] = (
            weakref.WeakKeyDictionary()
        )
        #: entry id -> (its dump, the message built from it), per buffer
        self._loaded: weakref.WeakKeyDictionary[object, dict[str, tuple[Any, ModelMessage]]] = (
            weakref.WeakKeyDictionary()
        )

    def _known(self, m: object) -> str | None:
        """The entry id of a message object this processor built, or ``None``."""
        found = self._built.get(id(m))
        return found[1] if found is not None and found[0]() is m else None

    def _remember(self, m: ModelMessage, unit: str) -> None:
        key = id(m)

        def forget(_: object, key: int = key) -> None:
            self._built.pop(key, None)

        self._built[key] = (weakref.ref(m, forget), unit)

    def _held_first(self, buffer: AsyncBuffer, state: _store.SyncState) -> str | None:
        """The key of the first message of the history ``buffer`` holds of
        pydantic-ai (``None``: none): the first message last synced, else
        (nothing synced in this process: a reopened durable buffer) its
        first live message. O(1) amortised (cached per synced object)."""
        obj = next((s.obj for s in state.seen if s.unit is not None and s.obj is not None), None)
        if obj is None:
            with buffer.snapshot() as snap:
                entry = next(
                    (
                        e
                        for e in snap
                        if e.meta.get("fw") == FRAMEWORK
                        and e.meta.get("unit") == e.id
                        and e.content is not None
                    ),
                    None,
                )
            return None if entry is None else fingerprint(thaw(entry.content))
        cached = self._firsts.get(state)
        if cached is not None and cached[0] is obj:
            return cached[1]
        if not isinstance(obj, ModelRequest | ModelResponse):
            return None
        key = _first_key(_unnoted([obj])[:1])
        if key is not None:
            self._firsts[state] = (obj, key)
        return key

    def _check_extends(
        self,
        buffer: AsyncBuffer,
        state: _store.SyncState,
        messages: Sequence[object],
        conversation: str | None,
        first: str | None,
    ) -> None:
        """Raise :class:`~quiesce.ConversationMismatch` when the run's history
        does not extend the one the buffer holds: its first message differs
        and none of its messages is one the buffer synced (a run started
        without ``message_history`` under the same ``conversation_id``, or
        over a buffer that holds another history). Such a run is another
        conversation (the rule of :mod:`quiesce.integrations._conversation`),
        so it is refused before anything is synced — never read as a request
        to prune everything the buffer holds. A processor placed before
        quiesce that drops the first messages keeps later ones the buffer
        holds (the same objects): that is an edit, settled by the sync. O(1)
        when the first message is the held one; O(n) otherwise."""
        held = self._held_first(buffer, state)
        if held is None or first is None or held == first:
            return
        synced = {id(s.obj) for s in state.seen if s.unit is not None}
        if any(id(m) in synced or self._known(m) is not None for m in messages):
            return
        name = f"conversation {conversation!r}, " if conversation is not None else ""
        bound, seen = anonymous_id(held), anonymous_id(first)
        raise ConversationMismatch(
            f"QuiesceHistoryProcessor: this buffer holds {name}a history starting with "
            f"{bound!r}; this run's history starts with {seen!r} and does not extend it "
            "(a run without message_history is another conversation: pass "
            "message_history=result.all_messages() to continue, or give a new "
            "conversation its own buffer)",
            bound=bound,
            seen=seen,
        )

    def _reader(self, buffer: AsyncBuffer, state: _store.SyncState) -> Any:
        """``read(index, message)`` for the sync: quiesce's parts stripped
        (``None``: the message had nothing else), the entry id of a message
        this processor built (or of a trimmed copy handed back, recognised by
        its dump), whose rendered form is then no edit of the framework's."""
        trimmed: dict[str, str] | None = None

        def read(index: int, m: object) -> _store.Unit | None:
            nonlocal trimmed
            shown = m
            if isinstance(m, ModelRequest):
                stripped = _unnoted([m])
                if not stripped:
                    return None  # a stand-in request or the note's own request
                shown = stripped[0]
            known = self._known(m)
            if (
                known is None
                and buffer.tombstones
                and isinstance(shown, ModelRequest | ModelResponse)
            ):
                # A trimmed copy may come back (e.g. in a new process).
                if trimmed is None:
                    with buffer.snapshot() as snap:
                        trimmed = _trimmed_dumps(snap)
                if trimmed:
                    known = trimmed.get(canonical_json(_held_dump(shown)))
            unit = _unit(index, shown, known)
            if known is not None:
                state.alternates.setdefault(known, set()).add(_store.digest(unit))
            return unit

        return read

    async def __call__(
        self, ctx: RunContext[Any], messages: list[ModelMessage]
    ) -> list[ModelMessage]:
        conversation = _conversation_of(ctx)
        first = _first_key(_unnoted(messages[:2])[:1])
        buffer = await self._target.buffer(conversation, first)
        face = async_buffer(buffer, "QuiesceHistoryProcessor")
        state = _store.state_of(face, FRAMEWORK)
        self._check_extends(face, state, messages, conversation, first)
        before = face.version
        report, changes = await _store.async_sync_history(
            face,
            _checked(messages),
            self._reader(face, state),
            framework=FRAMEWORK,
            actor=__name__,
            new_ids="#pa:",
        )
        if changes:
            await _store.aapply_changes(face, changes)
        synced = face.version
        await prune_round(face, self.pruner)
        if self._still_idle(face, state, messages, before, synced, report, bool(changes)):
            self._idle[state] = (face.version, len(messages))
            return messages  # idle, as last time: the run's own list
        given: dict[str, ModelMessage] = {}
        if len(state.seen) == len(messages):
            for m, seen in zip(messages, state.seen, strict=True):
                if seen.unit is not None and not _has_quiesce_parts(m):
                    given[seen.unit] = m
        loaded = self._loaded.setdefault(state, {})
        with face.snapshot() as snap:
            rendered, units = _render_given(snap, given, state, loaded)
        for m in rendered:
            unit = units.get(id(m))
            if unit is not None and given.get(unit) is not m:
                self._remember(m, unit)
        state.rendered_as([(m, units.get(id(m))) for m in rendered])
        if _store.same_objects(rendered, messages):
            self._idle[state] = (face.version, len(messages))
            return messages  # idle: the run's own list
        self._idle.pop(state, None)
        return rendered

    def _still_idle(
        self,
        buffer: AsyncBuffer,
        state: _store.SyncState,
        messages: Sequence[ModelMessage],
        before: int,
        synced: int,
        report: SyncReport,
        changed: bool,
    ) -> bool:
        """Whether the window is still exactly ``messages`` without rendering
        it: the last call returned the run's own list (idle) at the version
        the buffer had when this call began (nobody wrote since), this run's
        history starts with those very objects (the sync's identity prefix),
        the sync appended each later message as a new entry and changed
        nothing else, the pruning round wrote nothing, nothing is marked or
        pruned, and the new messages pair as they are (every call shown
        answered, no result without its call). Then the render would give
        back ``messages`` object for object, so a turn over a long history
        costs O(new messages) here instead of O(n) rebuilding. O(new)."""
        memo = self._idle.get(state)
        if memo is None or changed:
            return False
        version, n = memo
        if before != version or buffer.version != synced or state.prefix < n:
            return False
        if n == 0 or len(messages) < n:
            return False
        if report.appended != tuple(range(n, len(messages))):
            return False
        head = buffer.head()
        if head.marks or head.tombs.by_id:
            return False
        tail = messages[n:]
        if any(_has_quiesce_parts(m) for m in tail):
            return False
        start = n - 1
        while start > 0 and not isinstance(messages[start], ModelResponse):
            start -= 1
        window = list(messages[start:])
        paired = _paired(window)
        return _store.same_objects(paired, window)


def _has_quiesce_parts(m: object) -> bool:
    return isinstance(m, ModelRequest) and any(_is_quiesce_part(p) for p in m.parts)


def _unnoted(messages: Sequence[ModelMessage]) -> list[ModelMessage]:
    """``messages`` without the parts quiesce rendered into them before (its
    note ``SystemPromptPart`` and stand-in returns), which the run hands back
    and which never become entries. Untouched messages stay the same objects;
    a message left without parts is dropped. O(parts)."""
    out: list[ModelMessage] = []
    for m in messages:
        if not isinstance(m, ModelRequest):
            out.append(m)
            continue
        parts = [p for p in m.parts if not _is_quiesce_part(p)]
        if len(parts) == len(m.parts):
            out.append(m)
        elif parts:
            out.append(dataclasses.replace(m, parts=parts))
    return out


def _is_quiesce_part(p: object) -> bool:
    if isinstance(p, SystemPromptPart):
        return p.content.startswith(NOTE_PREFIX)
    if isinstance(p, ToolReturnPart):
        return p.content == _store.stand_in(p.tool_call_id)
    return False


def _trimmed_dumps(snap: Snapshot) -> dict[str, str]:
    """The dump of each message the window shows trimmed (some of its calls or
    results pruned), keyed to its entry id: how a trimmed copy handed back is
    recognised. O(n)."""
    out: dict[str, str] = {}
    for slot in _store.window(snap, FRAMEWORK):
        if slot.native is None:
            continue
        shown = _rebuild(slot)
        if shown is not None:
            dump = canonical_json(_dump(shown))
            if dump != canonical_json(slot.native):
                out[dump] = slot.unit
    return out


def _conversation_of(ctx: object) -> str | None:
    """pydantic-ai's conversation id of the run (``None`` before 1.x had one)."""
    conversation = getattr(ctx, "conversation_id", None)
    return conversation if isinstance(conversation, str) and conversation else None


def _first_key(messages: Sequence[ModelMessage]) -> str | None:
    return fingerprint(_held_dump(messages[0])) if messages else None


# -- streaming (every run's model responses, as they arrive) --------------------


@dataclasses.dataclass(init=False)
class QuiesceStream(AbstractCapability[Any]):
    """A capability that feeds each model response into ``buffer`` while it
    streams: ``Agent(..., capabilities=[QuiesceStream(buf),
    ProcessHistory(QuiesceHistoryProcessor(buf))])``.

    It wraps the run's event stream (pydantic-ai applies the wrapper however
    the run is driven: ``run``, ``run_stream_events``, ``iter`` and a node's
    ``stream``), so every ``TextPart``'s start and deltas are written into an
    open entry before the event reaches the consumer: a reader pinning a
    snapshot sees the answer grow (:mod:`quiesce.integrations._stream`).
    Once the response is complete and stamped (when the run's next event
    stream, its tools step's, starts) the entry is closed with the
    response's dump — the very content
    :class:`QuiesceHistoryProcessor` matches it by at the next request, so it
    is never appended twice — and its ``ToolCallPart``\\ s are appended as
    calls. Thinking, a partial tool call and every other part are never
    written into the open entry: they exist only in the closed message's dump
    (with their signatures). The text written is the processor's body of the
    response (its ``TextPart``\\ s joined by newlines).

    Cut short — cancelled, an error, the consumer stopped reading — the open
    entry is aborted: the text that arrived stays, marked stale with the
    reason. (pydantic-ai may still keep its partial response in the run's
    history; the processor reads that as a message of its own.)

    ``buffer`` is what :class:`QuiesceHistoryProcessor` takes: one buffer,
    bound to the run's conversation as the processor binds it
    (:class:`~quiesce.ConversationMismatch` for another, before anything of
    that run is written), or a :class:`~quiesce.BufferPool`: each run's
    responses go to the buffer of its ``ctx.conversation_id`` (else of its
    first message) — the one the processor syncs that conversation into.

    One capability per buffer or pool; runs may share it (streams are keyed
    by the run's id and step). asyncio only, as pydantic-ai. O(1) amortized
    per event, O(response) at its end.
    """

    buffer: Buffer | AsyncBuffer | BufferPool[Any]
    readmit: ReadmitPolicy

    def __init__(
        self, buffer: Buffer | AsyncBuffer | BufferPool[Any], *, readmit: ReadmitPolicy = "record"
    ) -> None:
        self.buffer = buffer
        self.readmit = readmit
        self._target = Target(buffer, None, "QuiesceStream")
        self._streams: dict[tuple[str | None, int], _stream.MessageStream] = {}
        #: per run: the last step whose response was finished
        self._finished: dict[str | None, int] = {}

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # holds a buffer: not spec-serializable

    async def _face(self, ctx: RunContext[Any]) -> AsyncBuffer:
        """The buffer of the run's conversation, resolved as the history
        processor resolves it (its id, else its first message)."""
        first = _first_key(_unnoted(list(ctx.messages[:2]))[:1])
        buffer = await self._target.buffer(_conversation_of(ctx), first)
        return async_buffer(buffer, "QuiesceStream")

    def _stream_of(self, ctx: RunContext[Any], face: AsyncBuffer) -> _stream.MessageStream:
        key = (ctx.run_id, ctx.run_step)
        found = self._streams.get(key)
        if found is None or found.done:
            # another attempt at the same step gets the id with a prime
            entry_id = _stream.fresh_id(face, f"#pa:{ctx.run_id or 'run'}.{ctx.run_step}")
            found = _stream.MessageStream(face, framework=FRAMEWORK, entry_id=entry_id)
            self._streams[key] = found
        return found

    async def wrap_run_event_stream(
        self, ctx: RunContext[Any], *, stream: AsyncIterable[AgentStreamEvent]
    ) -> AsyncIterable[AgentStreamEvent]:
        """Every event of ``stream`` unchanged, the text ones written first.

        A stream that follows a model response (the tools step's) first
        finishes that response: by then pydantic-ai has stamped it with its
        run, conversation and model ids, so its dump is the one the history
        processor will be handed."""
        face = await self._face(ctx)
        await self._settle(ctx, face)
        current: _stream.MessageStream | None = None
        texts: set[int] = set()
        try:
            async for event in stream:
                if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                    current = self._stream_of(ctx, face)
                    if texts:
                        current.write("\n")
                    texts.add(event.index)
                    current.write(event.part.content)
                elif (
                    isinstance(event, PartDeltaEvent)
                    and isinstance(event.delta, TextPartDelta)
                    and event.index in texts
                    and current is not None
                ):
                    current.write(event.delta.content_delta)
                yield event
        except GeneratorExit:
            if current is not None:
                current.interrupt(_stream.interrupted_reason(FRAMEWORK, None))
            raise
        except BaseException as exc:
            if current is not None:
                current.interrupt(_stream.interrupted_reason(FRAMEWORK, exc))
            raise
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()  # as pydantic-ai's own wrapper does

    async def _settle(self, ctx: RunContext[Any], face: AsyncBuffer) -> None:
        """Finish the run's latest model response if it is the last message
        and not finished yet: close its streamed entry (or append it whole if
        no text streamed) and append its calls. O(response)."""
        last = ctx.messages[-1] if ctx.messages else None
        if not isinstance(last, ModelResponse):
            return
        if self._finished.get(ctx.run_id) == ctx.run_step:
            return
        self._finished[ctx.run_id] = ctx.run_step
        found = self._streams.pop((ctx.run_id, ctx.run_step), None)
        if found is None:
            found = self._stream_of(ctx, face)
            self._streams.pop((ctx.run_id, ctx.run_step), None)
        await found.finish(_unit(0, last), readmit=self.readmit)
