"""pydantic-ai: :class:`QuiesceStream`, the capability that writes each model
response into the buffer while it streams (re-exported by
:mod:`quiesce.integrations.pydantic_ai`, where it is documented with the
history processor it pairs with).

What it keeps true: a reader pinning a snapshot sees the response's text
grow, a whole prefix per snapshot (:mod:`quiesce.integrations._stream`);
only ``TextPart`` text is ever written into the open entry (thinking and
partial tool calls exist only in the closed message's dump); the closed
entry holds the response's dump, so the history processor matches it and
never appends it twice; a stream cut short leaves its text, marked stale.

Imported after :mod:`quiesce.integrations.pydantic_ai` checked that
pydantic-ai is installed. asyncio only, as pydantic-ai.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterable
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    AgentStreamEvent,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
)
from pydantic_ai.tools import RunContext

from .._core.buffer import Buffer
from .._pool import BufferPool
from .._protocol import AsyncBuffer, async_buffer
from ..adapters._common import ReadmitPolicy
from . import _stream
from ._conversation import Target
from ._pydantic_ai_parts import FRAMEWORK, conversation_of, first_key, read_unit, unnoted

__all__ = ["QuiesceStream"]


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
        first = first_key(unnoted(list(ctx.messages[:2]))[:1])
        buffer = await self._target.buffer(conversation_of(ctx), first)
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
        except BaseException as exc:  # GeneratorExit too: the consumer stopped reading
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
        await found.finish(read_unit(0, last), readmit=self.readmit)
