"""OpenAI-style chat messages ⇄ entries (plain dicts; no SDK needed).

Messages have ``role`` (``system``, ``developer``, ``user``, ``assistant``,
``tool``), ``content``, and for tools ``tool_calls`` / ``tool_call_id``:

* ``system`` and ``developer`` messages become ``INSTRUCTION`` entries (never
  pruned, never paraphrased); ``user`` messages become ``user_kind``
  (``INSTRUCTION`` by default); ``assistant`` text becomes ``assistant_kind``
  (``REASONING``);
* each tool call becomes a ``TOOL_CALL`` entry whose id is the call's id and
  whose ``key`` is the tool name plus its arguments (so running the same call
  again after it was pruned is a re-admission, seed 002); each ``tool``
  message becomes a ``TOOL_OUTPUT`` entry ``"<call id>/result"`` that cites its
  call, so the pair is pruned together or not at all.

:func:`render` turns a snapshot back into messages a chat API accepts: every
tool result right after the assistant message that made the call, stale
entries annotated, each removal as a one-line tombstone note, constraints and
instructions verbatim. :func:`validate` checks that shape.

Malformed input — an unknown role, a non-string content, a tool result
without its call — raises :class:`~quiesce.InvalidArgument` or
:class:`~quiesce.InvalidType` naming the message index, and nothing is
appended.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from functools import partial
from typing import Any

from .._core.buffer import Buffer, Snapshot
from .._core.entry import Entry, Kind
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

#: The roles this adapter reads.
ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})

Message = dict[str, Any]


def _call(index: int, raw: object, seen: set[str]) -> tuple[str, str, str]:
    if not isinstance(raw, Mapping):
        raise fail(
            index, f"each tool call must be a dict, not {type(raw).__name__}", type_error=True
        )
    call_id = check_nonempty(index, raw.get("id"), "tool call id")
    if call_id in seen:
        raise fail(index, f"tool call id {call_id!r} is used twice")
    seen.add(call_id)
    if raw.get("type", "function") != "function":
        raise fail(index, f"tool call {call_id!r} has unsupported type {raw.get('type')!r}")
    fn = raw.get("function")
    if not isinstance(fn, Mapping):
        raise fail(index, f"tool call {call_id!r} needs a 'function' dict", type_error=True)
    name = check_nonempty(index, fn.get("name"), f"tool call {call_id!r} function name")
    arguments = check_str(index, fn.get("arguments"), f"tool call {call_id!r} arguments")
    return call_id, name, arguments


def _indexed(
    messages: Sequence[Any],
    *,
    prefix: str,
    start: int,
    turn: int | None,
    user_kind: Kind,
    assistant_kind: Kind,
    calls: Collection[str],
) -> list[Indexed]:
    out: list[Indexed] = []
    next_id = Ids(prefix, start)
    open_calls: set[str] = set(calls)
    answered: set[str] = set()
    seen_calls: set[str] = set(calls)

    for index, m in enumerate(check_messages(messages)):
        role = m.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise fail(index, f"unknown role {role!r} (expected one of {sorted(ROLES)})")
        content = m.get("content")
        if role == "tool":
            call_id = check_nonempty(index, m.get("tool_call_id"), "tool_call_id")
            text = check_str(index, content, "content")
            claim_result(
                index, call_id, open_calls, answered, call="tool call", result="tool result"
            )
            meta = {"role": "tool", "msg": result_id(call_id)}
            out.append(result_entry(index, call_id, text, turn, meta))
            continue
        tool_calls = m.get("tool_calls")
        if tool_calls is not None and role != "assistant":
            raise fail(index, f"only assistant messages may carry tool_calls, not {role!r}")
        if role == "assistant" and tool_calls is not None:
            if not isinstance(tool_calls, list) or not tool_calls:
                raise fail(index, "tool_calls must be a non-empty list", type_error=True)
            if content is not None:
                check_str(index, content, "content")
            parsed = [_call(index, c, seen_calls) for c in tool_calls]
            msg: str | None = None
            if content:
                msg = next_id()
                meta = {"role": "assistant", "msg": msg}
                out.append((index, Entry(msg, assistant_kind, content, (), turn, None, meta)))
            for call_id, name, arguments in parsed:
                msg = msg or call_id
                meta = {
                    "role": "assistant",
                    "msg": msg,
                    "tool": name,
                    "arguments": arguments,
                    "content": "null" if content is None else "str",
                }
                out.append(call_entry(index, call_id, name, arguments, turn, meta))
                open_calls.add(call_id)
            continue
        text = check_str(index, content, "content")
        kind = (
            Kind.INSTRUCTION
            if role in ("system", "developer")
            else (user_kind if role == "user" else assistant_kind)
        )
        eid = next_id()
        meta = {"role": role, "msg": eid}
        name = m.get("name")
        if name is not None:
            meta["name"] = check_nonempty(index, name, "name")
        out.append((index, Entry(eid, kind, text, (), turn, None, meta)))
    return out


def to_entries(
    messages: Sequence[Mapping[str, Any]],
    *,
    prefix: str = "m",
    start: int = 0,
    turn: int | None = None,
    user_kind: Kind = Kind.INSTRUCTION,
    assistant_kind: Kind = Kind.REASONING,
    calls: Collection[str] = (),
) -> list[Entry]:
    """Entries for ``messages``, in order. Text parts get ids ``prefix + n``
    counting from ``start``; tool calls keep their ids. ``calls`` are ids of
    tool calls made earlier (results in ``messages`` may answer them).
    Raises ``InvalidArgument``/``InvalidType`` naming the first bad message."""
    read = partial(
        _indexed,
        messages,
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
    turn: int | None = None,
    prefix: str = "m",
    user_kind: Kind = Kind.INSTRUCTION,
    assistant_kind: Kind = Kind.REASONING,
) -> int:
    """Append ``messages`` to ``buf``; returns the head version after them.

    Everything is validated (shape, tool results answering live or earlier
    calls, unused ids, no tombstoned content) before the first append, so an
    error names its message index and leaves the buffer unchanged. Text ids
    are ``prefix`` plus a number that only grows (the version at the call).
    """
    read = partial(
        _indexed,
        messages,
        prefix=prefix,
        turn=turn,
        user_kind=user_kind,
        assistant_kind=assistant_kind,
    )
    return append_read(buf, read, user_kind=user_kind, assistant_kind=assistant_kind)


def _tool_call(e: Entry) -> dict[str, Any]:
    name = tool_name(e)
    # Arguments as this adapter read them, or the input an Anthropic-style
    # tool use carried (also a JSON string), or the body wrapped as JSON.
    arguments = e.meta.get("arguments", e.meta.get("input"))
    if not isinstance(arguments, str):
        arguments = json.dumps({"input": e.body})
    return {"id": e.id, "type": "function", "function": {"name": name, "arguments": arguments}}


def render(
    snap: Snapshot, *, annotate_stale: bool = True, tombstone_notes: bool = True
) -> list[Message]:
    """Messages for the snapshot's window, ready for a chat completions API.

    Every assistant message with ``tool_calls`` is followed at once by one
    ``tool`` message per call: the live result (wherever it sits in the
    window), else the result's tombstone note, else a note that no result
    was recorded. Stale entries get a one-line ``[stale: reason]`` prefix.
    Removals appear as one system message, one line per tombstone, after the
    leading system messages. Constraints and instructions are verbatim.
    O(n + tombstones).
    """
    entries = snap.entries()
    marks = snap.marks
    tombstones = snap.tombstones
    results = outputs_by_call(entries)
    out: list[Message] = []
    in_place: set[str] = set()
    for group in groups(entries):
        calls = [e for e in group.entries if e.kind is Kind.TOOL_CALL]
        texts = [e for e in group.entries if e.kind not in (Kind.TOOL_CALL, Kind.TOOL_OUTPUT)]
        if not calls and not texts:
            continue  # tool results: rendered right after their call
        if calls:
            content: str | None = "\n\n".join(
                shown(e, marks, annotate=annotate_stale) for e in texts
            )
            if not content and calls[0].meta.get("content") != "str":
                content = None
            out.append(
                {
                    "role": "assistant",
                    "content": content,
                    "tool_calls": [_tool_call(c) for c in calls],
                }
            )
            for c in calls:
                body, _result = answer(
                    c, results, marks, tombstones, annotate=annotate_stale, in_place=in_place
                )
                out.append({"role": "tool", "tool_call_id": c.id, "content": body})
            continue
        message: Message = {
            "role": group.role,
            "content": "\n\n".join(shown(e, marks, annotate=annotate_stale) for e in texts),
        }
        name = texts[0].meta.get("name")
        if isinstance(name, str):
            message["name"] = name
        out.append(message)
    note = removal_note(tombstones, skip=in_place) if tombstone_notes else None
    if note is not None:
        at = 0
        while at < len(out) and out[at]["role"] in ("system", "developer"):
            at += 1
        out.insert(at, {"role": "system", "content": note})
    return out


def validate(messages: Sequence[Mapping[str, Any]]) -> None:
    """Check what a chat completions API checks: known roles, string contents,
    and every assistant message with ``tool_calls`` followed immediately by
    exactly one ``tool`` message per call, in any order (and no other
    ``tool`` message).
    Raises ``InvalidArgument``/``InvalidType`` naming the first bad message."""
    msgs = check_messages(messages)
    pending: list[str] = []
    for index, m in enumerate(msgs):
        role = m.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise fail(index, f"unknown role {role!r}")
        if role == "tool":
            call_id = check_nonempty(index, m.get("tool_call_id"), "tool_call_id")
            check_str(index, m.get("content"), "content")
            if call_id not in pending:
                raise fail(index, f"tool result for {call_id!r} does not follow its call")
            pending.remove(call_id)
            continue
        if pending:
            raise fail(index, f"tool call {pending[0]!r} has no result right after it")
        tool_calls = m.get("tool_calls")
        if role == "assistant" and tool_calls is not None:
            if m.get("content") is not None:
                check_str(index, m.get("content"), "content")
            if not isinstance(tool_calls, list) or not tool_calls:
                raise fail(index, "tool_calls must be a non-empty list", type_error=True)
            seen: set[str] = set()
            pending = [_call(index, c, seen)[0] for c in tool_calls]
            continue
        check_str(index, m.get("content"), "content")
    if pending:
        raise fail(len(msgs), f"tool call {pending[0]!r} has no result")
