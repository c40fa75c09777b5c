"""Which buffer a framework call uses: one conversation per buffer.

Every integration takes, in the place of ``buffer``, either one buffer or a
:class:`~quiesce.BufferPool`. :class:`Target` resolves a call to its buffer
and keeps this true:

* **With a pool**, a call's conversation id (the framework's own: LangGraph's
  ``thread_id``, pydantic-ai's ``conversation_id``, the Agents SDK session id,
  one per AutoGen context) picks its buffer: ``pool.get(id)``. A call with no
  conversation identity (LangGraph without a checkpointer) gets the
  conversation of its history's first message (``#first:<key>``): runs that
  share no first message share no buffer, so no run's messages reach another.
* **With one buffer**, the buffer is bound to the first conversation it serves
  (the binding lives as long as the buffer object, in a weak map: nothing is
  added to the buffer or its log). A call of another conversation raises
  :class:`~quiesce.ConversationMismatch` naming both, before anything is
  appended or the model is called. A call with no identity belongs to the
  bound conversation only if its history extends the bound one (same first
  message); a history whose first message differs is another conversation.
* The check comes first: the conversation is resolved before the history is
  synced, so no rule about a conversation's messages ever sees another's.

Costs: O(1) per call besides the pool's ``get``. Cancellation: a resolve
either binds or does not; ``await`` only in the pool's ``get``.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from .._core.errors import InvalidType
from .._pool import BufferPool, ConversationMismatch
from .._protocol import AsyncBuffer, local_buffer
from ..pruner import Pruner
from ._glue import check_setup

__all__ = ["Target", "anonymous_id"]


@dataclass
class _Binding:
    conversation: str | None
    first: str | None


#: buffer -> the conversation it serves (weak: the binding dies with the buffer).
_BINDINGS: weakref.WeakKeyDictionary[object, _Binding] = weakref.WeakKeyDictionary()


def anonymous_id(first: str) -> str:
    """The conversation id of a call without one, named by its first message's key."""
    return f"#first:{first}"


def _label(conversation: str | None, first: str | None) -> str:
    if conversation is not None:
        return conversation
    return anonymous_id(first) if first is not None else "#first:<empty>"


class Target:
    """A single buffer or a pool, as an integration was given it.

    What it resolves a call to is the :class:`~quiesce.AsyncBuffer` the
    integration writes through (:func:`~quiesce.integrations._glue.check_setup`:
    a runtime or shared buffer as itself, a plain :class:`~quiesce.Buffer`
    behind its async face). ``given`` is the single buffer as it was given."""

    def __init__(self, target: object, pruner: Pruner | None, owner: str) -> None:
        self.owner = owner
        self.pool: BufferPool[Any] | None = None
        self.single: AsyncBuffer | None = None
        self.given: object = None
        if isinstance(target, BufferPool):
            if pruner is not None and not isinstance(pruner, Pruner):
                raise InvalidType(
                    f"{owner}: pruner must be a Pruner or None, not {type(pruner).__name__}"
                )
            self.pool = target
        else:
            self.single = check_setup(target, pruner, owner)
            self.given = target

    def bind(self, conversation: str | None, first: str | None) -> AsyncBuffer:
        """The single buffer, bound to (or checked against) this call's
        conversation. Sync, O(1). Raises :class:`ConversationMismatch`.
        The binding is keyed by the buffer itself (not its face), so every
        integration given one buffer shares it."""
        buffer = self.single
        assert buffer is not None
        local = local_buffer(buffer)
        key: object = buffer if local is None else local
        binding = _BINDINGS.get(key)
        if binding is None:
            _BINDINGS[key] = _Binding(conversation, first)
            return buffer
        same = (
            conversation == binding.conversation
            if conversation is not None and binding.conversation is not None
            else first is None or binding.first is None or first == binding.first
        )
        if not same:
            bound = _label(binding.conversation, binding.first)
            seen = _label(conversation, first)
            raise ConversationMismatch(
                f"{self.owner}: this buffer holds conversation {bound!r}, not {seen!r}; "
                "use a BufferPool for many conversations",
                bound=bound,
                seen=seen,
            )
        if binding.first is None:
            binding.first = first
        if binding.conversation is None:
            binding.conversation = conversation
        return buffer

    async def buffer(self, conversation: str | None, first: str | None) -> AsyncBuffer:
        """The buffer of this call's conversation (see the module docstring).
        A checkpoint only when a pool opens or looks up a buffer."""
        if self.pool is None:
            return self.bind(conversation, first)
        return self._checked(await self.pool.get(_label(conversation, first)))

    def buffer_sync(self, conversation: str | None, first: str | None) -> AsyncBuffer:
        """:meth:`buffer` for a framework's sync API (see
        :meth:`BufferPool.get_from_thread`); its writes go through
        :func:`~quiesce.integrations._glue.sync_buffer`."""
        if self.pool is None:
            return self.bind(conversation, first)
        return self._checked(self.pool.get_from_thread(_label(conversation, first)))

    def _checked(self, buffer: object) -> AsyncBuffer:
        """A pool's buffer, checked as the integration checks a buffer it is
        given (so what the factory may open is whatever ``check_setup``
        accepts)."""
        return check_setup(buffer, None, f"{self.owner} (a buffer of the pool)")
