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

Framework work-arounds: none in the middleware. Sync ``wrap_model_call``
runs an async pruner with ``anyio.run`` in the calling thread (LangGraph's
sync ``invoke`` runs nodes without an event loop).
"""

from __future__ import annotations

import json
import weakref
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Collection, Sequence
from typing import Any

import anyio

from .._core.buffer import Buffer, Snapshot
from .._core.entry import Kind
from .._core.errors import InvalidArgument
from .._pool import BufferPool
from .._protocol import AsyncBuffer, async_buffer, local_buffer
from ..adapters._common import ReadmitPolicy, SyncReport, fingerprint
from ..pruner import Pruner
from . import _store, _stream
from ._conversation import Target
from ._glue import missing_extra, prune_round, sync_buffer

try:
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
        HumanMessage,
        RemoveMessage,
        SystemMessage,
        ToolMessage,
        message_to_dict,
        messages_from_dict,
    )
    from langgraph.config import get_config
    from langgraph.types import Command
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise missing_extra("LangChain", "langchain") from exc

__all__ = [
    "QuiesceMiddleware",
    "async_sync_messages",
    "render_messages",
    "stream_messages",
    "sync_messages",
    "to_units",
]

FRAMEWORK = "langchain"

_KINDS: dict[type[BaseMessage], Kind] = {
    SystemMessage: Kind.INSTRUCTION,
    HumanMessage: Kind.INSTRUCTION,
    AIMessage: Kind.REASONING,
}


#: Kinds an assistant wrote: a text slot of one of them renders as an ``AIMessage``.
_ASSISTANT_KINDS = frozenset({Kind.REASONING, Kind.RATIONALE, Kind.SUMMARY, Kind.TOOL_CALL})


def _is_summary(m: BaseMessage) -> bool:
    """LangChain's ``SummarizationMiddleware`` marks its summary message so."""
    return isinstance(m, HumanMessage) and m.additional_kwargs.get("lc_source") == "summarization"


def _unit(index: int, m: object) -> _store.Unit:
    if not isinstance(m, BaseMessage):
        raise InvalidArgument(
            f"langchain: message {index}: expected a BaseMessage, not {type(m).__name__}"
        )
    name = type(m).__name__
    native = message_to_dict(m)
    mid = m.id if isinstance(m.id, str) and m.id else f"#lc:{fingerprint(native)}"
    if isinstance(m, ToolMessage):
        call_id = m.tool_call_id
        if not isinstance(call_id, str) or not call_id:
            raise InvalidArgument(f"langchain: message {index}: ToolMessage.tool_call_id is empty")
        text = str(m.text)
        result = _store.Result(call_id, text)
        return _store.Unit(mid, Kind.TOOL_OUTPUT, text, native, results=(result,), bare=True)
    kind = next((k for t, k in _KINDS.items() if isinstance(m, t)), None)
    if kind is None:
        raise InvalidArgument(
            f"langchain: message {index}: {name} (type={m.type!r}) is not supported"
        )
    calls: list[_store.Call] = []
    if isinstance(m, AIMessage):
        for j, tc in enumerate(m.tool_calls):
            tc_id = tc.get("id")
            if not isinstance(tc_id, str) or not tc_id:
                raise InvalidArgument(
                    f"langchain: message {index}: AIMessage.tool_calls[{j}].id is empty"
                )
            args = json.dumps(tc.get("args", {}), sort_keys=True, ensure_ascii=False)
            calls.append(_store.Call(tc_id, tc["name"], args))
    summary = _is_summary(m)
    return _store.Unit(mid, kind, str(m.text), native, calls=tuple(calls), summary=summary)


def to_units(messages: Sequence[object]) -> list[_store.Unit]:
    """LangChain messages read into units (all checked before any is used).

    Raises :class:`InvalidArgument` naming the message index and the type or
    field it cannot represent (``RemoveMessage``, ``ChatMessage``, a tool call
    without an id)."""
    units = [_unit(i, m) for i, m in enumerate(messages)]
    ids = [u.id for u in units]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise InvalidArgument(f"langchain: message id {dup!r} appears twice")
    return units


def _checked(messages: Sequence[object]) -> Sequence[object]:
    if not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
        raise InvalidArgument(f"langchain: messages must be a list, not {type(messages).__name__}")
    return messages


def _ident(m: object) -> str | None:
    mid = getattr(m, "id", None)
    return mid if isinstance(mid, str) and mid else None


#: How this module's syncs read and name what they append.
_SYNC: dict[str, Any] = {"framework": FRAMEWORK, "actor": __name__, "ident": _ident}


def sync_messages(
    buffer: Buffer, messages: Sequence[object], *, readmit: ReadmitPolicy = "record"
) -> SyncReport:
    """Sync the agent's history into the buffer, faithfully: append the
    messages it does not hold yet (by ``message.id``; idempotent), and settle
    the history's own edits through the policy — a message changed under its
    id is a ``Rewrite``, a message gone is a prune request, a
    ``SummarizationMiddleware`` summary a ``Summarize`` of what it replaced;
    the policy refuses (and escalates) each of them for protected messages,
    which stay in the window (see :mod:`quiesce.integrations._store`).
    ``readmit`` and the report are the adapters'
    (:func:`quiesce.adapters.openai.sync_messages`). For code not on an event
    loop: with a durable log this writes the log in the calling thread (on a
    loop, use :func:`async_sync_messages`). A no-op sync of the same message
    objects is O(n) identity checks."""
    report, changes = _store.sync_history(
        buffer, _checked(messages), _unit, readmit=readmit, **_SYNC
    )
    if changes:
        _store.apply_changes(buffer, changes)
    return report


async def async_sync_messages(
    buffer: Buffer | AsyncBuffer, messages: Sequence[object], *, readmit: ReadmitPolicy = "record"
) -> SyncReport:
    """:func:`sync_messages` for code on an event loop, on any
    :class:`~quiesce.AsyncBuffer` (a shared buffer included): the appends go
    through the async admission and the edits through ``aedit``, so no log
    write runs on the loop. A checkpoint when anything is appended or
    settled."""
    face = async_buffer(buffer, "langchain.async_sync_messages")
    report, changes = await _store.async_sync_history(
        face, _checked(messages), _unit, readmit=readmit, **_SYNC
    )
    if changes:
        await _store.aapply_changes(face, changes)
    return report


def _without_calls(msg: AIMessage, live: set[str]) -> AIMessage:
    """``msg`` keeping only the tool calls in ``live`` (also in its content blocks)."""
    if all(tc.get("id") in live for tc in msg.tool_calls):
        return msg
    kept = [tc for tc in msg.tool_calls if tc.get("id") in live]
    content = msg.content
    if isinstance(content, list):
        content = [
            b
            for b in content
            if not (
                isinstance(b, dict)
                and b.get("type") in ("tool_use", "tool_call", "function_call")
                and b.get("id") not in live
            )
        ]
    return msg.model_copy(update={"tool_calls": kept, "content": content})


def _text_message(slot: _store.Slot) -> BaseMessage:
    """A plain message for a text slot (a summary, a rewritten message)."""
    if slot.results:
        return ToolMessage(content=slot.text, tool_call_id=slot.results[0], id=slot.unit)
    if slot.calls or slot.kind in _ASSISTANT_KINDS:
        tool_calls = [_tool_call(c) for c in slot.calls]
        return AIMessage(content=slot.text, tool_calls=tool_calls, id=slot.unit)
    return HumanMessage(content=slot.text, id=slot.unit)


def _rebuild(slot: _store.Slot) -> BaseMessage | None:
    if slot.native is None:
        return _text_message(slot)
    msg = messages_from_dict([slot.native])[0]
    if isinstance(msg, ToolMessage):
        return msg if slot.results else None
    if isinstance(msg, AIMessage):
        shown = {tc.get("id") for tc in msg.tool_calls}
        added = [c for c in slot.calls if c.call_id not in shown]
        if added:
            # Calls the framework added to this message after it was stored
            # (the stored dump predates them): rebuilt from their entries.
            msg = msg.model_copy(update={"tool_calls": [*msg.tool_calls, *map(_tool_call, added)]})
        if msg.tool_calls:
            return _without_calls(msg, slot.call_ids)
    return msg


def _tool_call(c: _store.Call) -> Any:
    return {"name": c.name, "args": json.loads(c.arguments), "id": c.call_id, "type": "tool_call"}


def _paired(messages: list[BaseMessage]) -> list[BaseMessage]:
    """Drop results whose call is not shown; add a stand-in result after the
    results of each AI message for every call left unanswered."""
    out: list[BaseMessage] = []
    open_calls: dict[str, str] = {}  # call id -> tool name, of the latest AI message

    def close() -> None:
        for call_id, name in open_calls.items():
            out.append(
                ToolMessage(content=_store.stand_in(call_id), tool_call_id=call_id, name=name)
            )
        open_calls.clear()

    for m in messages:
        if isinstance(m, ToolMessage):
            if open_calls.pop(m.tool_call_id, None) is not None:
                out.append(m)
            continue
        close()
        out.append(m)
        if isinstance(m, AIMessage):
            open_calls.update({str(tc["id"]): tc["name"] for tc in m.tool_calls})
    close()
    return out


def render_messages(
    snap: Snapshot, *, buffer: Buffer | AsyncBuffer | None = None
) -> tuple[list[BaseMessage], str | None]:
    """The window of ``snap`` as LangChain messages, and the quiesce note (or
    ``None``). Every tool call in the result is answered. O(n).

    With the ``buffer`` the snapshot is of, messages are rebuilt once and
    reused while their entries are unchanged (LangChain's models do not
    mutate their input): a render after k appends rebuilds k messages. A
    message another framework stored (a shared conversation) renders as a
    plain message."""
    if buffer is None:
        slots = _store.window(snap, FRAMEWORK)
        rebuilt = [m for m in map(_rebuild, slots) if m is not None]
        return _paired(rebuilt), _store.notes(snap)
    state = _store.state_of(buffer, FRAMEWORK)
    rebuilt = _store.rendered(snap, state, _rebuild, FRAMEWORK)
    return _store.paired(state, rebuilt, _paired, _settled), _store.notes(snap)


def _settled(m: BaseMessage) -> bool:
    """No call is open after ``m`` (see :func:`_paired`)."""
    return not isinstance(m, ToolMessage) and not (isinstance(m, AIMessage) and m.tool_calls)


def _with_note(system: SystemMessage | None, note: str | None) -> SystemMessage | None:
    if note is None:
        return system
    if system is None:
        return SystemMessage(content=note)
    content = system.content
    if isinstance(content, str):
        return system.model_copy(update={"content": f"{content}\n\n{note}"})
    return system.model_copy(update={"content": [*content, {"type": "text", "text": note}]})


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
                        updates.append(_without_calls(m, live))
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
            system_message=_with_note(request.system_message, note),
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
    made at (see :class:`~quiesce.integrations._store.SyncState`)."""

    __slots__ = ("equal", "generation", "ids", "match", "rendered")

    def __init__(self) -> None:
        self.generation = -1
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
    from its place. Only the rest (a turn's new messages) is compared. O(n)
    list operations, O(new) comparisons (each rendered message is looked for
    at its own place in ``given`` first, by id in all of it only if it is
    not there); without a valid memo O(n) comparisons."""
    out: list[BaseMessage] = []
    ids: list[str | None] = []
    match: list[int] = []
    equal: list[bool] = []
    q = 0
    if memo is not None and state is not None and memo.generation == state.generation - 1:
        last = memo.rendered
        limit = min(len(last), len(rendered))
        while q < limit and rendered[q] is last[q]:
            q += 1
        p = state.prefix
        tail = {getattr(g, "id", None) for g in given[p:]}
        while q and (max(memo.match[:q]) >= p or not tail.isdisjoint(memo.ids[:q])):
            q //= 2  # the part whose matches all stand in the unchanged prefix
        ids, match, equal = memo.ids[:q], memo.match[:q], memo.equal[:q]
        out = [
            given[j] if e else r  # type: ignore[misc]
            for r, j, e in zip(rendered[:q], match, equal, strict=True)
        ]
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
    if memo is not None and state is not None:
        memo.generation = state.generation
        memo.rendered, memo.ids, memo.match, memo.equal = rendered, ids, match, equal
    return out


def _same(a: Sequence[object], b: Sequence[object]) -> bool:
    return _store.same_objects(a, b)


def _is_live_call(snap: Snapshot, call_id: str) -> bool:
    return any(e.kind is Kind.TOOL_CALL and e.meta.get("call_id") == call_id for e in snap)


# -- streaming (LangGraph ``stream_mode="messages"``) ---------------------------


async def stream_messages(
    buffer: Buffer | AsyncBuffer | BufferPool[Any],
    stream: AsyncIterable[Any],
    *,
    nodes: Collection[str] | None = ("model",),
    readmit: ReadmitPolicy = "record",
) -> AsyncIterator[Any]:
    """Feed an agent's answers into ``buffer`` while they stream; yield every
    item of ``stream`` unchanged.

    ``stream`` is LangGraph's ``agent.astream(..., stream_mode="messages")``
    (items ``(message_chunk, metadata)``; with several modes, ``("messages",
    (chunk, metadata))`` items are read and the others passed through).
    Each ``AIMessageChunk`` of a node in ``nodes`` (``None``: any node;
    default ``create_agent``'s model node) is written into an open entry
    under the message's id before the item is yielded, so a reader pinning a
    snapshot sees the answer grow (:mod:`quiesce.integrations._stream`).
    When the message ends (its ``chunk_position="last"`` chunk, a chunk of
    another message, or the end of the stream) the entry is closed with the
    merged message's ``message_to_dict`` dump and its tool calls are
    appended: the entry is the one :class:`QuiesceMiddleware`'s next sync
    finds held by id, so nothing is appended twice. A partial tool call is
    never a call, and a thinking block is never written into the open entry.

    ``buffer`` is what :class:`QuiesceMiddleware` takes: one buffer, bound
    to the run's ``thread_id`` as the middleware binds it
    (:class:`~quiesce.ConversationMismatch` for another thread, raised at
    that thread's first message, before it is written), or a
    :class:`~quiesce.BufferPool`: each message goes to the buffer of the
    ``thread_id`` in its item's metadata (LangGraph puts the config's there)
    — the one the middleware syncs that thread into. With a pool, a message
    of a run without a ``thread_id`` (no checkpointer) raises
    :class:`~quiesce.InvalidArgument`, writing nothing of it.

    Cut short — the run raises, the task is cancelled, or the consumer stops
    iterating (``aclose``) — the open entry is aborted: the text that arrived
    stays, marked stale with the reason, and nothing of it renders as a call.
    The frameworks' loop is asyncio's (LangGraph runs on asyncio only).
    O(1) amortized per chunk plus the final merge, O(message).
    """
    from langchain_core.messages import AIMessageChunk, message_chunk_to_message

    target = Target(buffer, None, "langchain.stream_messages")
    current: _stream.MessageStream | None = None
    chunks: list[AIMessageChunk] = []

    async def finish() -> None:
        nonlocal current
        assert current is not None
        merged = chunks[0] if len(chunks) == 1 else chunks[0] + chunks[1:]
        done, current = current, None
        chunks.clear()
        final = message_chunk_to_message(merged)
        await done.finish(_unit(0, final), readmit=readmit)

    try:
        async for item in stream:
            payload = item[1] if _is_mode_item(item) else item
            chunk, meta = payload if _is_pair(payload) else (None, None)
            ours = nodes is None or (isinstance(meta, dict) and meta.get("langgraph_node") in nodes)
            streams = isinstance(chunk, AIMessageChunk) and isinstance(chunk.id, str) and chunk.id
            if streams and ours:
                assert isinstance(chunk, AIMessageChunk) and isinstance(chunk.id, str)
                if current is not None and current.id != chunk.id:
                    await finish()
                if current is None:
                    face = await _stream_buffer(target, meta)
                    current = _stream.MessageStream(face, framework=FRAMEWORK, entry_id=chunk.id)
                chunks.append(chunk)
                current.write(str(chunk.text))
                if chunk.chunk_position == "last":
                    await finish()
            yield item
        if current is not None:
            await finish()
    except GeneratorExit:
        if current is not None:
            current.interrupt(_stream.interrupted_reason(FRAMEWORK, None))
        raise
    except BaseException as exc:
        if current is not None:
            current.interrupt(_stream.interrupted_reason(FRAMEWORK, exc))
        raise


async def _stream_buffer(target: Target, meta: object) -> AsyncBuffer:
    """The buffer of a streamed message's thread (its item's ``thread_id``
    metadata), resolved as :class:`QuiesceMiddleware` resolves a call's."""
    thread = meta.get("thread_id") if isinstance(meta, dict) else None
    if target.pool is not None and thread is None:
        raise InvalidArgument(
            "langchain.stream_messages: a BufferPool picks the buffer by the run's thread_id, "
            "and this run has none (give the agent a checkpointer and the config a thread_id)"
        )
    return await target.buffer(None if thread is None else str(thread), None)


def _is_mode_item(item: object) -> bool:
    """A ``(mode, payload)`` item of a multi-mode stream carrying messages."""
    return isinstance(item, tuple) and len(item) == 2 and item[0] == "messages"


def _is_pair(payload: object) -> bool:
    return isinstance(payload, tuple) and len(payload) == 2
