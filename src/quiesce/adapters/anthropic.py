"""Anthropic-style messages ⇄ entries (plain dicts; no SDK needed).

A conversation is a ``system`` prompt (a str or a list of text blocks) and
messages with ``role`` ``user`` or ``assistant`` whose ``content`` is a str or
a list of blocks: ``text``, ``tool_use`` (assistant) and ``tool_result``
(user). Each text block, tool use and tool result becomes one entry:

* the system prompt becomes ``INSTRUCTION`` entries; user text becomes
  ``user_kind`` (``INSTRUCTION`` by default); assistant text becomes
  ``assistant_kind`` (``REASONING``);
* a ``tool_use`` becomes a ``TOOL_CALL`` entry with the block's id and a
  ``key`` of the tool name plus its input (re-running a pruned call is a
  re-admission); a ``tool_result`` becomes a ``TOOL_OUTPUT`` entry
  ``"<tool_use_id>/result"`` that cites its call, so the pair is pruned
  together or not at all. ``is_error`` is kept in ``meta``.

:func:`render` returns ``{"system": ..., "messages": [...]}`` (pass it as
keyword arguments to a messages API): every ``tool_use`` is answered by a
``tool_result`` block at the start of the very next user message, stale
entries are annotated, removals are one-line tombstone notes at the end of the
system prompt, and constraints and instructions are verbatim.
:func:`validate` checks that shape.

Malformed input — an unknown role or block type, a non-string text, a tool
result without its call — raises :class:`~quiesce.InvalidArgument` or
:class:`~quiesce.InvalidType` naming the message index (``-1`` for the
system prompt), and nothing is appended.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Collection, Mapping, Sequence
from functools import partial
from typing import Any

from .._core.buffer import Buffer, Snapshot
from .._core.entry import Entry, Kind
from .._core.errors import InvalidType
from ._common import (
    Ids,
    Indexed,
    answer,
    append_read,
    call_entry,
    check_messages,
    check_nonempty,
    check_str,
    claim_result,
    fail,
    groups,
    outputs_by_call,
    read_entries,
    removal_note,
    result_entry,
    result_id,
    shown,
    tool_name,
)

__all__ = ["ROLES", "append_messages", "render", "to_entries", "validate"]

#: The message roles this adapter reads (the system prompt is separate).
ROLES = frozenset({"user", "assistant"})

Message = dict[str, Any]
Block = dict[str, Any]

#: Roles rendered into the system prompt (``developer`` comes from OpenAI-style input).
SYSTEM_ROLES = frozenset({"system", "developer"})

#: Index used in errors about the system prompt.
SYSTEM = -1


def _result_text(index: int, content: object) -> tuple[str, str]:
    """A tool result's content as (text, form)."""
    if content is None:
        return "", "none"
    if isinstance(content, str):
        return content, "str"
    if isinstance(content, list):
        texts = []
        for block in content:
            if not isinstance(block, Mapping) or block.get("type") != "text":
                raise fail(index, "tool_result content blocks must be text blocks")
            texts.append(check_str(index, block.get("text"), "tool_result text"))
        return "\n".join(texts), "blocks"
    raise fail(
        index,
        f"tool_result content must be a str or a list, not {type(content).__name__}",
        type_error=True,
    )


def _system(system: object, *, prefix: str, turn: int | None) -> list[Indexed]:
    if system is None:
        return []
    msg = f"{prefix}system"
    if isinstance(system, str):
        meta = {"role": "system", "msg": msg, "form": "str"}
        return [(SYSTEM, Entry(msg, Kind.INSTRUCTION, system, (), turn, None, meta))]
    if not isinstance(system, list):
        raise fail(
            SYSTEM,
            f"system must be a str or a list of text blocks, not {type(system).__name__}",
            type_error=True,
        )
    out: list[Indexed] = []
    for n, block in enumerate(system):
        if not isinstance(block, Mapping) or block.get("type") != "text":
            raise fail(SYSTEM, "system blocks must be text blocks")
        text = check_str(SYSTEM, block.get("text"), "system text")
        meta = {"role": "system", "msg": msg, "form": "blocks"}
        out.append((SYSTEM, Entry(f"{msg}.{n}", Kind.INSTRUCTION, text, (), turn, None, meta)))
    return out


def _indexed(
    messages: Sequence[Any],
    *,
    system: object,
    prefix: str,
    start: int,
    turn: int | None,
    user_kind: Kind,
    assistant_kind: Kind,
    calls: Collection[str],
) -> list[Indexed]:
    out = _system(system, prefix=prefix, turn=turn)
    new_id = Ids(prefix, start)
    open_calls: set[str] = set(calls)
    answered: set[str] = set()
    for index, m in enumerate(check_messages(messages)):
        role = m.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise fail(index, f"unknown role {role!r} (expected 'user' or 'assistant')")
        content = m.get("content")
        text_kind = user_kind if role == "user" else assistant_kind
        msg: str | None = None
        if isinstance(content, str):
            eid = new_id()
            meta: dict[str, object] = {"role": role, "msg": eid, "form": "str"}
            out.append((index, Entry(eid, text_kind, content, (), turn, None, meta)))
            continue
        if not isinstance(content, list):
            raise fail(
                index,
                f"content must be a str or a list of blocks, not {type(content).__name__}",
                type_error=True,
            )
        if not content:
            raise fail(index, "content must not be an empty list")
        for block in content:
            if not isinstance(block, Mapping):
                raise fail(
                    index,
                    f"each content block must be a dict, not {type(block).__name__}",
                    type_error=True,
                )
            kind = block.get("type")
            if kind == "text":
                text = check_str(index, block.get("text"), "text")
                eid = new_id()
                msg = msg or eid
                meta = {"role": role, "msg": msg, "form": "blocks"}
                out.append((index, Entry(eid, text_kind, text, (), turn, None, meta)))
            elif kind == "tool_use" and role == "assistant":
                call_id = check_nonempty(index, block.get("id"), "tool_use id")
                name = check_nonempty(index, block.get("name"), "tool_use name")
                tool_input = block.get("input", {})
                if not isinstance(tool_input, Mapping):
                    raise fail(index, "tool_use input must be a dict", type_error=True)
                if call_id in open_calls:
                    raise fail(index, f"tool_use id {call_id!r} is used twice")
                try:
                    arguments = json.dumps(tool_input, sort_keys=True, ensure_ascii=False)
                except (TypeError, ValueError) as exc:
                    raise fail(index, f"tool_use input is not JSON: {exc}") from None
                msg = msg or call_id
                meta = {
                    "role": role,
                    "msg": msg,
                    "form": "blocks",
                    "tool": name,
                    "input": arguments,
                }
                out.append(call_entry(index, call_id, name, arguments, turn, meta))
                open_calls.add(call_id)
            elif kind == "tool_result" and role == "user":
                call_id = check_nonempty(index, block.get("tool_use_id"), "tool_use_id")
                claim_result(
                    index, call_id, open_calls, answered, call="tool_use", result="tool_result"
                )
                text, form = _result_text(index, block.get("content"))
                is_error = block.get("is_error")
                if is_error is not None and not isinstance(is_error, bool):
                    raise fail(index, "tool_result is_error must be a bool", type_error=True)
                msg = msg or result_id(call_id)
                meta = {"role": role, "msg": msg, "form": form}
                if is_error is not None:
                    meta["is_error"] = is_error
                out.append(result_entry(index, call_id, text, turn, meta))
            else:
                raise fail(index, f"unsupported content block {kind!r} in a {role} message")
    return out


def to_entries(
    messages: Sequence[Mapping[str, Any]],
    *,
    system: str | Sequence[Mapping[str, Any]] | None = None,
    prefix: str = "m",
    start: int = 0,
    turn: int | None = None,
    user_kind: Kind = Kind.INSTRUCTION,
    assistant_kind: Kind = Kind.REASONING,
    calls: Collection[str] = (),
) -> list[Entry]:
    """Entries for ``system`` and ``messages``, in order. Text blocks get ids
    ``prefix + n`` counting from ``start``; tool uses keep their ids; the
    system prompt is ``prefix + "system"``. ``calls`` are ids of tool uses
    made earlier. Raises ``InvalidArgument``/``InvalidType`` naming the
    first bad message."""
    read = partial(
        _indexed,
        messages,
        system=system,
        prefix=prefix,
        turn=turn,
        user_kind=user_kind,
        assistant_kind=assistant_kind,
    )
    return read_entries(
        read, start=start, calls=calls, user_kind=user_kind, assistant_kind=assistant_kind
    )


def append_messages(
    buf: Buffer,
    messages: Sequence[Mapping[str, Any]],
    *,
    system: str | Sequence[Mapping[str, Any]] | None = None,
    turn: int | None = None,
    prefix: str = "m",
    user_kind: Kind = Kind.INSTRUCTION,
    assistant_kind: Kind = Kind.REASONING,
) -> int:
    """Append ``system`` and ``messages`` to ``buf``; returns the head version.

    Everything is validated before the first append (shape, results answering
    live or earlier calls, unused ids, no tombstoned content), so an error
    names its message index and leaves the buffer unchanged.
    """
    read = partial(
        _indexed,
        messages,
        system=system,
        prefix=prefix,
        turn=turn,
        user_kind=user_kind,
        assistant_kind=assistant_kind,
    )
    return append_read(buf, read, user_kind=user_kind, assistant_kind=assistant_kind)


def _text_block(text: str) -> Block:
    return {"type": "text", "text": text}


def _tool_use(e: Entry) -> Block:
    name = tool_name(e)
    raw = e.meta.get("input", e.meta.get("arguments"))
    tool_input: Any = {"input": e.body}
    if isinstance(raw, str):
        # An OpenAI-style call's arguments need not be a JSON object.
        with contextlib.suppress(ValueError):
            parsed = json.loads(raw)
            if isinstance(parsed, dict):
                tool_input = parsed
    return {"type": "tool_use", "id": e.id, "name": name, "input": tool_input}


def _tool_result(call_id: str, text: str, result: Entry | None) -> Block:
    block: Block = {"type": "tool_result", "tool_use_id": call_id}
    form = "str" if result is None else result.meta.get("form", "str")
    if form == "blocks":
        block["content"] = [_text_block(text)]
    elif form != "none" or text:
        block["content"] = text
    if result is not None and isinstance(result.meta.get("is_error"), bool):
        block["is_error"] = result.meta["is_error"]
    return block


def render(
    snap: Snapshot, *, annotate_stale: bool = True, tombstone_notes: bool = True
) -> dict[str, Any]:
    """``{"system": ..., "messages": [...]}`` for the snapshot's window.

    System entries (the system prompt, and ``INSTRUCTION``/``CONSTRAINT``
    entries made without an adapter) form the system prompt, verbatim, with
    one tombstone note per removal after them. Each assistant message with
    ``tool_use`` blocks is followed by a user message that starts with one
    ``tool_result`` per call: the live result, else its tombstone note, else
    a note that no result was recorded. ``"system"`` is left out when empty.
    O(n + tombstones).
    """
    entries = snap.entries()
    marks = snap.marks
    tombstones = snap.tombstones
    results = outputs_by_call(entries)
    system_parts: list[tuple[str, str]] = []
    turns: list[tuple[str, list[Block], str]] = []  # role, blocks, form
    in_place: set[str] = set()
    gs = groups(entries)
    skip_next = False
    for n, group in enumerate(gs):
        if skip_next:
            skip_next = False
            continue
        if group.role in SYSTEM_ROLES:
            for e in group.entries:
                system_parts.append(
                    (shown(e, marks, annotate=annotate_stale), str(e.meta.get("form", "str")))
                )
            continue
        role = "assistant" if group.role == "assistant" else "user"
        blocks: list[Block] = []
        calls: list[Entry] = []
        for e in group.entries:
            if e.kind is Kind.TOOL_OUTPUT:
                continue  # rendered right after its call
            if e.kind is Kind.TOOL_CALL:
                calls.append(e)
                blocks.append(_tool_use(e))
            else:
                blocks.append(_text_block(shown(e, marks, annotate=annotate_stale)))
        if not blocks:
            continue
        first = group.entries[0]
        form = (
            "str"
            if len(blocks) == 1 and not calls and first.meta.get("form", "str") == "str"
            else "blocks"
        )
        turns.append((role, blocks, form))
        if calls:
            answers: list[Block] = []
            for c in calls:
                text, result = answer(
                    c, results, marks, tombstones, annotate=annotate_stale, in_place=in_place
                )
                answers.append(_tool_result(c.id, text, result))
            # The user message right after keeps its own text after the results.
            if n + 1 < len(gs) and gs[n + 1].role == "user":  # (not an OpenAI "tool" group)
                for e in gs[n + 1].entries:
                    if e.kind is not Kind.TOOL_OUTPUT:
                        answers.append(_text_block(shown(e, marks, annotate=annotate_stale)))
                skip_next = True
            turns.append(("user", answers, "blocks"))
    messages: list[Message] = [
        {"role": role, "content": blocks[0]["text"] if form == "str" else blocks}
        for role, blocks, form in turns
    ]
    out: dict[str, Any] = {}
    note = removal_note(tombstones, skip=in_place) if tombstone_notes else None
    if note is not None:
        system_parts.append((note, "str"))
    if system_parts:
        if all(form == "str" for _t, form in system_parts) and len(system_parts) == 1:
            out["system"] = system_parts[0][0]
        elif any(form == "blocks" for _t, form in system_parts):
            out["system"] = [_text_block(t) for t, _f in system_parts]
        else:
            out["system"] = "\n\n".join(t for t, _f in system_parts)
    out["messages"] = messages
    return out


def validate(messages: Sequence[Mapping[str, Any]], *, system: object = None) -> None:
    """Check what a messages API checks: roles ``user``/``assistant``, str or
    block contents, and every ``tool_use`` answered by a ``tool_result`` (in
    any order) at the start of the very next message, a user message; and no other
    ``tool_result``. Raises ``InvalidArgument``/``InvalidType`` naming the
    first bad message."""
    if system is not None and not isinstance(system, str | list):
        raise InvalidType(f"system must be a str or a list, not {type(system).__name__}")
    msgs = check_messages(messages)
    pending: list[str] = []
    for index, m in enumerate(msgs):
        role = m.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise fail(index, f"unknown role {role!r}")
        content = m.get("content")
        if isinstance(content, str):
            blocks: list[Any] = [{"type": "text", "text": content}]
        elif isinstance(content, list) and content:
            blocks = content
        else:
            raise fail(index, "content must be a str or a non-empty list", type_error=True)
        want = pending
        pending = []
        results_done = False
        for block in blocks:
            if not isinstance(block, Mapping):
                raise fail(index, "each content block must be a dict", type_error=True)
            kind = block.get("type")
            if kind == "tool_result":
                if role != "user" or results_done:
                    raise fail(index, "tool_result blocks must come first in a user message")
                call_id = block.get("tool_use_id")
                if call_id not in want:
                    raise fail(
                        index, f"tool_result for {call_id!r} does not answer the previous tool_use"
                    )
                want = [w for w in want if w != call_id]
                _result_text(index, block.get("content"))
                continue
            results_done = True
            if want:
                raise fail(index, f"tool_use {want[0]!r} has no tool_result right after it")
            if kind == "text":
                check_str(index, block.get("text"), "text")
            elif kind == "tool_use" and role == "assistant":
                pending.append(check_nonempty(index, block.get("id"), "tool_use id"))
            else:
                raise fail(index, f"unsupported content block {kind!r} in a {role} message")
        if want:
            raise fail(index, f"tool_use {want[0]!r} has no tool_result right after it")
    if pending:
        raise fail(len(msgs), f"tool_use {pending[0]!r} has no tool_result")
