"""pydantic-ai: :class:`QuiesceHistoryProcessor`, a history processor.

Use it as ``Agent(..., capabilities=[ProcessHistory(QuiesceHistoryProcessor(buf))])``
(pydantic-ai 2.x; 1.x also took ``history_processors=[fn]``, which 2.x removed:
the processor is a plain async ``(ctx, messages) -> messages`` callable and
fits both). What it keeps true, before each model request:

* the run's messages are synced into the buffer. pydantic-ai messages carry
  no ids, so a message the processor rendered before carries its entry id in
  ``metadata["quiesce"]`` (application-only data, never sent to a model); a
  message without one is matched by content (a stale copy of a pruned message
  is not re-appended), else appended. Each message is held as
  ``ModelMessagesTypeAdapter``'s own JSON dump: ``ThinkingPart`` with its
  ``signature``, images and binary ``UserPromptPart`` content, provider
  fields and timestamps come back unchanged.
* the configured pruner runs once; then the window of a pinned snapshot is
  returned: pruned ``ToolCallPart``\\ s and their ``ToolReturnPart`` /
  ``RetryPromptPart`` leave together, a result pruned while its call stays is
  replaced by a stand-in return, and the note of removals and stale marks is
  a ``SystemPromptPart`` added to the first request.

pydantic-ai's ``ProcessHistory`` writes the processed list back into the
run's history (``ctx.messages[:] = ...``); the buffer keeps the full history
either way, and ``result.all_messages()`` carries the ids that let a new run
continue over a reopened buffer.

pydantic-ai runs its tools with asyncio tasks: it runs on **asyncio only**.
"""

from __future__ import annotations

import copy
import json
import weakref
from collections.abc import Sequence
from typing import Any

from .._core.buffer import Buffer, Snapshot
from .._core.entry import Kind
from .._core.errors import InvalidArgument
from ..adapters._common import ReadmitPolicy, SyncReport
from ..pruner import Pruner
from . import _store
from ._glue import check_setup, missing_extra, prune_round

try:
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
    from pydantic_ai.tools import RunContext
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise missing_extra("pydantic-ai", "pydantic-ai") from exc

__all__ = ["QuiesceHistoryProcessor", "render_messages", "sync_messages", "to_units"]

FRAMEWORK = "pydantic-ai"
#: The metadata key holding a rendered message's entry id.
ID_KEY = "quiesce"

_ASSISTANT_KINDS = frozenset({Kind.REASONING, Kind.RATIONALE, Kind.SUMMARY, Kind.TOOL_CALL})


def _dump(m: ModelMessage) -> Any:
    return ModelMessagesTypeAdapter.dump_python([m], mode="json")[0]


def _load(native: Any) -> ModelMessage:
    return ModelMessagesTypeAdapter.validate_python([native])[0]


def _unit(index: int, m: object) -> _store.Unit:
    if not isinstance(m, ModelRequest | ModelResponse):
        raise InvalidArgument(
            f"pydantic-ai: message {index}: expected a ModelRequest or ModelResponse, "
            f"not {type(m).__name__}"
        )
    metadata = dict(m.metadata or {})
    mid = metadata.pop(ID_KEY, None)
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
    import dataclasses

    return {f.name: getattr(m, f.name) for f in dataclasses.fields(m) if f.init}


def _text_of(content: Sequence[object]) -> str:
    return "\n".join(c for c in content if isinstance(c, str))


def to_units(messages: Sequence[object]) -> list[_store.Unit]:
    """pydantic-ai messages read into units (all checked before any is used).

    Raises :class:`InvalidArgument` naming the message index, the part and
    the field it cannot represent."""
    return [_unit(i, m) for i, m in enumerate(messages)]


def _diff(
    buffer: Buffer, messages: Sequence[object], readmit: ReadmitPolicy
) -> tuple[SyncReport, _store.Changes]:
    """The faithful diff of the history (:func:`quiesce.integrations._store.sync_history`)."""
    if not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
        raise InvalidArgument(
            f"pydantic-ai: messages must be a list, not {type(messages).__name__}"
        )
    return _store.sync_history(
        buffer,
        messages,
        _unit,
        framework=FRAMEWORK,
        actor=__name__,
        readmit=readmit,
        new_ids="#pa:",
    )


def sync_messages(
    buffer: Buffer, messages: Sequence[object], *, readmit: ReadmitPolicy = "record"
) -> SyncReport:
    """Sync the run's history into the buffer, faithfully (see the module
    docstring and :mod:`quiesce.integrations._store`): new messages are
    appended (idempotent), messages quiesce rendered are recognised, a message
    gone from the history is a prune request and a changed one a ``Rewrite``,
    both through the policy. ``readmit`` and the report are the adapters'
    (:func:`quiesce.adapters.openai.sync_messages`). The edits are written in
    the calling thread: on an event loop the processor settles them with
    ``aedit`` instead."""
    report, changes = _diff(buffer, messages, readmit)
    if changes:
        _store.apply_changes(buffer, changes)
    return report


def _stamp(m: ModelMessage, unit: str) -> ModelMessage:
    m.metadata = {**(m.metadata or {}), ID_KEY: unit}
    return m


def _rebuild(slot: _store.Slot) -> ModelMessage | None:
    if slot.native is None:
        if slot.results:
            part = ToolReturnPart(tool_name="tool", content=slot.text, tool_call_id=slot.results[0])
            return _stamp(ModelRequest(parts=[part]), slot.unit)
        if slot.calls or slot.kind in _ASSISTANT_KINDS:
            parts: list[Any] = [TextPart(slot.text)] if slot.text else []
            parts += [ToolCallPart(c.name, json.loads(c.arguments), c.call_id) for c in slot.calls]
            return _stamp(ModelResponse(parts=parts), slot.unit)
        return _stamp(ModelRequest(parts=[UserPromptPart(slot.text)]), slot.unit)
    m = _load(slot.native)
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
    if len(kept) != len(m.parts):
        m.parts = kept  # type: ignore[assignment]
        _CHANGED[id(m)] = m
    return _stamp(m, slot.unit)


#: Messages quiesce changed or made (parts left out, stand-ins or the note
#: added, stand-in requests): handed back, they are not the framework's edits.
_CHANGED: weakref.WeakValueDictionary[int, ModelMessage] = weakref.WeakValueDictionary()


def _answers(m: ModelRequest) -> set[str]:
    return {
        p.tool_call_id
        for p in m.parts
        if isinstance(p, ToolReturnPart) or (isinstance(p, RetryPromptPart) and p.tool_name)
    }


def _paired(messages: list[ModelMessage]) -> list[ModelMessage]:
    """Each response's calls answered in the request after it (stand-ins for
    pruned results); result parts whose call is not shown are dropped."""
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
                m = copy.copy(m)  # copy on write: ``m`` may be a cached render
                m.parts = [*stand_ins, *parts]
                _CHANGED[id(m)] = m
            if m.parts:
                out.append(m)
            continue
        if open_calls:
            out.append(_made(ModelRequest(parts=[_stand_in(i, n) for i, n in open_calls.items()])))
        open_calls = {p.tool_call_id: p.tool_name for p in m.parts if isinstance(p, ToolCallPart)}
        out.append(m)
    if open_calls:
        out.append(_made(ModelRequest(parts=[_stand_in(i, n) for i, n in open_calls.items()])))
    return out


def _stand_in(call_id: str, name: str) -> ToolReturnPart:
    return ToolReturnPart(tool_name=name, content=_store.stand_in(call_id), tool_call_id=call_id)


def render_messages(snap: Snapshot) -> list[ModelMessage]:
    """The window of ``snap`` as pydantic-ai messages, each stamped with its
    entry id, paired, with the quiesce note (if any) as a ``SystemPromptPart``
    of the first request. O(n)."""
    return _render(snap)[0]


def _render(snap: Snapshot) -> tuple[list[ModelMessage], set[int]]:
    """:func:`render_messages`, and the ``id()`` of each message quiesce
    changed or made (parts left out, stand-ins or the note added)."""
    return _render_from(snap, [m for m in map(_rebuild, _store.window(snap)) if m is not None])


def _render_cached(buffer: Buffer, snap: Snapshot) -> tuple[list[ModelMessage], set[int]]:
    """:func:`_render` reusing the messages the last render rebuilt (see
    :func:`quiesce.integrations._store.rendered`); the cached messages are
    never changed here (stand-ins and the note go on copies)."""
    state = _store.state_of(buffer, FRAMEWORK)
    return _render_from(snap, _store.rendered(snap, state, _rebuild), state)


def _render_from(
    snap: Snapshot, rebuilt: list[ModelMessage], state: _store.SyncState | None = None
) -> tuple[list[ModelMessage], set[int]]:
    """Pair ``rebuilt`` (resumed from the last render with ``state``) and add
    the note; also the ``id()`` of each message quiesce changed or made."""
    if state is None:
        messages = _paired(rebuilt)
    else:
        messages = _store.paired(state, rebuilt, _paired, _settled)
    note = _store.notes(snap)
    if note is not None:
        if messages and isinstance(messages[0], ModelRequest):
            first = messages[0] = copy.copy(messages[0])  # copy on write, as above
            first.parts = [SystemPromptPart(note), *first.parts]
            _CHANGED[id(first)] = first
        else:
            messages.insert(0, _made(ModelRequest(parts=[SystemPromptPart(note)])))
    changed = {id(m) for m in messages if _CHANGED.get(id(m)) is m}
    return messages, changed


def _made(m: ModelRequest) -> ModelRequest:
    _CHANGED[id(m)] = m
    return m


def _settled(m: ModelMessage) -> bool:
    """No call is open after ``m`` (see :func:`_paired`)."""
    return isinstance(m, ModelRequest)


def _unit_id(m: ModelMessage) -> str | None:
    value = (m.metadata or {}).get(ID_KEY)
    return value if isinstance(value, str) else None


def _remember(buffer: Buffer, messages: list[ModelMessage], changed: set[int]) -> None:
    """Record the rendered list as the history pydantic-ai now holds
    (``ProcessHistory`` writes it back): handed back, the same objects are one
    pass of identity checks, and copies of the messages quiesce changed or
    made are recognised by their digests, never taken for the framework's
    edits. O(n) plus a dump of each changed message."""
    state = _store.state_of(buffer, FRAMEWORK)
    state.rendered_as([(m, _unit_id(m)) for m in messages])
    for index, m in enumerate(messages):
        if id(m) not in changed:
            continue
        unit = _unit(index, m)
        d = _store.digest(unit)
        if unit.id is None:
            state.rendered.add(d)
        else:
            state.alternates.setdefault(unit.id, set()).add(d)


class QuiesceHistoryProcessor:
    """A pydantic-ai history processor over a quiesce buffer (see the module docstring).

    ``await processor(ctx, messages)`` syncs, runs the pruner once, and
    returns the pruned window. One processor (and buffer) per conversation.
    Cancellation while the pruner runs submits nothing; the sync before it is
    synchronous and complete.
    """

    def __init__(self, buffer: Buffer, *, pruner: Pruner | None = None) -> None:
        check_setup(buffer, pruner, "QuiesceHistoryProcessor")
        self.buffer = buffer
        self.pruner = pruner

    async def __call__(
        self, ctx: RunContext[Any], messages: list[ModelMessage]
    ) -> list[ModelMessage]:
        _, changes = _diff(self.buffer, messages, "record")
        if changes:
            await _store.aapply_changes(self.buffer, changes)
        await prune_round(self.buffer, self.pruner)
        with self.buffer.snapshot() as snap:
            rendered, changed = _render_cached(self.buffer, snap)
        _remember(self.buffer, rendered, changed)
        return rendered
