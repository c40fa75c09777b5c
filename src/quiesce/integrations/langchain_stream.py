"""LangGraph ``stream_mode="messages"`` into a quiesce buffer:
:func:`stream_messages` (import it from :mod:`quiesce.integrations.langchain`).

What it keeps true: every item of the stream is yielded unchanged, after the
chunk it carries (of the model node) is written into the open entry of its
message, so a reader pinning a snapshot sees the answer grow; the entry is
closed with the merged message's own dump, the one the middleware's next
sync finds held by id (nothing is appended twice); cut short, the open entry
is aborted and marked stale, and nothing of it renders as a call. See
:mod:`quiesce.integrations._stream` for the open entry.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Collection
from typing import Any

from .._core.buffer import Buffer
from .._core.errors import InvalidArgument
from .._pool import BufferPool
from .._protocol import AsyncBuffer
from ..adapters._common import ReadmitPolicy
from . import _stream
from ._conversation import Target
from .langchain_history import FRAMEWORK, read_message

__all__ = ["stream_messages"]


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
        await done.finish(read_message(0, final), readmit=readmit)

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
    except BaseException as exc:  # GeneratorExit too: the consumer stopped reading
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
