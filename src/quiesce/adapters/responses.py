"""OpenAI Responses API input items ⇄ entries (plain dicts; no SDK needed).

What it keeps true: ``render(buf) == items`` after ``append_messages(buf,
items)`` — exactly — when nothing was pruned or marked (except text lines that
imitate a quiesce note, which get a backslash). Every rendered window is a
valid input list: each ``function_call`` has its ``function_call_output``,
and each ``reasoning`` item keeps the items of its turn after it.

Items read and given back unchanged (each entry keeps its item in
``Entry.content``; ``id`` and ``status`` included):

* ``message`` items, with or without ``"type": "message"`` (``role``
  ``user``/``assistant``/``system``/``developer``; ``content`` a str or a list
  of ``input_text``, ``output_text``, ``refusal``, ``input_image``,
  ``input_file``, ``input_audio`` parts, future part types kept opaque);
* ``function_call`` (entry id: its ``call_id``; ``key``: name and
  arguments, so a re-run after a prune is a re-admission) and
  ``function_call_output`` (entry ``"<call_id>#result"`` citing the call;
  ``output`` a str or a list of parts);
* ``reasoning`` (``summary``, ``content``, ``encrypted_content``): with
  ``encrypted_content`` it is *signed* (:attr:`~quiesce.Entry.sealed`) —
  never rewritten or summarized, removed only with its turn. Every item of
  the turn that follows a reasoning item (up to the next user message or
  tool output) cites it, so the turn is pruned together;
* any other item with a ``type`` string (``web_search_call``,
  ``computer_call``, ``item_reference``, future types): kept opaque and
  round-tripped; an ``..._output`` item with a ``call_id`` cites the item
  that made that call, so the pair is pruned together.

Ids: an item's own ``id`` (or a call's ``call_id``) is kept verbatim and must
not contain ``#``; items without one get a content key ``#<hash>.<n>`` (see
:mod:`quiesce.adapters._common`).

Notes (one line each, starting ``[quiesce:``, fields escaped):
``[quiesce: stale at turn 3: <reason>]`` as a first text part (``input_text``,
or ``output_text`` in an assistant output message) or line of a stale message
or tool output (reasoning items and calls carry no note);
``[quiesce: <id> pruned at turn 41 by <actor>: <reason>]`` for each removal,
listed under ``[quiesce: removed from this context]`` in one ``system``
message after the leading system/developer messages, or as the ``output`` of
a pruned tool result; ``[quiesce: no result recorded for <call_id>]`` for a
call in flight. User, assistant and tool text that starts a line with
``[quiesce`` is rendered as ``\\[quiesce``.

Malformed items raise :class:`~quiesce.InvalidArgument` or
:class:`~quiesce.InvalidType` naming the item index and field; nothing is
appended and the head version is unchanged.

The Responses API's part of the adapter skeleton
(:mod:`quiesce.adapters._skeleton`, which errors call an "item"): an item
into one entry (:func:`_read_items`), a window into items
(:func:`_render`), the input list's rules (:func:`validate`); everything
else is the skeleton's.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from .._core.buffer import Buffer, Snapshot
from .._core.entry import Entry, Kind, result_id
from .._core.version import Version
from .._protocol import AsyncBuffer
from ._admit import Read, ReadmitPolicy, SyncReport
from ._checks import (
    check_messages,
    check_nonempty,
    check_str,
    entry,
    fail,
    foreign_id,
    is_call,
    json_value,
    parts_text,
)
from ._keys import PLACEHOLDER_IDS, Keys, fingerprint
from ._notes import NOTE_LIMIT, NOTE_NAMES, escape_blocks, escape_text, stale_note
from ._skeleton import Adapter
from ._stream import Sink
from ._stream_responses import ResponsesStream
from ._window import Window, arguments_json, plain, tool_name

__all__ = [
    "ROLES",
    "SyncReport",
    "append_messages",
    "append_stream",
    "render",
    "sync_messages",
    "to_entries",
    "validate",
]

API = "responses"

#: The message roles this adapter reads.
ROLES = frozenset({"user", "assistant", "system", "developer"})

Item = dict[str, Any]

#: Part types whose text is the body's text.
_TEXT_PARTS = {"input_text": "text", "output_text": "text", "refusal": "refusal"}


def _parts_text(index: int, content: object, what: str) -> str:
    return parts_text(index, content, what, noun="parts", fields=_TEXT_PARTS)


def _reasoning_text(index: int, item: Mapping[str, Any]) -> str:
    texts: list[str] = []
    for field in ("summary", "content"):
        parts = item.get(field)
        if parts is None and field == "content":
            continue
        if not isinstance(parts, list | tuple):
            raise fail(index, f"reasoning {field} must be a list", type_error=True)
        for n, part in enumerate(parts):
            if not isinstance(part, Mapping):
                raise fail(index, f"{field}[{n}] must be a dict", type_error=True)
            texts.append(check_str(index, part.get("text"), f"{field}[{n}].text"))
    encrypted = item.get("encrypted_content")
    if encrypted is not None:
        check_str(index, encrypted, "encrypted_content")
    return "\n".join(texts)


def _item_type(index: int, item: Mapping[str, Any]) -> str:
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    return check_nonempty(index, kind, "type")


def _own_id(
    index: int,
    value: object,
    frozen: Any,
    head: Version | None,
    seen: Collection[str],
    rewritable: Collection[str],
) -> str | None:
    """The item's own ``id`` as its entry id, or ``None`` (a generated id,
    the item keeping its ``id`` field verbatim) when the id is not an
    identity: a placeholder (``FAKE_RESPONSES_ID``), an id used earlier in
    the list, or one the buffer holds (live or pruned) for another item —
    unless the history dropped that item (``rewritable``: the new one is
    its rewrite)."""
    item_id = foreign_id(index, value, "id")
    if item_id in PLACEHOLDER_IDS or item_id in seen:
        return None
    if head is not None and item_id not in rewritable:
        slot = head.live.get(item_id)
        if slot is not None:
            held = slot.entry.content
            if held is not None and fingerprint(held) != fingerprint(frozen):
                return None
    return item_id


def _read_items(
    items: object,
    *,
    head: Version | None,
    keys: Keys,
    calls: Collection[str],
    turn: int | None,
    user_kind: Kind,
    assistant_kind: Kind,
    start: int = 0,
    prev: str | None = None,
    rewritable: Collection[str] = (),
    first: bool = True,
) -> list[Read]:
    """One :class:`Read` (of one entry) per item; the kinds are checked and
    errors name the "item" by :meth:`Adapter.read`."""
    out: list[Read] = []
    open_calls: dict[str, str] = dict.fromkeys(calls, "function_call")
    answered: set[str] = set()
    seen: set[str] = set()
    reasoning: list[str] = []  # the open turn's reasoning entries (cited by its items)
    for index, item in enumerate(check_messages(items, "item", start), start):
        frozen = json_value(index, item, "item")
        kind = _item_type(index, item)
        item_id = item.get("id")
        if item_id is not None:
            item_id = _own_id(index, item_id, frozen, head, seen, rewritable)
        meta: dict[str, Any] = {"api": API, "type": kind}
        refs: tuple[str, ...] = ()
        if kind == "message":
            role = item.get("role")
            if not isinstance(role, str) or role not in ROLES:
                raise fail(index, f"role must be one of {sorted(ROLES)}, not {role!r}")
            body = _parts_text(index, item.get("content"), "content")
            if role == "assistant":
                ekind = assistant_kind
                refs = tuple(reasoning)
            else:
                ekind = Kind.INSTRUCTION if role in ("system", "developer") else user_kind
                reasoning = []
            eid = item_id or keys(frozen)
            meta["role"] = role
        elif kind == "reasoning":
            body = _reasoning_text(index, item)
            ekind = assistant_kind
            eid = item_id or keys(frozen)
            meta["role"] = "assistant"
        elif kind == "function_call":
            call_id = foreign_id(index, item.get("call_id"), "call_id")
            name = check_nonempty(index, item.get("name"), "name")
            arguments = check_str(index, item.get("arguments"), "arguments")
            body = f"{name} {arguments}"
            ekind = Kind.TOOL_CALL
            eid = call_id
            meta.update(role="assistant", tool=name, arguments=arguments)
            refs = tuple(reasoning)
            open_calls[call_id] = kind
        elif "call_id" in item and kind.endswith("_output"):
            call_id = foreign_id(index, item.get("call_id"), "call_id")
            if kind == "function_call_output":
                body = _parts_text(index, item.get("output"), "output")
            else:
                body = f"[{kind}]"
            if call_id in answered:
                raise fail(index, f"call_id {call_id!r} already has an output")
            if call_id not in open_calls and not is_call(head, call_id):
                raise fail(index, f"{kind} for {call_id!r} follows no call with that call_id")
            answered.add(call_id)
            ekind = Kind.TOOL_OUTPUT
            eid = result_id(call_id)
            refs = (call_id,)
            meta["role"] = "tool"
            reasoning = []
        elif "call_id" in item:
            call_id = foreign_id(index, item.get("call_id"), "call_id")
            body = f"[{kind}]"
            ekind = Kind.TOOL_CALL
            eid = call_id
            meta["role"] = "assistant"
            refs = tuple(reasoning)
            open_calls[call_id] = kind
        else:
            body = f"[{kind}]"
            ekind = assistant_kind
            eid = item_id or keys(frozen)
            meta["role"] = "assistant"
            refs = tuple(reasoning)
        if eid in seen:
            raise fail(index, f"id {eid!r} is used twice")
        seen.add(eid)
        meta["msg"] = eid
        meta["after"] = prev
        key = body if kind == "function_call" else None
        e = entry(index, eid, ekind, body, refs, turn, key, meta, frozen)
        if item_id is not None and eid == item_id and head is not None:
            tomb = head.tombs.by_id.get(eid)
            if tomb is not None and tomb.content_hash != e.content_hash:
                # another item under the id of a pruned one: a generated id
                seen.discard(eid)
                eid = keys(frozen)
                seen.add(eid)
                meta["msg"] = eid
                e = entry(index, eid, ekind, body, refs, turn, key, meta, frozen)
        if kind == "reasoning":
            reasoning.append(eid)
        out.append(Read(index, eid, [e]))
        prev = eid
    return out


def to_entries(
    items: Sequence[Mapping[str, Any]],
    *,
    turn: int | None = None,
    user_kind: Kind = Kind.INSTRUCTION,
    assistant_kind: Kind = Kind.REASONING,
    calls: Collection[str] = (),
) -> list[Entry]:
    """Entries for ``items``, in order (one per item); ``calls`` are the
    ``call_id`` s of function calls made earlier. Deterministic ids. Raises
    ``InvalidArgument``/``InvalidType`` naming the first bad item and field."""
    return _ADAPTER.to_entries(items, turn, user_kind, assistant_kind, calls)


def append_messages(
    buf: Buffer,
    items: Sequence[Mapping[str, Any]],
    *,
    readmit: ReadmitPolicy = "record",
    turn: int | None = None,
    actor: str | None = None,
    user_kind: Kind = Kind.INSTRUCTION,
    assistant_kind: Kind = Kind.REASONING,
) -> int:
    """Append ``items`` (all new) to ``buf``; returns the head version. See
    :func:`quiesce.adapters.openai.append_messages` for ``readmit`` and the
    all-or-nothing validation."""
    report = _ADAPTER.admit(buf, items, readmit, turn, actor, user_kind, assistant_kind, sync=False)
    return report.version


def sync_messages(
    buf: Buffer,
    items: Sequence[Mapping[str, Any]],
    *,
    readmit: ReadmitPolicy = "record",
    turn: int | None = None,
    actor: str | None = None,
    user_kind: Kind = Kind.INSTRUCTION,
    assistant_kind: Kind = Kind.REASONING,
) -> SyncReport:
    """Bring ``buf`` up to date with a framework's whole item list (what the
    OpenAI Agents SDK stores). Items are matched by ``id``, ``call_id``, else a
    content key; idempotent; pruned items sent back are reported
    ``tombstoned``, not re-appended. See
    :func:`quiesce.adapters.openai.sync_messages`."""
    return _ADAPTER.admit(buf, items, readmit, turn, actor, user_kind, assistant_kind, sync=True)


async def append_stream(
    buf: Buffer | AsyncBuffer,
    events: object,
    *,
    readmit: ReadmitPolicy = "record",
    turn: int | None = None,
    actor: str | None = None,
    assistant_kind: Kind = Kind.REASONING,
) -> list[Item]:
    """Stream a Responses API response into ``buf`` as it arrives; return its
    output items.

    ``events`` is the SDK's raw stream — an async or sync iterable of its
    stream event objects (``ResponseTextDeltaEvent``…) or their dicts
    (``client.responses.create(..., stream=True)``). A ``message`` item is an
    open entry written per ``output_text``/``refusal`` delta; a
    ``reasoning`` item is an open entry written per summary or reasoning
    delta and never rendered until ``response.output_item.done`` closes it
    with its final form (``encrypted_content`` seals it); a
    ``function_call`` and every other item are appended at their
    ``response.output_item.done``. Returns the response's output items as
    the SDK's ``ResponseStreamState`` completes them, ``None`` fields left
    out — what ``items += ...`` takes.

    The entries are exactly ``append_messages``'s of those items (item ids,
    call ids, kinds, refs to the turn's reasoning, bodies, content, meta):
    ``sync_messages`` of them afterwards appends nothing and ``render``
    equals a whole append's.

    While it runs every snapshot renders a valid input list. Cancellation, an
    exception from the iterator, ``error``/``response.failed``/
    ``response.incomplete`` (:class:`~quiesce.adapters.StreamFailed`) or a
    malformed event (``"event 7: ..."``) aborts every open entry — the text
    stays, marked stale ``stream interrupted: ...``; an aborted reasoning
    item is never rendered — and propagates. Options as
    :func:`append_messages`. Per delta: O(1) amortized plus one ``write``.
    """
    return await _ADAPTER.stream(buf, events, readmit, turn, actor, assistant_kind)


# -- render -------------------------------------------------------------------


def _noted(value: Any, note: str | None, part: str) -> Any:
    value = escape_blocks(value)
    if note is None:
        return value
    if isinstance(value, str):
        return f"{note}\n{value}"
    if isinstance(value, list):
        first: dict[str, Any] = {"type": part, "text": note}
        if part == "output_text":
            first["annotations"] = []
        return [first, *value]
    return value


def _own(e: Entry, note: str | None) -> Item:
    item: Item = plain(e.content)
    kind = e.meta.get("type")
    if kind == "message":
        part = "output_text" if item.get("role") == "assistant" and "id" in item else "input_text"
        item["content"] = _noted(item.get("content"), note, part)
    elif kind == "function_call_output":
        item["output"] = _noted(item.get("output"), note, "input_text")
    return item


def _foreign(e: Entry, note: str | None) -> Item:
    if e.kind is Kind.TOOL_CALL:
        return {
            "type": "function_call",
            "call_id": e.id,
            "name": tool_name(e),
            "arguments": arguments_json(e),
        }
    text = escape_text(e.body)
    text = text if note is None else f"{note}\n{text}"
    if e.kind is Kind.TOOL_OUTPUT:
        return {"type": "function_call_output", "call_id": e.refs[0], "output": text}
    role = e.meta.get("role")
    if role not in ROLES:
        role = "system" if e.kind in (Kind.INSTRUCTION, Kind.CONSTRAINT) else "assistant"
    return {"role": role, "content": text}


def render(
    source: Snapshot | Buffer,
    *,
    annotate_stale: bool = True,
    tombstone_notes: bool = True,
    note_names: int = NOTE_NAMES,
    note_limit: int = NOTE_LIMIT,
) -> list[Item]:
    """Responses API input items for a snapshot's window (a buffer is
    snapshotted for the call), in window order.

    Items this adapter read come back as given; marks become note parts.
    A ``function_call`` whose output is not live is followed by a
    ``function_call_output`` holding the output's tombstone note, or a note
    that none was recorded. A reasoning item whose turn is gone (no live item
    cites it; only unsigned reasoning can be left so) is left out, as the API
    refuses a reasoning item without its following item. Removals are listed
    in one ``system`` message after the leading system/developer messages.
    Entries from elsewhere are rendered from their bodies. O(n + tombstones).
    """
    return _ADAPTER.render(source, annotate_stale, tombstone_notes, note_names, note_limit)


def _render(w: Window) -> list[Item]:
    """The window's items in window order, an output made up for each call
    whose output is not live, removals in a system message at the end."""
    marks, results = w.marks, w.results
    out: list[Item] = []
    cited = {ref for e in w.entries for ref in e.refs}
    for e in w.entries:
        if e.meta.get("type") == "reasoning" and e.id not in cited:
            continue  # its turn was pruned: the API refuses a reasoning item alone
        mark = marks.get(e.id)
        if e.kind is Kind.TOOL_OUTPUT and mark is None and e.refs:
            mark = marks.get(e.refs[0])
        note = None if mark is None or e.sealed else stale_note(mark)
        own = e.meta.get("api") == API and e.content is not None
        out.append(_own(e, note) if own else _foreign(e, note))
        if e.kind is Kind.TOOL_CALL and e.id not in results:
            if own and e.meta.get("type") != "function_call":
                continue  # an opaque call: no output can be made up for it
            output = w.missing(e.id)
            out.append({"type": "function_call_output", "call_id": e.id, "output": output})
    return w.end_with_removals(out)


def _stream(sink: Sink, kind: Kind) -> ResponsesStream:
    """The stream reader ``append_stream`` runs: each item read with this
    module's item reader."""
    return ResponsesStream(sink, kind, _read)


#: This API's adapter: the skeleton bound to the reader, renderer and
#: stream reader above.
_ADAPTER: Adapter[list[Item], list[Item]] = Adapter(API, _read_items, _render, _stream, noun="item")

#: The checked reader (kinds, the noun in errors): what the streams and the
#: integrations read this API's messages with.
_read = _ADAPTER.read


def validate(items: Sequence[Mapping[str, Any]]) -> None:
    """Check what the Responses API checks of an input list: known item
    types and roles, contents of the right type, every ``function_call``
    answered by exactly one later ``function_call_output`` with its
    ``call_id``, no output without its call; every ``reasoning`` item
    (or run of them) directly followed by an output item of its turn (an
    assistant message, a call — not an input message or a tool output, and
    never last). Raises
    ``InvalidArgument``/``InvalidType`` naming the first bad item and field."""
    msgs = check_messages(items)
    open_calls: dict[str, int] = {}
    answered: set[str] = set()
    reasoning: int | None = None  # a reasoning item still waiting for its item
    for index, item in enumerate(msgs):
        kind = _item_type(index, item)
        if reasoning is not None:
            _check_follows_reasoning(reasoning, msgs[reasoning], index, kind, item)
            if kind != "reasoning":
                reasoning = None
        if kind == "reasoning" and reasoning is None:
            reasoning = index
        if kind == "message":
            role = item.get("role")
            if not isinstance(role, str) or role not in ROLES:
                raise fail(index, f"role must be one of {sorted(ROLES)}, not {role!r}")
            _parts_text(index, item.get("content"), "content")
        elif kind == "reasoning":
            _reasoning_text(index, item)
        elif kind == "function_call":
            call_id = check_nonempty(index, item.get("call_id"), "call_id")
            if call_id in open_calls:
                raise fail(index, f"call_id {call_id!r} is used twice")
            check_nonempty(index, item.get("name"), "name")
            check_str(index, item.get("arguments"), "arguments")
            open_calls[call_id] = index
        elif kind == "function_call_output":
            call_id = check_nonempty(index, item.get("call_id"), "call_id")
            if call_id not in open_calls:
                raise fail(index, f"function_call_output for {call_id!r} follows no call")
            if call_id in answered:
                raise fail(index, f"call_id {call_id!r} already has an output")
            answered.add(call_id)
            _parts_text(index, item.get("output"), "output")
    if reasoning is not None:
        raise fail(reasoning, _reasoning_alone(msgs[reasoning], "nothing follows it"))
    for call_id, index in open_calls.items():
        if call_id not in answered:
            raise fail(index, f"function_call {call_id!r} has no function_call_output")


def _reasoning_alone(item: Mapping[str, Any], why: str) -> str:
    name = item.get("id")
    shown = repr(name) if isinstance(name, str) else "item"
    return f"reasoning {shown} must be followed by the item of its turn it precedes: {why}"


def _check_follows_reasoning(
    at: int, reasoning: Mapping[str, Any], index: int, kind: str, item: Mapping[str, Any]
) -> None:
    """A reasoning item is the model's reasoning *before* an output item of
    the same response: the API refuses one that is not followed directly by
    such an item (a user, system or developer message, or a tool output).
    Several reasoning items in a row are one response's steps: the run must
    end on such an item."""
    if kind == "reasoning":
        return
    if kind == "message" and item.get("role") != "assistant":
        raise fail(at, _reasoning_alone(reasoning, f"item {index} is a {item.get('role')} message"))
    if kind.endswith("_output"):
        raise fail(at, _reasoning_alone(reasoning, f"item {index} is a {kind}"))
