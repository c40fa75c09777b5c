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
* ``pop_item`` is the host's undo: it prunes the newest item, as actor
  ``host:openai-agents``, leaving a tombstone and a log record. The buffer's
  policy still holds: a protected item (a user or system message is
  ``INSTRUCTION``) is never removed, and ``pop_item`` raises
  :class:`~quiesce.ProtectedEntry` instead, removing nothing (the SDK's
  rewind treats a failing ``pop_item`` as "cannot rewind" and restores).
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

The session and the filter are anyio code (they run on trio too); the SDK's
runner is asyncio-only, so an agent run using them is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

import anyio

from .._core.buffer import Buffer
from .._core.entry import thaw as plain
from .._core.errors import InvalidArgument, InvalidType, ProtectedEntry
from .._core.records import Status
from .._runtime import RuntimeBuffer
from ..adapters import responses
from ..pruner import Pruner
from ._glue import check_setup, missing_extra, prune_round

try:
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import SessionSettings, resolve_session_limit
    from agents.run_config import CallModelData, ModelInputData
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise missing_extra("the OpenAI Agents SDK", "openai-agents") from exc

__all__ = ["QuiesceSession", "quiesce_input_filter"]

ACTOR = "host:openai-agents"

_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})


@contextmanager
def _named() -> Iterator[None]:
    """Bad input from the SDK: the adapter's error, naming the framework."""
    try:
        yield
    except (InvalidArgument, InvalidType) as exc:
        raise type(exc)(f"openai-agents: {exc}") from None


def _trimmed(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tail of a window cut at an arbitrary item: drop leading outputs
    (their call was cut off). A reasoning item is never stranded by the cut:
    the items of its turn come after it. O(n)."""
    start = 0
    while start < len(items) and items[start].get("type") in _OUTPUTS:
        start += 1
    return items[start:]


def _without(items: list[dict[str, Any]], gone: list[Any]) -> list[dict[str, Any]]:
    """``items`` minus one occurrence of each item in ``gone`` (the stored
    items of entries staged for removal), and minus outputs left without
    their call. O(n + g)."""
    if not gone:
        return items
    remaining = list(gone)
    kept: list[dict[str, Any]] = []
    dropped_calls: set[str] = set()
    for item in items:
        if item in remaining:
            remaining.remove(item)
            if item.get("type") in ("function_call", "custom_tool_call"):
                dropped_calls.add(str(item.get("call_id")))
            continue
        if item.get("type") in _OUTPUTS and item.get("call_id") in dropped_calls:
            continue
        kept.append(item)
    return kept


class QuiesceSession:
    """An Agents SDK ``Session`` held in a quiesce buffer (see the module docstring).

    ``session_id`` names the session; ``buffer`` holds it (one buffer per
    session); ``pruner`` runs once before each ``get_items`` (the SDK reads
    the history before each run). All methods are checkpoints.
    """

    session_settings: SessionSettings | None = None

    def __init__(self, session_id: str, buffer: Buffer, *, pruner: Pruner | None = None) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise InvalidArgument("QuiesceSession: session_id must be a non-empty str")
        check_setup(buffer, pruner, "QuiesceSession")
        self.session_id = session_id
        self.buffer = buffer
        self.pruner = pruner
        self._pop_lock = anyio.Lock()

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The stored items, oldest first; the newest ``limit`` items if given
        (see the module docstring)."""
        await prune_round(self.buffer, self.pruner)
        await anyio.lowlevel.checkpoint()
        n = resolve_session_limit(limit, self.session_settings)
        with self.buffer.snapshot() as snap:
            items = responses.render(snap, annotate_stale=False, tombstone_notes=False)
            staged = self.buffer.staged()
            gone = [plain(e.content) for e in snap if e.id in staged and e.content is not None]
        items = _without(items, gone)
        if n is not None:
            items = _trimmed(items[-n:] if n > 0 else [])
        return cast(list[TResponseInputItem], items)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` as one synchronous step (atomic with respect to
        other coroutines on the loop). Bad items raise :class:`InvalidArgument`
        or :class:`InvalidType` and nothing is appended."""
        await anyio.lowlevel.checkpoint()
        with _named():
            responses.append_messages(self.buffer, cast(list[dict[str, Any]], items))

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item, or ``None`` if there is none.

        The removal is a prune by ``host:openai-agents``: tombstoned at once,
        or staged (and already left out of :meth:`get_items`) while a reader
        still pins it. A protected item raises :class:`ProtectedEntry` and
        nothing changes. Concurrent pops take turns (each removes a different
        item). Cancellation: the prune is applied or not as a whole."""
        async with self._pop_lock:  # two pops never pick the same newest item
            with self.buffer.snapshot() as snap:
                staged = self.buffer.staged()
                live = [e for e in snap if e.id not in staged and e.content is not None]
            if not live:
                return None
            newest = live[-1]
            report = await _prune(self.buffer, [newest.id], reason="pop_item")
        outcome = report[newest.id]
        if outcome.status not in (Status.PRUNED, Status.DEFERRED):
            why = outcome.refusal.name if outcome.refusal else outcome.status.name
            raise ProtectedEntry(
                f"pop_item: the newest item {newest.id!r} is protected by the buffer's "
                f"policy ({why})"
            )
        return cast(TResponseInputItem, plain(newest.content))

    async def clear_session(self) -> None:
        """Prune every item, as ``host:openai-agents``. Protected items (user
        and system messages) stay: the buffer never removes them."""
        with self.buffer.snapshot() as snap:
            ids = [e.id for e in snap]
        if ids:
            await _prune(self.buffer, ids, reason="clear_session")
        else:
            await anyio.lowlevel.checkpoint()


async def _prune(buf: Buffer, ids: list[str], *, reason: str) -> Any:
    if isinstance(buf, RuntimeBuffer):
        return await buf.aprune(ids, reason=reason, actor=ACTOR)
    return await anyio.to_thread.run_sync(
        lambda: buf.prune(ids, reason=reason, actor=ACTOR), abandon_on_cancel=False
    )


def quiesce_input_filter(
    buffer: Buffer, *, pruner: Pruner | None = None
) -> Callable[[CallModelData[Any]], Awaitable[ModelInputData]]:
    """The value for ``RunConfig(call_model_input_filter=...)``.

    Before each model call: sync the input items into ``buffer`` (see the
    module docstring), run ``pruner`` once, and return the window's items as
    :func:`quiesce.adapters.responses.render` gives them.
    """
    check_setup(buffer, pruner, "quiesce_input_filter")

    async def call_model_input_filter(data: CallModelData[Any]) -> ModelInputData:
        items = cast(list[dict[str, Any]], data.model_data.input)
        with _named():
            responses.sync_messages(buffer, items)
        await prune_round(buffer, pruner)
        with buffer.snapshot() as snap:
            rendered = responses.render(snap)
        return ModelInputData(
            input=cast(list[TResponseInputItem], rendered),
            instructions=data.model_data.instructions,
        )

    return call_model_input_filter
