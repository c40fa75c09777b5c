"""LangChain v1 / LangGraph: :class:`QuiesceMiddleware`, an ``AgentMiddleware``.

What it keeps true, for an agent made by ``langchain.agents.create_agent``:

* ``wrap_model_call`` / ``awrap_model_call`` are its one hook, run once per
  model call: they sync the request's messages into the buffer by
  ``message.id`` — a faithful diff (:mod:`quiesce.integrations._store`):
  new messages are appended (a message the buffer pruned on purpose is not
  resurrected), and what a framework tool placed before quiesce changed —
  ``SummarizationMiddleware``'s summary, ``trim_messages``, an edited
  message — is settled through the policy, so a constraint it dropped stays
  and the removal is escalated. Then the configured pruner runs once, and the
  model is called on the pruned window of a snapshot pinned for the whole
  call (``request.override``): a prune requested meanwhile is deferred until
  the model returns. Removals and stale marks are listed in a note appended
  to the system message, so the messages themselves — thinking blocks with
  their signatures, images, ids — reach the model exactly as LangChain
  stored them. Every tool call the model sees is answered (a pruned result
  is replaced by a stand-in). By default the checkpointed state keeps the
  full history, and quiesce decides what the model sees.
* ``destructive=True`` also returns state updates, as the model node's
  command (``ExtendedModelResponse``): ``RemoveMessage`` for each pruned
  message, a replacement ``AIMessage`` (same id) without its pruned
  ``tool_calls``, and a stand-in ``ToolMessage`` (same id) for a result
  pruned while its call survives — the saved state never holds an orphaned
  call or result.
* Cheap turns: a sync of the same message objects (or equal copies, as a
  checkpointer reloads them) reads nothing again, and a render after appends
  rebuilds only the new messages; no ``before_model`` hook, so quiesce adds
  no graph step.

Messages are held as LangChain's own dicts (``message_to_dict``); see
:mod:`quiesce.integrations._store` for the entry layout. One middleware (and
one buffer, or a :class:`~quiesce.BufferPool` of them) per conversation thread.

The module is split by job: the middleware is here; reading, syncing and
rendering a history are :mod:`quiesce.integrations.langchain_history`, and
LangGraph's message stream :mod:`quiesce.integrations.langchain_stream`.
Every public name is importable from this module.

Framework work-arounds: none in the middleware. Sync ``wrap_model_call``
runs an async pruner with ``anyio.run`` in the calling thread (LangGraph's
sync ``invoke`` runs nodes without an event loop).
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Awaitable, Callable, Sequence
from itertools import compress, count
from typing import Any

import anyio

from .._core.buffer import Buffer, Snapshot
from .._core.entry import Kind
from .._pool import BufferPool
from .._protocol import AsyncBuffer, local_buffer
from ..adapters._common import fingerprint
from ..pruner import Pruner
from . import _store
from ._conversation import Target
from ._glue import framework_imports, prune_round, sync_buffer
from .langchain_history import FRAMEWORK, with_note, without_calls
from .langchain_history import async_sync_messages as async_sync_messages
from .langchain_history import render_messages as render_messages
from .langchain_history import sync_messages as sync_messages
from .langchain_history import to_units as to_units
from .langchain_stream import stream_messages as stream_messages

with framework_imports("LangChain", "langchain"):
    from langchain.agents.middleware.types import (
        AgentMiddleware,
        AgentState,
        ExtendedModelResponse,
        ModelCallResult,
        ModelRequest,
        ModelResponse,
    )
    from langchain_core.messages import (
        AIMessage,
        AnyMessage,
        BaseMessage,
        RemoveMessage,
        ToolMessage,
        message_to_dict,
    )
    from langgraph.config import get_config
    from langgraph.types import Command

__all__ = [
    "QuiesceMiddleware",
    "async_sync_messages",
    "render_messages",
    "stream_messages",
    "sync_messages",
    "to_units",
]


class QuiesceMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Hold an agent's messages in a quiesce buffer; call the model on its pruned window.

    ``buffer`` is a :class:`~quiesce.Buffer` (or the runtime buffer of
    ``open_buffer()``) holding one conversation, or a
    :class:`~quiesce.BufferPool` holding one buffer per LangGraph
    ``thread_id`` (a run without a checkpointer has no ``thread_id``: its
    conversation is named by its first message, so no run's messages reach
    another's). A single buffer is bound to the first conversation it serves
    and raises :class:`~quiesce.ConversationMismatch` for another, before the
    model is called. ``pruner`` is an optional :class:`~quiesce.Pruner` run
    once before each model call; ``destructive`` makes the model call also
    remove pruned messages from the saved state (see the module docstring).

    Transparent when idle: with nothing marked or pruned, the model gets the
    request exactly as LangChain built it (the same message objects).
    """

    def __init__(
        self,
        buffer: Buffer | AsyncBuffer | BufferPool[Any],
        *,
        pruner: Pruner | None = None,
        destructive: bool = False,
    ) -> None:
        self._target = Target(buffer, pruner, "QuiesceMiddleware")
        super().__init__()
        self.buffer = self._target.given
        self.pool = self._target.pool
        self.pruner = pruner
        self.destructive = bool(destructive)
        #: per buffer (its sync state): what :func:`_as_given` found last
        self._given: weakref.WeakKeyDictionary[_store.SyncState, _Given] = (
            weakref.WeakKeyDictionary()
        )

    def _state_update(
        self, buffer: AsyncBuffer, messages: Sequence[AnyMessage]
    ) -> dict[str, Any] | None:
        if not self.destructive:
            return None
        updates: list[BaseMessage] = []
        tombs = buffer.tombstones
        with buffer.snapshot() as snap:
            for m in messages:
                if not m.id:
                    continue  # LangGraph gives every saved message an id
                if m.id in tombs:
                    if isinstance(m, ToolMessage) and _is_live_call(snap, m.tool_call_id):
                        updates.append(
                            ToolMessage(
                                content=_store.stand_in(m.tool_call_id),
                                tool_call_id=m.tool_call_id,
                                id=m.id,
                                name=m.name,
                            )
                        )
                    else:
                        updates.append(RemoveMessage(id=m.id))
                elif isinstance(m, AIMessage) and m.tool_calls:
                    live = {
                        str(tc["id"]) for tc in m.tool_calls if f"{m.id}/{tc['id']}" not in tombs
                    }
                    if len(live) != len(m.tool_calls):
                        updates.append(without_calls(m, live))
        return {"messages": updates} if updates else None

    def _response(
        self, buffer: AsyncBuffer, response: ModelResponse[Any], messages: Sequence[AnyMessage]
    ) -> ModelCallResult[Any]:
        update = self._state_update(buffer, messages)
        if update is None:
            return response
        return ExtendedModelResponse(model_response=response, command=Command(update=update))

    # -- wrap_model_call: the one hook ------------------------------------
    #
    # Everything happens around the model call, once per call: the
    # conversation's buffer resolved (first: nothing of another conversation
    # is ever synced), the sync (one faithful diff of what the model would be
    # sent), the pruning round, the pinned render, and (destructive) the
    # state update, returned as the model node's command. No ``before_model``
    # hook: it would add a graph node (a checkpointed step) per model call
    # and a second sync.

    def _request(
        self, request: ModelRequest[Any], snap: Snapshot, buffer: AsyncBuffer
    ) -> ModelRequest[Any]:
        messages, note = render_messages(snap, buffer=buffer)
        state = _store.state_of(buffer, FRAMEWORK)
        memo = self._given.get(state)
        if memo is None:
            memo = self._given[state] = _Given()
        messages = _as_given(messages, request.messages, memo, state)
        if note is None and _same(messages, request.messages):
            return request  # idle: the model gets what LangChain built
        return request.override(
            messages=list[AnyMessage](messages),  # type: ignore[arg-type]
            system_message=with_note(request.system_message, note),
        )

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        """Resolve the conversation, sync the request's messages, run the
        pruner (``anyio.run`` in this thread: LangGraph's sync ``invoke`` runs
        nodes without an event loop), and call the model on the window of a
        snapshot pinned for the call. With a durable log, prefer ``ainvoke``:
        here the log is written in the calling thread."""
        buffer = self._target.buffer_sync(*_conversation_of(request.runtime, _history(request)))
        sync_messages(sync_buffer(buffer, "QuiesceMiddleware.wrap_model_call"), request.messages)
        if self.pruner is not None:
            anyio.run(prune_round, buffer, self.pruner)
        with buffer.snapshot() as snap:
            response = handler(self._request(request, snap, buffer))
        return self._response(buffer, response, request.messages)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        """Resolve the conversation, sync the request's messages (the
        framework's edits settled with ``aedit``), await one pruning round,
        and call the model on the window of a snapshot pinned across the
        await. The pin is released on exit, also on cancellation;
        cancellation while the pruner runs submits nothing (see
        :func:`~quiesce.run_pruner`).

        On a buffer other processes share (a :class:`~quiesce.SharedBuffer`)
        the model's answer is then held at once (the history with the answer
        appended, synced again), not only at this agent's next model call, so
        the other agents on the conversation see it. Messages of the answer
        without an id (LangGraph gives them one in its state) wait for the
        next sync, as does an answer whose holding was cancelled. An
        in-process buffer keeps one sync per call."""
        buffer = await self._target.buffer(*_conversation_of(request.runtime, _history(request)))
        await async_sync_messages(buffer, request.messages)
        await prune_round(buffer, self.pruner)
        await anyio.lowlevel.checkpoint()  # the render is a step of its own
        with buffer.snapshot() as snap:
            response = await handler(self._request(request, snap, buffer))
        answer = _answer(response)
        if local_buffer(buffer) is None and answer:
            await async_sync_messages(buffer, [*request.messages, *answer])
        return self._response(buffer, response, request.messages)


def _answer(response: ModelResponse[Any]) -> list[BaseMessage]:
    """The messages of a model's answer that carry an id (the ones a sync
    can match with the copies LangGraph saves in its state)."""
    return [m for m in response.result if m.id]


def _history(request: ModelRequest[Any]) -> Sequence[object]:
    """The conversation's history as the agent's state holds it: what names
    a run without a ``thread_id`` (its first message), whatever a middleware
    placed before quiesce did to the request (a trimmer dropping the first
    messages leaves the conversation the same)."""
    state = getattr(request, "state", None)
    messages = state.get("messages") if isinstance(state, dict) else None
    return messages if isinstance(messages, Sequence) and messages else request.messages


def _conversation_of(runtime: object, messages: Sequence[object]) -> tuple[str | None, str | None]:
    """The call's ``thread_id`` (``None`` without a checkpointer) and the key
    of its first message (its id, else a fingerprint of its dump)."""
    info = getattr(runtime, "execution_info", None)
    thread = getattr(info, "thread_id", None)
    if thread is None:
        try:
            configurable = get_config().get("configurable", {})
        except RuntimeError:  # not inside a runnable context
            configurable = {}
        thread = configurable.get("thread_id")
    first: str | None = None
    if messages:
        m = messages[0]
        mid = getattr(m, "id", None)
        if isinstance(mid, str) and mid:
            first = mid
        elif isinstance(m, BaseMessage):
            first = fingerprint(message_to_dict(m))
    return (str(thread) if thread is not None else None), first


class _Given:
    """What :func:`_as_given` found last time, per buffer: the rendered
    objects, for each the index of LangChain's message with its id (``-1``:
    none) and whether the two were equal, and the sync generation it was
    made at (see :class:`~quiesce.integrations._store.SyncState`).
    ``aligned``: how many leading rendered objects were found equal to
    LangChain's message at their own place (``match[i] == i``)."""

    __slots__ = ("aligned", "equal", "generation", "ids", "match", "rendered")

    def __init__(self) -> None:
        self.generation = -1
        self.aligned = 0
        self.rendered: list[BaseMessage] = []
        self.ids: list[str | None] = []
        self.match: list[int] = []
        self.equal: list[bool] = []


def _as_given(
    rendered: list[BaseMessage],
    given: Sequence[object],
    memo: _Given | None = None,
    state: _store.SyncState | None = None,
) -> list[BaseMessage]:
    """``rendered`` with each message that equals the one LangChain gave
    (same id, ``==``) replaced by that very object: the model gets the
    framework's own objects wherever quiesce changed nothing.

    ``memo`` (kept between calls) carries the last call's findings over when
    exactly one sync ran since (``state``'s generation): a rendered object
    that is the one rendered at its place last time, whose match was among
    the first ``state.prefix`` messages (the ones the sync found to be the
    same objects or equal copies, at the same places), keeps its verdict —
    equal to last time's message, so equal to the copy — and takes the copy
    from its place. When every kept verdict found LangChain's message at its
    own place (the idle turn: ``aligned``), they are the first messages of
    ``given`` as they are, taken as one slice with no Python step per
    message. Only the rest (a turn's new messages) is compared. O(n)
    list operations, O(new) comparisons (each rendered message is looked for
    at its own place in ``given`` first, by id in all of it only if it is
    not there); without a valid memo O(n) comparisons."""
    out: list[BaseMessage] = []
    ids: list[str | None] = []
    match: list[int] = []
    equal: list[bool] = []
    q = 0
    aligned = 0  # the leading run of verdicts "equal to LangChain's message at its place"
    if memo is not None and state is not None and memo.generation == state.generation - 1:
        last = memo.rendered
        # the first place whose object is not last time's, in C (``map``
        # stops at the shorter list)
        q = next(
            compress(count(), map(operator.is_not, rendered, last)), min(len(last), len(rendered))
        )
        p = state.prefix
        if memo.aligned >= min(q, p):
            # The idle turn: each kept verdict found LangChain's message at
            # its own place, inside the unchanged prefix, so it holds for the
            # copy there (by place: no id elsewhere in ``given`` can move it).
            q = min(q, p)
            if q == len(memo.ids):  # the memo's own lists: replaced below
                ids, match, equal = memo.ids, memo.match, memo.equal
            else:
                ids, match, equal = memo.ids[:q], memo.match[:q], memo.equal[:q]
            out = list(given[:q])  # type: ignore[arg-type]
            aligned = q
        else:
            tail = {getattr(g, "id", None) for g in given[p:]}
            while q and (max(memo.match[:q]) >= p or not tail.isdisjoint(memo.ids[:q])):
                q //= 2  # the part whose matches all stand in the unchanged prefix
            ids, match, equal = memo.ids[:q], memo.match[:q], memo.equal[:q]
            out = [
                given[j] if e else r  # type: ignore[misc]
                for r, j, e in zip(rendered[:q], match, equal, strict=True)
            ]
            aligned = min(memo.aligned, q)
    by_id: dict[str, int] | None = None
    for pos in range(q, len(rendered)):
        m = rendered[pos]
        j = -1
        if m.id:
            # LangChain's message at the same place first (the idle turn's
            # new messages): O(1); else every message by id, indexed once.
            g = given[pos] if pos < len(given) else None
            if isinstance(g, BaseMessage) and g.id == m.id:
                j = pos
            else:
                if by_id is None:
                    by_id = {
                        g.id: i for i, g in enumerate(given) if isinstance(g, BaseMessage) and g.id
                    }
                j = by_id.get(m.id, -1)
        same = j >= 0 and _store.equal(given[j], m)
        ids.append(m.id)
        match.append(j)
        equal.append(same)
        out.append(given[j] if same else m)  # type: ignore[arg-type]
        if same and j == pos == aligned:
            aligned += 1
    if memo is not None and state is not None:
        memo.generation = state.generation
        memo.aligned = aligned
        memo.rendered, memo.ids, memo.match, memo.equal = rendered, ids, match, equal
    return out


def _same(a: Sequence[object], b: Sequence[object]) -> bool:
    return _store.same_objects(a, b)


def _is_live_call(snap: Snapshot, call_id: str) -> bool:
    return any(e.kind is Kind.TOOL_CALL and e.meta.get("call_id") == call_id for e in snap)
