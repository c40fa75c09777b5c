"""pydantic-ai: :class:`QuiesceHistoryProcessor`, a history processor.

Use it as ``Agent(..., capabilities=[ProcessHistory(QuiesceHistoryProcessor(buf))])``
(pydantic-ai 2.x; 1.x also took ``history_processors=[fn]``, which 2.x removed:
the processor is a plain async ``(ctx, messages) -> messages`` callable and
fits both). What it keeps true, before each model request:

* the run's conversation picks the buffer: ``ctx.conversation_id`` (one
  buffer per conversation in a :class:`~quiesce.BufferPool`; a single buffer
  is bound to the first conversation and raises
  :class:`~quiesce.ConversationMismatch` for another, before the model is
  called).
* the run's messages are synced into the buffer, as a faithful diff of the
  history last synced (:func:`quiesce.integrations._store.sync_history`): a
  message gone from the run's history is a prune request through the policy
  (a protected one stays, the removal escalated). pydantic-ai messages carry
  no ids: a message is matched by content (a stale copy of a pruned message
  is not re-appended), and a message object the processor itself built (a
  trimmed or rewritten one, handed back by the run) by the processor's weak
  record of what it returned; quiesce's note and stand-in parts handed back
  are stripped and never become entries. Nothing is added to the messages
  (no ``metadata`` the model would not have). The same objects handed back
  are one pass of identity checks. Each message is held as
  ``ModelMessagesTypeAdapter``'s own JSON dump: ``ThinkingPart`` with its
  ``signature``, images and binary ``UserPromptPart`` content, provider
  fields and timestamps come back unchanged.
* the configured pruner runs once; then the window of a pinned snapshot is
  returned: pruned ``ToolCallPart``\\ s and their ``ToolReturnPart`` /
  ``RetryPromptPart`` leave together, a result pruned while its call stays is
  replaced by a stand-in return, and the note of removals and stale marks is
  a ``SystemPromptPart`` added to the first request.
* transparent when idle: every message quiesce did not change is returned
  as the very object the run gave (``BinaryContent`` stays ``BinaryContent``,
  never the ``BinaryImage`` a JSON round trip makes of it); the user's
  message objects are never mutated (a trimmed message is a copy).

pydantic-ai's ``ProcessHistory`` writes the processed list back into the
run's history (``ctx.messages[:] = ...``); the buffer keeps the full history
either way, and ``result.all_messages()`` carries the ids that let a new run
continue over a reopened buffer.

pydantic-ai runs its tools with asyncio tasks: it runs on **asyncio only**.

This module holds the processor and the sync; a message read into a unit
and a window rendered back into messages are
:mod:`~quiesce.integrations._pydantic_ai_parts`'s, :class:`QuiesceStream`
is :mod:`~quiesce.integrations._pydantic_ai_stream`'s (both re-exported
here).
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Sequence
from typing import Any

from .._core.buffer import Buffer
from .._core.entry import canonical_json, thaw
from .._core.errors import InvalidArgument
from .._pool import BufferPool, ConversationMismatch
from .._protocol import AsyncBuffer, async_buffer
from ..adapters._common import ReadmitPolicy, SyncReport, fingerprint
from ..pruner import Pruner
from . import _store
from ._conversation import Target, anonymous_id
from ._glue import framework_imports, prune_round

with framework_imports("pydantic-ai", "pydantic-ai"):
    from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse
    from pydantic_ai.tools import RunContext

# The parts of this integration, imported once pydantic-ai is known to be there.
from ._pydantic_ai_parts import (
    FRAMEWORK,
    checked,
    conversation_of,
    first_key,
    has_quiesce_parts,
    held_dump,
    history_reader,
    pair_calls,
    read_unit,
    render_given,
    trimmed_dumps,
    unnoted,
)
from ._pydantic_ai_parts import ID_KEY as ID_KEY
from ._pydantic_ai_parts import render_messages as render_messages
from ._pydantic_ai_parts import to_units as to_units
from ._pydantic_ai_stream import QuiesceStream as QuiesceStream

__all__ = [
    "QuiesceHistoryProcessor",
    "QuiesceStream",
    "render_messages",
    "sync_messages",
    "to_units",
]


def sync_messages(
    buffer: Buffer,
    messages: Sequence[object],
    *,
    readmit: ReadmitPolicy = "record",
    known: Sequence[str | None] | None = None,
) -> SyncReport:
    """Sync the run's history into the buffer, faithfully (see the module
    docstring and :mod:`quiesce.integrations._store`): new messages are
    appended (idempotent), quiesce's note and stand-in parts are recognised,
    a message gone from the history is a prune request through the policy.
    ``readmit`` and the report are the adapters'
    (:func:`quiesce.adapters.openai.sync_messages`); ``known`` as in
    :func:`to_units`. The edits are written in the calling thread: on an
    event loop the processor settles them with ``aedit`` instead."""
    messages = checked(messages)
    if known is not None and len(known) != len(messages):
        raise InvalidArgument("pydantic-ai: known must give one id (or None) per message")
    report, changes = _store.sync_history(
        buffer,
        messages,
        history_reader(known),
        framework=FRAMEWORK,
        actor=__name__,
        readmit=readmit,
        new_ids="#pa:",
    )
    if changes:
        _store.apply_changes(buffer, changes)
    return report


class QuiesceHistoryProcessor:
    """A pydantic-ai history processor over a quiesce buffer (see the module docstring).

    ``buffer`` is a :class:`~quiesce.Buffer` holding one conversation, or a
    :class:`~quiesce.BufferPool` holding one buffer per
    ``ctx.conversation_id`` (so one module-level ``Agent`` can serve many
    conversations). ``await processor(ctx, messages)`` resolves the
    conversation, syncs, runs the pruner once, and returns the pruned window
    (the run's own message objects wherever nothing changed). Cancellation
    while the pruner runs submits nothing; the sync before it is
    synchronous and complete.

    The processor remembers, weakly, the message objects it built (trimmed
    or rewritten messages) and the entries they stand for, so the run handing
    them back is recognised; the record is O(messages built) and dies with
    the objects.
    """

    def __init__(
        self, buffer: Buffer | AsyncBuffer | BufferPool[Any], *, pruner: Pruner | None = None
    ) -> None:
        self._target = Target(buffer, pruner, "QuiesceHistoryProcessor")
        self.buffer = self._target.given
        self.pool = self._target.pool
        self.pruner = pruner
        self._built: dict[int, tuple[weakref.ref[ModelMessage], str]] = {}
        #: per buffer: the first message synced and its key (see _held_first)
        self._firsts: weakref.WeakKeyDictionary[_store.SyncState, tuple[object, str]] = (
            weakref.WeakKeyDictionary()
        )
        #: per buffer: (version, length) of the last call that returned the
        #: run's own list unchanged (see _still_idle)
        self._idle: weakref.WeakKeyDictionary[_store.SyncState, tuple[int, int]] = (
            weakref.WeakKeyDictionary()
        )
        #: the last run's first two messages and the key they gave (see _first)
        self._first_of: tuple[list[ModelMessage], str | None] | None = None
        #: entry id -> (its dump, the message built from it), per buffer
        self._loaded: weakref.WeakKeyDictionary[object, dict[str, tuple[Any, ModelMessage]]] = (
            weakref.WeakKeyDictionary()
        )

    def _first(self, messages: list[ModelMessage]) -> str | None:
        """The key naming the run's conversation (its first message without
        quiesce's parts), kept for the very objects it was read from: a run
        whose first two messages are the last run's objects (the same
        history, continued) reads nothing again. The sync holds the same
        objects for unchanged. O(1) then, else O(size of the message)."""
        head = messages[:2]
        memo = self._first_of
        if memo is not None and len(head) == len(memo[0]) and all(map(operator.is_, head, memo[0])):
            return memo[1]
        key = first_key(unnoted(head)[:1])
        self._first_of = (head, key)
        return key

    def _known(self, m: object) -> str | None:
        """The entry id of a message object this processor built, or ``None``."""
        found = self._built.get(id(m))
        return found[1] if found is not None and found[0]() is m else None

    def _remember(self, m: ModelMessage, unit: str) -> None:
        key = id(m)

        def forget(_: object, key: int = key) -> None:
            self._built.pop(key, None)

        self._built[key] = (weakref.ref(m, forget), unit)

    def _held_first(self, buffer: AsyncBuffer, state: _store.SyncState) -> str | None:
        """The key of the first message of the history ``buffer`` holds of
        pydantic-ai (``None``: none): the first message last synced, else
        (nothing synced in this process: a reopened durable buffer) its
        first live message. O(1) amortised (cached per synced object)."""
        obj = next((s.obj for s in state.seen if s.unit is not None and s.obj is not None), None)
        if obj is None:
            with buffer.snapshot() as snap:
                entry = next(
                    (
                        e
                        for e in snap
                        if e.meta.get("fw") == FRAMEWORK
                        and e.meta.get("unit") == e.id
                        and e.content is not None
                    ),
                    None,
                )
            return None if entry is None else fingerprint(thaw(entry.content))
        cached = self._firsts.get(state)
        if cached is not None and cached[0] is obj:
            return cached[1]
        if not isinstance(obj, ModelRequest | ModelResponse):
            return None
        key = first_key(unnoted([obj])[:1])
        if key is not None:
            self._firsts[state] = (obj, key)
        return key

    def _check_extends(
        self,
        buffer: AsyncBuffer,
        state: _store.SyncState,
        messages: Sequence[object],
        conversation: str | None,
        first: str | None,
    ) -> None:
        """Raise :class:`~quiesce.ConversationMismatch` when the run's history
        does not extend the one the buffer holds: its first message differs
        and none of its messages is one the buffer synced (a run started
        without ``message_history`` under the same ``conversation_id``, or
        over a buffer that holds another history). Such a run is another
        conversation (the rule of :mod:`quiesce.integrations._conversation`),
        so it is refused before anything is synced — never read as a request
        to prune everything the buffer holds. A processor placed before
        quiesce that drops the first messages keeps later ones the buffer
        holds (the same objects): that is an edit, settled by the sync. O(1)
        when the first message is the held one; O(n) otherwise."""
        held = self._held_first(buffer, state)
        if held is None or first is None or held == first:
            return
        synced = {id(s.obj) for s in state.seen if s.unit is not None}
        if any(id(m) in synced or self._known(m) is not None for m in messages):
            return
        name = f"conversation {conversation!r}, " if conversation is not None else ""
        bound, seen = anonymous_id(held), anonymous_id(first)
        raise ConversationMismatch(
            f"QuiesceHistoryProcessor: this buffer holds {name}a history starting with "
            f"{bound!r}; this run's history starts with {seen!r} and does not extend it "
            "(a run without message_history is another conversation: pass "
            "message_history=result.all_messages() to continue, or give a new "
            "conversation its own buffer)",
            bound=bound,
            seen=seen,
        )

    def _reader(self, buffer: AsyncBuffer, state: _store.SyncState) -> Any:
        """``read(index, message)`` for the sync: quiesce's parts stripped
        (``None``: the message had nothing else), the entry id of a message
        this processor built (or of a trimmed copy handed back, recognised by
        its dump), whose rendered form is then no edit of the framework's."""
        trimmed: dict[str, str] | None = None

        def read(index: int, m: object) -> _store.Unit | None:
            nonlocal trimmed
            shown = m
            if isinstance(m, ModelRequest):
                stripped = unnoted([m])
                if not stripped:
                    return None  # a stand-in request or the note's own request
                shown = stripped[0]
            known = self._known(m)
            if (
                known is None
                and buffer.tombstones
                and isinstance(shown, ModelRequest | ModelResponse)
            ):
                # A trimmed copy may come back (e.g. in a new process).
                if trimmed is None:
                    with buffer.snapshot() as snap:
                        trimmed = trimmed_dumps(snap)
                if trimmed:
                    known = trimmed.get(canonical_json(held_dump(shown)))
            unit = read_unit(index, shown, known)
            if known is not None:
                state.alternates.setdefault(known, set()).add(_store.digest(unit))
            return unit

        return read

    async def __call__(
        self, ctx: RunContext[Any], messages: list[ModelMessage]
    ) -> list[ModelMessage]:
        conversation = conversation_of(ctx)
        first = self._first(messages)
        buffer = await self._target.buffer(conversation, first)
        face = async_buffer(buffer, "QuiesceHistoryProcessor")
        state = _store.state_of(face, FRAMEWORK)
        self._check_extends(face, state, messages, conversation, first)
        before = face.version
        report, changes = await _store.async_sync_history(
            face,
            checked(messages),
            self._reader(face, state),
            framework=FRAMEWORK,
            actor=__name__,
            new_ids="#pa:",
        )
        if changes:
            await _store.aapply_changes(face, changes)
        synced = face.version
        await prune_round(face, self.pruner)
        if self._still_idle(face, state, messages, before, synced, report, bool(changes)):
            self._idle[state] = (face.version, len(messages))
            return messages  # idle, as last time: the run's own list
        given: dict[str, ModelMessage] = {}
        if len(state.seen) == len(messages):
            for m, seen in zip(messages, state.seen, strict=True):
                if seen.unit is not None and not has_quiesce_parts(m):
                    given[seen.unit] = m
        loaded = self._loaded.setdefault(state, {})
        with face.snapshot() as snap:
            rendered, units = render_given(snap, given, state, loaded)
        for m in rendered:
            unit = units.get(id(m))
            if unit is not None and given.get(unit) is not m:
                self._remember(m, unit)
        state.rendered_as([(m, units.get(id(m))) for m in rendered])
        if _store.same_objects(rendered, messages):
            self._idle[state] = (face.version, len(messages))
            return messages  # idle: the run's own list
        self._idle.pop(state, None)
        return rendered

    def _still_idle(
        self,
        buffer: AsyncBuffer,
        state: _store.SyncState,
        messages: Sequence[ModelMessage],
        before: int,
        synced: int,
        report: SyncReport,
        changed: bool,
    ) -> bool:
        """Whether the window is still exactly ``messages`` without rendering
        it: the last call returned the run's own list (idle) at the version
        the buffer had when this call began (nobody wrote since), this run's
        history starts with those very objects (the sync's identity prefix),
        the sync appended each later message as a new entry and changed
        nothing else, the pruning round wrote nothing, nothing is marked or
        pruned, and the new messages pair as they are (every call shown
        answered, no result without its call). Then the render would give
        back ``messages`` object for object, so a turn over a long history
        costs O(new messages) here instead of O(n) rebuilding. O(new)."""
        memo = self._idle.get(state)
        if memo is None or changed:
            return False
        version, n = memo
        if before != version or buffer.version != synced or state.prefix < n:
            return False
        if n == 0 or len(messages) < n:
            return False
        if report.appended != tuple(range(n, len(messages))):
            return False
        head = buffer.head()
        if head.marks or head.tombs.by_id:
            return False
        tail = messages[n:]
        if any(has_quiesce_parts(m) for m in tail):
            return False
        start = n - 1
        while start > 0 and not isinstance(messages[start], ModelResponse):
            start -= 1
        window = list(messages[start:])
        paired = pair_calls(window)
        return _store.same_objects(paired, window)
