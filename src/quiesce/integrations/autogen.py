"""AutoGen: :class:`QuiesceChatCompletionContext`, a ``ChatCompletionContext``.

Give it to an agent as ``AssistantAgent(..., model_context=QuiesceChatCompletionContext(buf))``,
or ``QuiesceChatCompletionContext(pool, conversation="alice")`` over a
:class:`~quiesce.BufferPool` (one buffer per context's conversation).
What it keeps true:

* ``add_message`` appends the message to the buffer as one synchronous step
  (each call is a new message: AutoGen messages carry no ids). Messages are
  held as AutoGen's own JSON dumps (``ChatCompletionContextState``), so
  ``AssistantMessage.thought``, image content of a ``UserMessage`` and each
  ``FunctionCall`` come back unchanged.
* ``get_messages`` runs the configured pruner once, then returns the window
  of a pinned snapshot: a pruned ``FunctionCall`` leaves with its
  ``FunctionExecutionResult``; a result pruned while its call stays is
  replaced by a stand-in result; the note of removals and stale marks is a
  leading ``SystemMessage``. Every call the model sees is answered.
* ``clear`` prunes everything it may (actor ``host:autogen``): the buffer
  never removes protected entries (user and system messages), which stay.
* ``save_state`` returns AutoGen's own state shape (the live messages);
  ``load_state`` syncs them in by content — loading a state the buffer
  already holds appends nothing, and a message it pruned is not brought back.
  ``initial_messages`` are synced the same way, so a new context over a
  reopened durable buffer continues the conversation.

The context keeps nothing of its own: ``_messages`` (the base class's list)
is not used. The context is anyio code and runs on asyncio and trio;
AutoGen's ``AssistantAgent`` runs its tools with asyncio, so an agent using it
runs on asyncio only.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
from pydantic import TypeAdapter

from .._core.buffer import Buffer, Snapshot
from .._core.entry import Kind
from .._core.errors import InvalidArgument
from .._pool import BufferPool
from .._protocol import AsyncBuffer
from ..pruner import Pruner
from . import _store
from ._conversation import Target
from ._glue import framework_imports, prune_round, sync_buffer

with framework_imports("AutoGen", "autogen"):
    from autogen_core import FunctionCall
    from autogen_core.model_context import ChatCompletionContext
    from autogen_core.model_context._chat_completion_context import ChatCompletionContextState
    from autogen_core.models import (
        AssistantMessage,
        FunctionExecutionResult,
        FunctionExecutionResultMessage,
        LLMMessage,
        SystemMessage,
        UserMessage,
    )

__all__ = ["QuiesceChatCompletionContext", "render_messages", "to_units"]

FRAMEWORK = "autogen"
ACTOR = "host:autogen"
SOURCE = "quiesce"

_ASSISTANT_KINDS = frozenset({Kind.REASONING, Kind.RATIONALE, Kind.SUMMARY, Kind.TOOL_CALL})


#: AutoGen's message union, as ``ChatCompletionContextState.messages`` holds
#: each item: its JSON dump is the item of the state's own dump.
_MESSAGE: TypeAdapter[LLMMessage] = TypeAdapter(LLMMessage)


#: The serializer of each class of the union, for an instance of exactly
#: that class: the same JSON dump the union's gives it (the union serializes
#: an instance of one of its own classes with that class's schema), without
#: the union's dispatch. A subclass goes through the union.
_SERIALIZERS: dict[type, Any] = {
    cls: cls.__pydantic_serializer__
    for cls in (SystemMessage, UserMessage, AssistantMessage, FunctionExecutionResultMessage)
}


def _dump(m: LLMMessage) -> Any:
    """``m``'s JSON dump, as ``ChatCompletionContextState.messages`` holds
    it. O(size of the message)."""
    serializer = _SERIALIZERS.get(type(m))
    if serializer is not None:
        return serializer.to_python(m, mode="json")
    return _MESSAGE.dump_python(m, mode="json")


def _load(native: Any) -> LLMMessage:
    return _MESSAGE.validate_python(native)


def _unit(index: int, m: object, unit_id: str | None = None) -> _store.Unit:
    """``m`` read as a unit (id ``unit_id``; ``None``: matched by content)."""
    if isinstance(m, SystemMessage):
        return _store.Unit(unit_id, Kind.INSTRUCTION, m.content, _dump(m))
    if isinstance(m, UserMessage):
        content = m.content
        text = (
            content
            if isinstance(content, str)
            else "\n".join(c for c in content if isinstance(c, str))
        )
        return _store.Unit(unit_id, Kind.INSTRUCTION, text, _dump(m))
    if isinstance(m, AssistantMessage):
        if isinstance(m.content, str):
            return _store.Unit(unit_id, Kind.REASONING, m.content, _dump(m))
        calls = []
        for j, fc in enumerate(m.content):
            if not fc.id:
                raise InvalidArgument(
                    f"autogen: message {index}: AssistantMessage.content[{j}].id is empty"
                )
            calls.append(_store.Call(fc.id, fc.name, fc.arguments))
        return _store.Unit(unit_id, Kind.REASONING, m.thought or "", _dump(m), calls=tuple(calls))
    if isinstance(m, FunctionExecutionResultMessage):
        results = []
        for j, r in enumerate(m.content):
            if not r.call_id:
                raise InvalidArgument(
                    f"autogen: message {index}: "
                    f"FunctionExecutionResultMessage.content[{j}].call_id is empty"
                )
            results.append(_store.Result(r.call_id, r.content))
        return _store.Unit(unit_id, Kind.REASONING, "", _dump(m), results=tuple(results))
    raise InvalidArgument(
        f"autogen: message {index}: expected an LLMMessage, not {type(m).__name__}"
    )


def to_units(messages: Sequence[object]) -> list[_store.Unit]:
    """AutoGen messages read into units (all checked before any is used).

    Raises :class:`InvalidArgument` naming the message index, type and field."""
    return [_unit(i, m) for i, m in enumerate(messages)]


def _text_message(slot: _store.Slot) -> LLMMessage:
    if slot.results:
        result = FunctionExecutionResult(content=slot.text, name="tool", call_id=slot.results[0])
        return FunctionExecutionResultMessage(content=[result])
    if slot.calls:
        fcs = [FunctionCall(id=c.call_id, arguments=c.arguments, name=c.name) for c in slot.calls]
        return AssistantMessage(content=fcs, thought=slot.text or None, source=SOURCE)
    if slot.kind in _ASSISTANT_KINDS:
        return AssistantMessage(content=slot.text, source=SOURCE)
    return UserMessage(content=slot.text, source=SOURCE)


def _rebuild(slot: _store.Slot, original: LLMMessage | None = None) -> LLMMessage | None:
    """The message of ``slot``: ``original`` (the object the context was
    given) if known, else loaded from the dump; trimmed to the live calls and
    results as a copy (the given object is never mutated)."""
    if slot.native is None:
        return _text_message(slot)
    m = original if original is not None else _load(slot.native)
    if isinstance(m, AssistantMessage) and isinstance(m.content, list):
        live = slot.call_ids
        kept = [fc for fc in m.content if fc.id in live]
        if not kept:
            return None
        return m if len(kept) == len(m.content) else m.model_copy(update={"content": kept})
    if isinstance(m, FunctionExecutionResultMessage):
        results = set(slot.results)
        kept_results = [r for r in m.content if r.call_id in results]
        if not kept_results:
            return None
        if len(kept_results) == len(m.content):
            return m
        return m.model_copy(update={"content": kept_results})
    return m


def _paired(messages: list[LLMMessage]) -> list[LLMMessage]:
    """Each call answered in the result message after it (stand-ins for
    pruned results); results whose call is not shown are dropped. O(n)."""
    out: list[LLMMessage] = []
    open_calls: dict[str, str] = {}

    def stand_ins(answered: set[str]) -> list[FunctionExecutionResult]:
        return [
            FunctionExecutionResult(
                content=_store.stand_in(call_id), name=name, call_id=call_id, is_error=False
            )
            for call_id, name in open_calls.items()
            if call_id not in answered
        ]

    for m in messages:
        if isinstance(m, FunctionExecutionResultMessage):
            kept = [r for r in m.content if r.call_id in open_calls]
            extra = stand_ins({r.call_id for r in kept})
            open_calls = {}
            if len(kept) == len(m.content) and not extra:
                out.append(m)  # unchanged: the very object
            elif kept or extra:
                out.append(m.model_copy(update={"content": [*kept, *extra]}))
            continue
        if open_calls:
            out.append(FunctionExecutionResultMessage(content=stand_ins(set())))
            open_calls = {}
        if isinstance(m, AssistantMessage) and isinstance(m.content, list):
            open_calls = {fc.id: fc.name for fc in m.content}
        out.append(m)
    if open_calls:
        out.append(FunctionExecutionResultMessage(content=stand_ins(set())))
    return out


def _settled(m: LLMMessage) -> bool:
    """No call is open after ``m`` (see :func:`_paired`)."""
    return not (isinstance(m, AssistantMessage) and isinstance(m.content, list))


def render_messages(
    snap: Snapshot,
    originals: Mapping[str, LLMMessage] | None = None,
    *,
    buffer: Buffer | AsyncBuffer | None = None,
) -> list[LLMMessage]:
    """The window of ``snap`` as AutoGen messages, paired, the quiesce note
    (if any) first as a ``SystemMessage``. ``originals`` maps entry ids to
    the message objects they hold: those are given back as themselves (or a
    trimmed copy). O(n). With the ``buffer`` the snapshot is of, messages are
    rebuilt once and reused while their entries are unchanged (AutoGen's
    model clients do not mutate their input): a render after k appends
    rebuilds k messages."""
    given = originals or {}

    def rebuild(s: _store.Slot) -> LLMMessage | None:
        return _rebuild(s, given.get(s.unit))

    if buffer is None:
        rebuilt = [m for m in map(rebuild, _store.window(snap, FRAMEWORK)) if m is not None]
        messages = _paired(rebuilt)
    else:
        state = _store.state_of(buffer, FRAMEWORK)
        rebuilt = _store.rendered(snap, state, rebuild, FRAMEWORK)
        messages = _store.paired(state, rebuilt, _paired, _settled)
    note = _store.notes(snap)
    if note is not None:
        messages.insert(0, SystemMessage(content=note))
    return messages


class QuiesceChatCompletionContext(ChatCompletionContext):
    """An AutoGen model context held in a quiesce buffer (see the module docstring).

    ``buffer`` is a :class:`~quiesce.Buffer` holding this one context's
    conversation, or a :class:`~quiesce.BufferPool` (the buffer of
    ``conversation``, opened on first use). ``conversation`` names the
    context's conversation (default: a fresh id per context, ``autogen:<uuid>``):
    one conversation per context. A single buffer is bound to the first
    context's conversation; a context of another conversation on it raises
    :class:`~quiesce.ConversationMismatch` when it is made, before any model
    call, the buffer unchanged. ``initial_messages`` are synced in by content
    (with a pool, on first use); ``pruner`` runs once before each
    ``get_messages``. All methods are checkpoints.

    Transparent when idle: with nothing marked or pruned, ``get_messages``
    returns the very message objects that were added.
    """

    def __init__(
        self,
        buffer: Buffer | AsyncBuffer | BufferPool[Any],
        initial_messages: list[LLMMessage] | None = None,
        *,
        conversation: str | None = None,
        pruner: Pruner | None = None,
    ) -> None:
        self._target = Target(buffer, pruner, "QuiesceChatCompletionContext")
        if conversation is None:
            conversation = f"autogen:{uuid.uuid4().hex}"
        elif not isinstance(conversation, str) or not conversation:
            raise InvalidArgument(
                "QuiesceChatCompletionContext: conversation must be a non-empty str"
            )
        super().__init__(None)
        self._initial_messages = initial_messages
        self.conversation = conversation
        self.pool = self._target.pool
        self.pruner = pruner
        self._originals: dict[str, LLMMessage] = {}
        self._pending = to_units(initial_messages) if initial_messages else []
        #: the single buffer, bound to this context's conversation when the
        #: context was made (a binding never changes: every call resolves to
        #: it), so a call skips the resolve; ``None`` with a pool
        self._bound: AsyncBuffer | None = None
        if self._target.single is not None:
            bound = self._target.bind(conversation, None)
            self._sync_pending(bound)
            self._bound = bound

    @property
    def buffer(self) -> object:
        """The single buffer given (``None`` with a pool: see :meth:`abuffer`)."""
        return self._target.given

    def _sync_pending(self, buffer: AsyncBuffer) -> None:
        """The constructor's sync of ``initial_messages`` (no loop to await
        on: it needs an in-process buffer; a shared one raises
        :class:`InvalidType` — add them with ``add_message``)."""
        if self._pending:
            units, self._pending = self._pending, []
            local = sync_buffer(buffer, "QuiesceChatCompletionContext(initial_messages=...)")
            _store.sync_units(local, units, framework=FRAMEWORK, actor=__name__, new_ids="#ag:")

    async def abuffer(self) -> AsyncBuffer:
        """The buffer holding this context's conversation (opened in the pool
        on first use, with ``initial_messages`` synced in)."""
        buffer = await self._target.buffer(self.conversation, None)
        if self._pending:  # with a pool: on first use, through the async path
            units, self._pending = self._pending, []
            await _store.async_sync_units(
                buffer, units, framework=FRAMEWORK, actor=__name__, new_ids="#ag:"
            )
        return buffer

    async def add_message(self, message: LLMMessage) -> None:
        """Append ``message`` (always a new message). A message the context
        cannot represent raises :class:`InvalidArgument`; nothing is appended.
        A checkpoint (the admission's) before the append; O(size of the
        message) besides the buffer's append."""
        buffer = self._bound
        if buffer is None:
            buffer = await self.abuffer()
        unit_id = f"#ag:{buffer.version}.0"
        unit = _unit(0, message, unit_id)
        unit_id, report = await _store.async_append_unit(
            buffer, unit, framework=FRAMEWORK, actor=__name__
        )
        if report.appended:
            self._originals[unit_id] = message

    async def get_messages(self) -> list[LLMMessage]:
        """One pruning round, then the pinned window (see the module docstring).
        Always a checkpoint (before the snapshot is taken). O(n) for the list
        handed out, plus the messages added since the last call rebuilt."""
        buffer = self._bound
        if buffer is None:
            buffer = await self.abuffer()
        if self.pruner is not None:
            await prune_round(buffer, self.pruner)
        await anyio.lowlevel.checkpoint()
        with buffer.snapshot() as snap:
            return render_messages(snap, self._originals, buffer=buffer)

    async def clear(self) -> None:
        """Prune every entry it may, as ``host:autogen`` (protected ones stay)."""
        buf = await self.abuffer()
        with buf.snapshot() as snap:
            ids = [e.id for e in snap]
        if not ids:
            await anyio.lowlevel.checkpoint()
        else:
            await buf.aprune(ids, reason="clear", actor=ACTOR)

    async def save_state(self) -> Mapping[str, Any]:
        """AutoGen's state shape: the live messages, without notes or stand-ins."""
        buffer = await self.abuffer()
        with buffer.snapshot() as snap:
            slots = _store.window(snap, FRAMEWORK)
        rebuilt = (_rebuild(s, self._originals.get(s.unit)) for s in slots)
        messages = [m for m in rebuilt if m is not None]
        return ChatCompletionContextState(messages=messages).model_dump()

    async def load_state(self, state: Mapping[str, Any]) -> None:
        """Sync the state's messages in by content (see the module docstring)."""
        buffer = await self.abuffer()
        await anyio.lowlevel.checkpoint()
        messages = ChatCompletionContextState.model_validate(state).messages
        await _store.async_sync_units(
            buffer, to_units(messages), framework=FRAMEWORK, actor=__name__, new_ids="#ag:"
        )
