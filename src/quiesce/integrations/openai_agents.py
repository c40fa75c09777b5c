"""The OpenAI Agents SDK: :class:`QuiesceSession` and :func:`quiesce_input_filter`.

Both are built on :mod:`quiesce.adapters.responses` (the SDK stores
Responses API input items): each item is one entry whose structured content
is the item itself, ``reasoning`` with ``encrypted_content`` is sealed and
cited by the items of its turn, a ``function_call_output`` cites its call.
What they keep true, for ``Runner.run(agent, ..., session=..., run_config=...)``:

* :class:`QuiesceSession` implements the SDK's ``Session`` protocol
  (``session_id``, ``session_settings``, ``get_items``, ``add_items``,
  ``pop_item``, ``clear_session``). Each ``add_items`` is one synchronous
  append (the adapter's ``append_messages``, ``readmit="record"``), so two
  runs sharing a session interleave whole batches and lose nothing.
  ``get_items`` returns the stored items unchanged (no notes: the SDK compares
  them with what it saved) — minus the ones a prune has staged for removal —
  with every ``function_call`` answered (a pruned output is replaced by a
  note output). ``limit`` keeps the newest items, then drops a leading output
  whose call was cut off.
* ``pop_item`` is the host's undo: it *retracts* the newest item whatever
  its kind — a user message (``INSTRUCTION``) too — with an edit plan of
  actor ``"host"`` carrying an :class:`~quiesce.Override` that names this
  module (the core's host retraction, the one logged exception to
  invariant 4; see :meth:`quiesce.Buffer.edit`). The item is tombstoned
  (actor ``"host"``) at its grace point, and the edit and removal records
  list it as ``retracted``. Every other rule holds: an item another one
  still cites is not removed, and ``pop_item`` raises
  :class:`~quiesce.ProtectedEntry`, removing nothing (the SDK's rewind
  treats a failing ``pop_item`` as "cannot rewind" and restores).
  A popped item keeps its tombstone: adding it back under its own ``id`` /
  ``call_id`` raises :class:`~quiesce.DuplicateEntry`, appending nothing (the
  SDK's restore after a failed rewind is best effort and logs that).
* :func:`quiesce_input_filter` is the value for
  ``RunConfig(call_model_input_filter=...)``: before each model call inside a
  run it syncs the input items into the buffer (the adapter's idempotent
  ``sync_messages``: by ``id``, ``call_id``, else a content key; a stale copy
  of a pruned item is not re-appended), runs the pruner once, and returns the
  adapter's rendering of the window: stale items annotated, removals listed
  in a ``system`` item, every call answered.

* The SDK's own context tools are held to the policy. Under the SDK's
  ``OpenAIResponsesCompactionSession``, ``QuiesceSession`` is the store its
  replacement hook (``_atomic_replace_items``) writes to: the compaction
  item is a ``Summarize`` of the items it replaced, refused for protected
  ones (a user message, a negative result and the call it answers stay; the
  refusal is escalated), the rest summarized. Before
  :func:`quiesce_input_filter` (composed in one ``call_model_input_filter``),
  ``ToolOutputTrimmer``'s previews are rewrites and a filter's dropped items
  prune requests, both through the policy — on a shared buffer too (the
  filter diffs its input against the one it synced last).

The session and the filter are anyio code (they run on trio too); the SDK's
runner is asyncio-only, so an agent run using them is.

This module holds the input filter; the session is
:mod:`~quiesce.integrations._openai_agents_session`'s, the items' way into
the buffer (appends, the faithful diff) is
:mod:`~quiesce.integrations._openai_agents_items`'s, :func:`feed_stream` is
:mod:`~quiesce.integrations._openai_agents_stream`'s (re-exported here).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

from .._core.buffer import Buffer
from .._core.errors import InvalidArgument, InvalidType
from .._pool import BufferPool
from .._protocol import AsyncBuffer
from ..adapters import responses
from ..adapters._common import fingerprint
from ..pruner import Pruner
from ._conversation import Target
from ._glue import missing_extra, prune_round

try:
    from agents.items import TResponseInputItem
    from agents.run_config import CallModelData, ModelInputData
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise missing_extra("the OpenAI Agents SDK", "openai-agents") from exc

# The parts of this integration, imported once the SDK is known to be there.
from ._openai_agents_items import named_errors, sync_items
from ._openai_agents_session import ACTOR as ACTOR
from ._openai_agents_session import QuiesceSession as QuiesceSession
from ._openai_agents_stream import feed_stream as feed_stream

__all__ = ["QuiesceSession", "feed_stream", "quiesce_input_filter"]


def quiesce_input_filter(
    buffer: Buffer | AsyncBuffer | BufferPool[Any],
    *,
    conversation: Callable[[CallModelData[Any]], str] | None = None,
    pruner: Pruner | None = None,
) -> Callable[[CallModelData[Any]], Awaitable[ModelInputData]]:
    """The value for ``RunConfig(call_model_input_filter=...)``.

    Before each model call: resolve the call's conversation, sync the input
    items into its buffer (see the module docstring), run ``pruner`` once,
    and return the window's items as :func:`quiesce.adapters.responses.render`
    gives them — or, when nothing is marked or pruned and the window is the
    input, the SDK's own ``model_data`` unchanged.

    The SDK's ``CallModelData`` carries no session id, so ``conversation``
    names it: ``conversation(data) -> str`` (e.g. from ``data.context``, the
    run's context object). With a :class:`~quiesce.BufferPool` it is
    required (:class:`InvalidArgument` otherwise). With a single buffer it
    is optional: without it a call belongs to the bound conversation only
    if its input extends the bound one (the same first item); either way a
    call of another conversation raises :class:`~quiesce.ConversationMismatch`
    before the model is called, the buffer unchanged.
    """
    target = Target(buffer, pruner, "quiesce_input_filter")
    if conversation is not None and not callable(conversation):
        raise InvalidType(
            "quiesce_input_filter: conversation must be a callable (data) -> str, "
            f"not {type(conversation).__name__}"
        )
    if target.pool is not None and conversation is None:
        raise InvalidArgument(
            "quiesce_input_filter: a BufferPool needs conversation=, a callable naming "
            "each call's conversation (CallModelData carries no session id)"
        )

    async def call_model_input_filter(data: CallModelData[Any]) -> ModelInputData:
        items = cast(list[dict[str, Any]], data.model_data.input)
        cid = None if conversation is None else conversation(data)
        if cid is not None and (not isinstance(cid, str) or not cid):
            raise InvalidArgument(
                f"quiesce_input_filter: conversation(data) must give a non-empty str, not {cid!r}"
            )
        first = fingerprint(items[0]) if items and isinstance(items[0], dict) else None
        buf = await target.buffer(cid, first)
        with named_errors():
            await sync_items(buf, items)
        await prune_round(buf, pruner)
        with buf.snapshot() as snap:
            idle = not snap.tombstones and not snap.marks
            rendered = responses.render(snap)
        if idle and rendered == items:
            return data.model_data  # idle: the SDK's own input, unchanged
        return ModelInputData(
            input=cast(list[TResponseInputItem], rendered),
            instructions=data.model_data.instructions,
        )

    return call_model_input_filter
