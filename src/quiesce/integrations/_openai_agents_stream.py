"""The OpenAI Agents SDK: :func:`feed_stream`, ``Runner.run_streamed``'s raw
response events into open entries (re-exported by
:mod:`quiesce.integrations.openai_agents`).

What it keeps true: each response's raw events go through the Responses
adapter's stream (:func:`quiesce.adapters.responses.append_stream`'s), so a
reader sees a message's text grow and every snapshot renders a valid input
list; every event reaches ``on_event`` once, in order, each raw one after
the buffer has it; a response cut short is aborted (its text stays, marked
stale) and the exception propagates. asyncio only, as the SDK's runner.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

from .._core.buffer import Buffer
from .._core.entry import Kind
from .._core.errors import InvalidArgument
from .._pool import BufferPool
from .._protocol import AsyncBuffer
from ..adapters import responses
from ..adapters._common import ReadmitPolicy
from ..adapters._stream import Sink, run_stream
from ..adapters._stream_responses import ResponsesStream
from ._conversation import Target
from ._openai_agents_session import QuiesceSession

__all__ = ["feed_stream"]


async def feed_stream(
    buffer: Buffer | AsyncBuffer | BufferPool[Any] | QuiesceSession,
    result: Any,
    *,
    conversation: str | None = None,
    on_event: Callable[[Any], object] | None = None,
    readmit: ReadmitPolicy = "record",
) -> list[list[dict[str, Any]]]:
    """Consume ``result.stream_events()`` of ``Runner.run_streamed(...)``,
    feeding every model response into ``buffer`` as it streams; returns each
    response's output items.

    The raw response events (``RawResponsesStreamEvent.data``: the Responses
    API's own stream events) of each response go through
    :func:`quiesce.adapters.responses.append_stream`: a message's text is an
    open entry (the item's id) written per delta, a reasoning item is never
    rendered until closed with its final form, a function call is appended
    only once its arguments are complete — so a reader pinning a snapshot
    sees the answer grow and every snapshot renders a valid input list.
    ``on_event(event)`` is called with every stream event, in order (awaited
    if it returns an awaitable), each raw one after the buffer has it.

    Use it with :func:`quiesce_input_filter` (its sync finds the streamed
    items held by id) or with a :class:`QuiesceSession` (pass the session as
    ``buffer``: its ``add_items`` holds the items already streamed rather
    than appending them again, so the session's items after the run are
    the SDK's own session's): nothing is appended twice.

    ``buffer`` is what the integration takes: one buffer, a
    :class:`~quiesce.BufferPool` (``conversation`` names the run's
    conversation: the session id, or what the input filter's
    ``conversation`` callable names it; required with a pool), or the
    run's :class:`QuiesceSession` (its buffer, of its ``session_id``). A
    single buffer is bound to ``conversation`` as the input filter binds
    it (:class:`~quiesce.ConversationMismatch` for another, before any
    event is read). Cut short — cancelled, an error event, ``on_event`` raising — the open
    entries are aborted (the text that arrived stays, marked stale with the
    reason) and the exception propagates. asyncio only, as the SDK's runner.
    O(1) amortized per event plus the adapter's cost per item.
    """
    face = await _stream_target(buffer, conversation)
    events = result.stream_events().__aiter__()
    outputs: list[list[dict[str, Any]]] = []

    async def deliver(event: Any) -> None:
        if on_event is not None:
            got = on_event(event)
            if inspect.isawaitable(got):
                await got

    async def one_response(first: Any) -> AsyncIterator[Any]:
        """The raw events of one response, each delivered once handled."""
        data = first.data
        while True:
            yield data
            await deliver(first)  # the adapter asked for the next: it has this one
            if getattr(data, "type", None) in _ENDS:
                return
            nxt = await anext(events, None)
            while nxt is not None and getattr(nxt, "type", None) != "raw_response_event":
                await deliver(nxt)
                nxt = await anext(events, None)
            if nxt is None:
                return  # the run ended mid-response: the adapter says what is missing
            first, data = nxt, nxt.data

    async for event in events:
        if getattr(event, "type", None) == "raw_response_event":
            items = await run_stream(
                face, one_response(event), _held_reader, api=responses.API, readmit=readmit
            )
            outputs.append(items)
        else:
            await deliver(event)
    return outputs


def _held_reader(sink: Sink, kind: Kind) -> ResponsesStream:
    """The Responses adapter's stream reader, holding the items the run's
    session added first (``held``: nothing is appended twice)."""
    return ResponsesStream(sink, kind, responses._read, held=True)


async def _stream_target(buffer: object, conversation: str | None) -> AsyncBuffer:
    """The buffer :func:`feed_stream` writes to (see its docstring)."""
    if conversation is not None and (type(conversation) is not str or not conversation):
        raise InvalidArgument(
            f"feed_stream: conversation must be a non-empty str or None, not {conversation!r}"
        )
    if isinstance(buffer, QuiesceSession):
        if conversation is not None and conversation != buffer.session_id:
            raise InvalidArgument(
                f"feed_stream: conversation {conversation!r} is not the session's "
                f"{buffer.session_id!r}"
            )
        return await buffer.abuffer()
    if isinstance(buffer, BufferPool) and conversation is None:
        raise InvalidArgument(
            "feed_stream: a BufferPool needs conversation= (the run's session id, or the "
            "name quiesce_input_filter's conversation gives it)"
        )
    return await Target(buffer, None, "feed_stream").buffer(conversation, None)


#: The events after which a response's stream has nothing more.
_ENDS = frozenset({"response.completed", "response.failed", "response.incomplete", "error"})
