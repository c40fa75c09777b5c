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

import json
from collections.abc import Sequence
from typing import Any

from .._core.buffer import Buffer, Snapshot
from .._core.entry import Kind
from .._core.errors import InvalidArgument
from .._protocol import AsyncBuffer
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


def sync_messages(
    buffer: Buffer, messages: Sequence[object], *, readmit: ReadmitPolicy = "record"
) -> SyncReport:
    """Append the messages the buffer does not hold yet (see the module
    docstring); idempotent. ``readmit`` and the report are the adapters'
    (:func:`quiesce.adapters.openai.sync_messages`)."""
    return _store.sync_units(
        buffer,
        to_units(messages),
        framework=FRAMEWORK,
        actor=__name__,
        readmit=readmit,
        new_ids="#pa:",
    )


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
    m.parts = kept  # type: ignore[assignment]
    return _stamp(m, slot.unit)


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
                m.parts = [*stand_ins, *parts]
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


def render_messages(snap: Snapshot) -> list[ModelMessage]:
    """The window of ``snap`` as pydantic-ai messages, each stamped with its
    entry id, paired, with the quiesce note (if any) as a ``SystemPromptPart``
    of the first request. O(n)."""
    rebuilt = [m for m in (_rebuild(s) for s in _store.window(snap, FRAMEWORK)) if m is not None]
    messages = _paired(rebuilt)
    note = _store.notes(snap)
    if note is not None:
        if messages and isinstance(messages[0], ModelRequest):
            messages[0].parts = [SystemPromptPart(note), *messages[0].parts]
        else:
            messages.insert(0, ModelRequest(parts=[SystemPromptPart(note)]))
    return messages


class QuiesceHistoryProcessor:
    """A pydantic-ai history processor over a quiesce buffer (see the module docstring).

    ``await processor(ctx, messages)`` syncs, runs the pruner once, and
    returns the pruned window. One processor (and buffer) per conversation.
    ``buffer`` is a :class:`~quiesce.Buffer` or any :class:`~quiesce.AsyncBuffer`
    (a shared one included); every write goes through its async paths.
    Cancellation while the pruner runs submits nothing; the sync before it is
    one synchronous step on an in-process buffer (on a shared one, messages
    appended before a cancellation stay, and the next sync finds them held).
    """

    def __init__(self, buffer: Buffer | AsyncBuffer, *, pruner: Pruner | None = None) -> None:
        self._face = check_setup(buffer, pruner, "QuiesceHistoryProcessor")
        self.buffer = buffer
        self.pruner = pruner

    async def __call__(
        self, ctx: RunContext[Any], messages: list[ModelMessage]
    ) -> list[ModelMessage]:
        await _store.async_sync_units(
            self._face, to_units(messages), framework=FRAMEWORK, actor=__name__
        )
        await prune_round(self._face, self.pruner)
        with self._face.snapshot() as snap:
            return render_messages(snap)
