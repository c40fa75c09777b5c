"""LangChain messages ⇄ a quiesce buffer: reading, syncing and rendering a
history (the part of :mod:`quiesce.integrations.langchain` that is not the
middleware; import its names from there).

What it keeps true: :func:`to_units` reads a LangChain history into units,
checking every message before any is used (bad input names the message and
field, and nothing is appended); :func:`sync_messages` /
:func:`async_sync_messages` are the faithful diff of
:mod:`quiesce.integrations._store` keyed by ``message.id`` (a no-op sync of
the same objects, or of a checkpointer's equal copies, reads no message
again); :func:`render_messages` rebuilds LangChain messages from the
framework's own dumps, every tool call answered, reusing what it built while
the entries are unchanged. Nothing here awaits except the async sync, whose
writes go through the async paths (no log write on the loop).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .._core.buffer import Buffer, Snapshot
from .._core.entry import Kind
from .._core.errors import InvalidArgument
from .._protocol import AsyncBuffer, async_buffer
from ..adapters._common import ReadmitPolicy, SyncReport, fingerprint
from . import _store
from ._glue import framework_imports

with framework_imports("LangChain", "langchain"):
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
        message_to_dict,
        messages_from_dict,
    )

__all__ = ["async_sync_messages", "render_messages", "sync_messages", "to_units"]

FRAMEWORK = "langchain"
#: the actor of what a sync appends or settles (the public module's name)
ACTOR = "quiesce.integrations.langchain"

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


def read_message(index: int, m: object) -> _store.Unit:
    """Message ``index`` of a history read into a unit (its id: ``m.id``, else
    a ``#lc:`` fingerprint of its dump). Raises :class:`InvalidArgument`
    naming the index and the type or field it cannot represent. O(size)."""
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
    units = [read_message(i, m) for i, m in enumerate(messages)]
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
_SYNC: dict[str, Any] = {"framework": FRAMEWORK, "actor": ACTOR, "ident": _ident}


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
        buffer, _checked(messages), read_message, readmit=readmit, **_SYNC
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
        face, _checked(messages), read_message, readmit=readmit, **_SYNC
    )
    if changes:
        await _store.aapply_changes(face, changes)
    return report


def without_calls(msg: AIMessage, live: set[str]) -> AIMessage:
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
            return without_calls(msg, slot.call_ids)
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


def with_note(system: SystemMessage | None, note: str | None) -> SystemMessage | None:
    if note is None:
        return system
    if system is None:
        return SystemMessage(content=note)
    content = system.content
    if isinstance(content, str):
        return system.model_copy(update={"content": f"{content}\n\n{note}"})
    return system.model_copy(update={"content": [*content, {"type": "text", "text": note}]})
