"""Anthropic Messages ⇄ entries (plain dicts; no SDK needed).

What it keeps true: ``render(buf) == {"system": system, "messages": messages}``
(``"system"`` left out when there is none) after ``append_messages(buf,
messages, system=system)`` — exactly — when nothing was pruned or marked
(except text lines that imitate a quiesce note, which get a backslash). Every
rendered window is a valid request: every ``tool_use`` is answered by a
``tool_result`` at the start of the very next user turn, and consecutive turns
of one role that pruning left next to each other are merged, as the API
would, with every ``tool_result`` first.

Blocks read and given back unchanged (each block's JSON is kept in
``Entry.content``, ``cache_control`` and every other field included):

* ``text``, ``image``, ``document``, ``search_result`` and any future block
  with a ``type`` string (kept opaque, never dropped);
* ``thinking`` (with ``signature``) and ``redacted_thinking``: *signed*
  (:attr:`~quiesce.Entry.sealed`) — never rewritten, summarized or annotated;
  every other block of the assistant turn cites them, so they are removed only
  with their turn, and never while the turn's tool calls await results;
* ``tool_use`` → a ``TOOL_CALL`` with the block's id and a ``key`` of its name
  and input (a re-run after a prune is a re-admission); ``tool_result``
  (content a str or a list of text/image/document blocks, ``is_error``) → a
  ``TOOL_OUTPUT`` ``"<tool_use_id>#result"`` citing its call;
* ``server_tool_use`` and its result in the same assistant turn
  (``web_search_tool_result`` or any ``*_tool_result`` with a
  ``tool_use_id``): a call/result pair, rendered in place;
* the system prompt, a str or a list of text blocks: ``INSTRUCTION`` entries.

Kinds: user text and media → ``user_kind`` (``INSTRUCTION``); assistant text
and thinking → ``assistant_kind`` (``REASONING``). Ids: block and tool-use ids
are kept verbatim (no ``#``); other blocks get ``"<message key>#<n>"`` (see
:mod:`quiesce.adapters._common`).

Notes (one line each, starting ``[quiesce:``, fields escaped):
``[quiesce: stale at turn 3: <reason>]`` in front of a stale text block's
text, or as a text block before a stale image, document or tool use (signed
blocks carry none); ``[quiesce: <id> pruned at turn 41 by <actor>: <reason>]``
for each removal, listed under ``[quiesce: removed from this context]`` at the
end of the system prompt, or as the content of a pruned tool result;
``[quiesce: no result recorded for <id>]`` for a call in flight. User,
assistant and tool text starting a line with ``[quiesce`` is rendered as
``\\[quiesce``.

Malformed input raises :class:`~quiesce.InvalidArgument` or
:class:`~quiesce.InvalidType` naming the message index (``-1`` for the system
prompt) and field; nothing is appended and the head version is unchanged.

Of the adapter skeleton (:mod:`quiesce.adapters._skeleton`) Anthropic gives
its reader (the system prompt and each message's blocks into entries,
:func:`_read_messages`), its renderer
(:mod:`quiesce.adapters._render_anthropic`) and the Messages API's rules
(:func:`validate`); the skeleton reads, admits, syncs and renders with them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from .._core.buffer import Buffer, Snapshot
from .._core.entry import SEALED_TYPES, Entry, Kind, canonical_json, result_id
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
from ._keys import Keys
from ._notes import NOTE_LIMIT, NOTE_NAMES
from ._render_anthropic import API, Message, render_window
from ._render_anthropic import SYSTEM_ROLES as SYSTEM_ROLES
from ._render_anthropic import Block as Block
from ._sdk import to_plain
from ._skeleton import Adapter
from ._stream import Sink
from ._stream_anthropic import AnthropicStream

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

#: The message roles this adapter reads (the system prompt is separate; the
#: roles rendered into it are :data:`SYSTEM_ROLES`).
ROLES = frozenset({"user", "assistant"})

#: Index used in errors about the system prompt.
SYSTEM = -1


def _is_server_result(block: Mapping[str, Any]) -> bool:
    kind = block.get("type")
    return (
        isinstance(kind, str)
        and kind != "tool_result"
        and kind.endswith("_tool_result")
        and "tool_use_id" in block
    )


def _result_text(index: int, content: object, what: str) -> str:
    """A tool result's content as text (text blocks joined; others ``[type]``)."""
    if content is None:
        return ""
    return parts_text(index, content, what, noun="blocks", fields={"text": "text"})


def _block_text(index: int, block: Mapping[str, Any], kind: str, what: str) -> str:
    if kind == "text":
        return check_str(index, block.get("text"), f"{what}.text")
    if kind == "thinking":
        check_str(index, block.get("signature"), f"{what}.signature")
        return check_str(index, block.get("thinking"), f"{what}.thinking")
    if kind == "redacted_thinking":
        check_str(index, block.get("data"), f"{what}.data")
        return "[redacted_thinking]"
    for name in ("title", "text", "content"):
        value = block.get(name)
        if isinstance(value, str):
            return f"[{kind}] {value}"
    return f"[{kind}]"


def _system(system: object, *, keys: Keys, turn: int | None) -> list[Read]:
    if system is None:
        return []
    if not isinstance(system, str | list | tuple):
        raise fail(
            SYSTEM,
            f"system must be a str or a list of text blocks, not {type(system).__name__}",
            type_error=True,
        )
    frozen = json_value(SYSTEM, system, "system")
    key = keys({"system": frozen})
    meta: dict[str, Any] = {"api": API, "role": "system", "msg": key, "after": None}
    r = Read(SYSTEM, key)
    if isinstance(system, str):
        meta["form"] = "str"
        r.entries.append(entry(SYSTEM, key, Kind.INSTRUCTION, system, (), turn, None, meta))
        return [r]
    meta["form"] = "blocks"
    for n, block in enumerate(system):
        if not isinstance(block, Mapping) or block.get("type") != "text":
            raise fail(SYSTEM, f"system[{n}] must be a text block")
        text = check_str(SYSTEM, block.get("text"), f"system[{n}].text")
        r.entries.append(
            entry(SYSTEM, f"{key}#{n}", Kind.INSTRUCTION, text, (), turn, None, meta, block)
        )
    return [r]


def _anchor(index: int, role: str, content: Sequence[Any]) -> str | None:
    """The key of a message that carries foreign ids: its first tool use's id
    (assistant) or the result id of its first tool result (user)."""
    for n, block in enumerate(content):
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if role == "assistant" and kind in ("tool_use", "server_tool_use"):
            return foreign_id(index, block.get("id"), f"content[{n}].id")
        if role == "user" and kind == "tool_result":
            return result_id(
                foreign_id(index, block.get("tool_use_id"), f"content[{n}].tool_use_id")
            )
    return None


def _read_messages(
    messages: object,
    *,
    system: object,
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
    """The system prompt's :class:`Read` (when ``first``), then one per
    message; the kinds are checked by :meth:`Adapter.read`."""
    out = _system(to_plain(system), keys=keys, turn=turn) if first else []
    open_calls: set[str] = set(calls)
    answered: set[str] = set()
    used: set[str] = set()
    for index, m in enumerate(check_messages(messages, start=start), start):
        role = m.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise fail(index, f"role must be 'user' or 'assistant', not {role!r}")
        frozen = json_value(index, m, "message")
        content = m.get("content")
        text_kind = user_kind if role == "user" else assistant_kind
        env = {k: v for k, v in m.items() if k not in ("role", "content")}
        if isinstance(content, str):
            key = keys(frozen)
            meta: dict[str, Any] = {"api": API, "role": role, "msg": key, "after": prev}
            meta["form"] = "str"
            if env:
                meta["env"] = env
            r = Read(index, key)
            r.entries.append(entry(index, key, text_kind, content, (), turn, None, meta))
            out.append(r)
            prev = key
            continue
        if not isinstance(content, list | tuple):
            raise fail(
                index,
                f"content must be a str or a list of blocks, not {type(content).__name__}",
                type_error=True,
            )
        if not content:
            raise fail(index, "content must not be an empty list")
        key = _anchor(index, role, content) or keys(frozen)
        base: dict[str, Any] = {"api": API, "role": role, "msg": key, "after": prev}
        base["form"] = "blocks"
        if env:
            base["env"] = env
        r = Read(index, key)
        signed: list[str] = []
        for n, block in enumerate(content):
            what = f"content[{n}]"
            if not isinstance(block, Mapping):
                raise fail(
                    index, f"{what} must be a dict, not {type(block).__name__}", type_error=True
                )
            kind = check_nonempty(index, block.get("type"), f"{what}.type")
            meta = {**base, "block": kind}
            refs: tuple[str, ...] = tuple(signed)
            call_key: str | None = None
            if kind in ("tool_use", "server_tool_use"):
                if role != "assistant":
                    raise fail(index, f"{what}: a {kind} block belongs in an assistant message")
                eid = foreign_id(index, block.get("id"), f"{what}.id")
                name = check_nonempty(index, block.get("name"), f"{what}.name")
                tool_input = block.get("input")
                if not isinstance(tool_input, Mapping):
                    raise fail(index, f"{what}.input must be a dict", type_error=True)
                arguments = canonical_json(json_value(index, tool_input, f"{what}.input"))
                if eid in open_calls or eid in used:
                    raise fail(index, f"{what}.id {eid!r} is used twice")
                body = call_key = f"{name} {arguments}"
                ekind = Kind.TOOL_CALL
                meta.update(tool=name, arguments=arguments)
                open_calls.add(eid)
            elif kind == "tool_result" or _is_server_result(block):
                if kind == "tool_result" and role != "user":
                    raise fail(index, f"{what}: a tool_result block belongs in a user message")
                if kind != "tool_result" and role != "assistant":
                    raise fail(index, f"{what}: a {kind} block belongs in an assistant message")
                call_id = foreign_id(index, block.get("tool_use_id"), f"{what}.tool_use_id")
                if call_id in answered:
                    raise fail(index, f"{what}: tool use {call_id!r} already has a result")
                if call_id not in open_calls and not is_call(head, call_id):
                    raise fail(index, f"{what}.tool_use_id {call_id!r} answers no earlier tool_use")
                answered.add(call_id)
                is_error = block.get("is_error")
                if is_error is not None and not isinstance(is_error, bool):
                    raise fail(index, f"{what}.is_error must be a bool", type_error=True)
                if kind == "tool_result":
                    body = _result_text(index, block.get("content"), f"{what}.content")
                else:
                    body = f"[{kind}]"
                eid = result_id(call_id)
                ekind = Kind.TOOL_OUTPUT
                refs = (call_id,)
            else:
                body = _block_text(index, block, kind, what)
                eid = f"{key}#{n}"
                ekind = text_kind
            if eid in used:
                raise fail(index, f"{what}: id {eid!r} is used twice")
            used.add(eid)
            e = entry(index, eid, ekind, body, refs, turn, call_key, meta, block)
            if e.sealed and role == "assistant":
                signed.append(eid)
            r.entries.append(e)
        out.append(r)
        prev = key
    return out


def to_entries(
    messages: Sequence[Mapping[str, Any]],
    *,
    system: str | Sequence[Mapping[str, Any]] | None = None,
    turn: int | None = None,
    user_kind: Kind = Kind.INSTRUCTION,
    assistant_kind: Kind = Kind.REASONING,
    calls: Collection[str] = (),
) -> list[Entry]:
    """Entries for ``system`` and ``messages``, in order; ``calls`` are ids
    of tool uses made earlier. Deterministic ids. Raises
    ``InvalidArgument``/``InvalidType`` naming the first bad message and field."""
    return _ADAPTER.to_entries(messages, turn, user_kind, assistant_kind, calls, system)


def append_messages(
    buf: Buffer,
    messages: Sequence[Mapping[str, Any]],
    *,
    system: str | Sequence[Mapping[str, Any]] | None = None,
    readmit: ReadmitPolicy = "record",
    turn: int | None = None,
    actor: str | None = None,
    user_kind: Kind = Kind.INSTRUCTION,
    assistant_kind: Kind = Kind.REASONING,
) -> int:
    """Append ``system`` and ``messages`` (all new) to ``buf``; returns the
    head version. See :func:`quiesce.adapters.openai.append_messages` for
    ``readmit`` and the all-or-nothing validation."""
    report = _ADAPTER.admit(
        buf, messages, readmit, turn, actor, user_kind, assistant_kind, system, sync=False
    )
    return report.version


def sync_messages(
    buf: Buffer,
    messages: Sequence[Mapping[str, Any]],
    *,
    system: str | Sequence[Mapping[str, Any]] | None = None,
    readmit: ReadmitPolicy = "record",
    turn: int | None = None,
    actor: str | None = None,
    user_kind: Kind = Kind.INSTRUCTION,
    assistant_kind: Kind = Kind.REASONING,
) -> SyncReport:
    """Bring ``buf`` up to date with a framework's whole history (and system
    prompt, reported at index ``-1``). Messages are matched by tool-use ids,
    else a content key; idempotent; pruned messages sent back are reported
    ``tombstoned``, not re-appended. See
    :func:`quiesce.adapters.openai.sync_messages`."""
    return _ADAPTER.admit(
        buf, messages, readmit, turn, actor, user_kind, assistant_kind, system, sync=True
    )


async def append_stream(
    buf: Buffer | AsyncBuffer,
    events: object,
    *,
    readmit: ReadmitPolicy = "record",
    turn: int | None = None,
    actor: str | None = None,
    assistant_kind: Kind = Kind.REASONING,
) -> Message:
    """Stream an Anthropic Messages response into ``buf`` as it arrives;
    return the final message.

    ``events`` is the SDK's raw stream — an async or sync iterable of
    ``RawMessageStreamEvent`` objects or their dicts (``client.messages.
    create(..., stream=True)``). Each text block is an open entry written
    per ``text_delta`` and closed at its stop; a thinking block is an open
    entry that is never rendered until its ``signature_delta`` seals it; a
    ``tool_use`` is appended when its input JSON is complete (its
    ``content_block_stop``); other blocks are appended whole. Returns
    ``{"role": "assistant", "content": [blocks]}`` as the SDK's
    ``accumulate_event`` builds it, ``None`` fields left out — what
    ``messages.append`` takes.

    The entries are ``append_messages``'s of that message (kinds, refs to
    the signed blocks, bodies, content, meta; tool-use ids verbatim), except
    that the message key the other blocks' ids are made of is a stream key
    ``#stream.<message id>.<n>`` instead of a content key: ``render`` equals
    a whole append's, and ``sync_messages`` of a history ending with the
    returned message recognises it (also after a restart, from the log).

    While it runs every snapshot renders a valid request: no partial tool
    use, no unsigned thinking. Cancellation, an exception from the iterator,
    an ``error`` event (:class:`~quiesce.adapters.StreamFailed`) or a
    malformed event (``"event 7: ..."``: an index with no open block, a
    delta of the wrong kind, an unknown type) aborts every open entry — the
    text stays, marked stale ``stream interrupted: ...``; an aborted
    thinking block is never rendered — and propagates. Options as
    :func:`append_messages`. Per text delta: O(1) amortized plus one
    ``write``.
    """
    return await _ADAPTER.stream(buf, events, readmit, turn, actor, assistant_kind)


# -- render (the renderer is in _render_anthropic) ---------------------------


def render(
    source: Snapshot | Buffer,
    *,
    annotate_stale: bool = True,
    tombstone_notes: bool = True,
    note_names: int = NOTE_NAMES,
    note_limit: int = NOTE_LIMIT,
) -> dict[str, Any]:
    """``{"system": ..., "messages": [...]}`` for a snapshot's window (a
    buffer is snapshotted for the call); pass it as keyword arguments to the
    Messages API. ``"system"`` is left out when empty.

    Blocks this adapter read come back as given; marks become notes. Each
    assistant turn with ``tool_use`` blocks is followed by a user turn that
    starts with one ``tool_result`` per call: the live result (in window
    order), else its tombstone note, else a note that none was recorded.
    Turns of one role left next to each other by pruning are merged,
    ``tool_result`` blocks first. Removals are listed at the end of the system
    prompt. Entries from elsewhere are rendered from their bodies.
    O(n + tombstones).
    """
    return _ADAPTER.render(source, annotate_stale, tombstone_notes, note_names, note_limit)


def _stream(sink: Sink, kind: Kind) -> AnthropicStream:
    """The stream reader ``append_stream`` runs: whole blocks read with this
    module's block readers."""
    return AnthropicStream(sink, kind, _block_text, _is_server_result)


#: This API's adapter: the skeleton bound to the reader above, the renderer
#: and the stream reader.
_ADAPTER: Adapter[dict[str, Any], Message] = Adapter(
    API, _read_messages, render_window, _stream, system=True
)

#: The checked reader (kinds, the noun in errors): what the streams and the
#: integrations read this API's messages with.
_read = _ADAPTER.read


def _check_thinking(index: int, what: str, kind: str, role: str, answered: bool) -> None:
    """Where the Messages API takes a ``thinking``/``redacted_thinking``
    block: in an assistant message, never after a ``tool_use`` of it (the
    turn stops at its tool uses to wait for their results; thinking between
    server tool blocks and text is the model's own interleaving)."""
    if role != "assistant":
        raise fail(index, f"{what}: a {kind} block belongs in an assistant message")
    if answered:
        raise fail(index, f"{what}: a {kind} block must come before the tool uses of its message")


def validate(messages: Sequence[Mapping[str, Any]], *, system: object = None) -> None:
    """Check what the Messages API checks: roles ``user``/``assistant``, str
    or block contents, every ``tool_use`` answered by a ``tool_result`` (in
    any order) at the start of the very next message, a user message, and no
    other ``tool_result``; ``thinking``/``redacted_thinking`` blocks only in
    an assistant message, before its tool uses; a ``server_tool_use`` answered by its result later
    in the same assistant turn (only the last turn may leave one open, as a
    ``pause_turn`` continuation), and no server result without its use. Raises
    ``InvalidArgument``/``InvalidType`` naming the first bad message and field."""
    if system is not None and not isinstance(system, str | list):
        raise fail(
            SYSTEM, f"system must be a str or a list, not {type(system).__name__}", type_error=True
        )
    msgs = check_messages(messages)
    pending: list[str] = []
    for index, m in enumerate(msgs):
        role = m.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise fail(index, f"role must be 'user' or 'assistant', not {role!r}")
        content = m.get("content")
        if isinstance(content, str):
            blocks: Sequence[Any] = [{"type": "text", "text": content}]
        elif isinstance(content, list | tuple) and content:
            blocks = content
        else:
            raise fail(index, "content must be a str or a non-empty list", type_error=True)
        want = pending
        pending = []
        server: list[str] = []
        results_done = False
        answered = False  # a tool_use came: the turn waits there, no thinking follows
        for n, block in enumerate(blocks):
            what = f"content[{n}]"
            if not isinstance(block, Mapping):
                raise fail(index, f"{what} must be a dict", type_error=True)
            kind = check_nonempty(index, block.get("type"), f"{what}.type")
            if kind in SEALED_TYPES:
                _check_thinking(index, what, kind, role, answered)
            elif kind == "tool_use":
                answered = True
            if kind == "tool_result":
                if role != "user" or results_done:
                    raise fail(index, f"{what}: tool_result blocks must come first in a user turn")
                call_id = block.get("tool_use_id")
                if call_id not in want:
                    raise fail(
                        index, f"{what}: tool_result for {call_id!r} answers no tool_use before it"
                    )
                want = [w for w in want if w != call_id]
                _result_text(index, block.get("content"), f"{what}.content")
                continue
            results_done = True
            if want:
                raise fail(index, f"tool_use {want[0]!r} has no tool_result right after it")
            if kind in ("tool_use", "server_tool_use"):
                if role != "assistant":
                    raise fail(index, f"{what}: a {kind} block belongs in an assistant message")
                call_id = check_nonempty(index, block.get("id"), f"{what}.id")
                (pending if kind == "tool_use" else server).append(call_id)
            elif _is_server_result(block):
                if role != "assistant":
                    raise fail(index, f"{what}: a {kind} block belongs in an assistant message")
                call_id = block.get("tool_use_id")
                if call_id not in server:
                    raise fail(
                        index,
                        f"{what}: {kind} for {call_id!r} answers no server_tool_use "
                        "before it in this message",
                    )
                server.remove(call_id)
            else:
                _block_text(index, block, kind, what)
        if want:
            raise fail(index, f"tool_use {want[0]!r} has no tool_result right after it")
        if server and index != len(msgs) - 1:
            # Only the last turn may end on an unanswered server tool use
            # (``stop_reason: pause_turn``: the request continues that turn).
            raise fail(index, f"server_tool_use {server[0]!r} has no result in its turn")
    if pending:
        raise fail(len(msgs), f"tool_use {pending[0]!r} has no tool_result")
