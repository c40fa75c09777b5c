"""OpenAI Chat Completions messages ⇄ entries (plain dicts; no SDK needed).

What it keeps true: ``render(buf) == messages`` after
``append_messages(buf, messages)`` — exactly, key for key — when nothing was
pruned or marked (the one exception: a text line that imitates a quiesce note
gets a backslash, see below). Every window it renders is a valid request:
each tool call answered right after its assistant message.

Shapes read and given back unchanged (each entry keeps its message's JSON in
``Entry.content``):

* ``system`` / ``developer`` / ``user`` / ``assistant`` messages whose
  ``content`` is a str, a list of content parts (``text``, ``image_url``,
  ``input_audio``, ``file``, ``refusal``, and any future part with a ``type``
  string, kept opaque), or ``None`` (an assistant refusal or tool-call turn);
* every other field a message carries — ``name``, ``refusal``,
  ``reasoning_content``, ``annotations``, ``audio``, ``function_call: None``,
  whatever an SDK's ``model_dump()`` adds — kept verbatim;
* ``tool_calls`` (``function`` and ``custom`` calls, each kept verbatim) and
  ``tool`` messages whose content is a str or a list of text parts.

Entries: ``system``/``developer`` → ``INSTRUCTION``; ``user`` → ``user_kind``
(``INSTRUCTION``); ``assistant`` text → ``assistant_kind`` (``REASONING``);
each tool call → a ``TOOL_CALL`` with the call's id and a ``key`` of its name
and arguments (running it again after a prune is a re-admission); each
``tool`` message → a ``TOOL_OUTPUT`` ``"<call id>#result"`` citing its call,
so the pair is pruned together or not at all. Ids are described in
:mod:`quiesce.adapters._common`: foreign ids are kept verbatim and may not
contain ``#``; generated ids all contain it.

Notes (one line each, always starting ``[quiesce:``):
``[quiesce: stale at turn 3: <reason>]`` in front of a stale message's text
(as a first ``text`` part when the content is a list);
``[quiesce: <id> pruned at turn 41 by <actor>: <reason>]`` for each removal,
listed under ``[quiesce: removed from this context]`` in one system message
after the leading system/developer messages, or in place of a pruned tool
result; ``[quiesce: no result recorded for <call id>]`` for a call in flight.
Reasons, actors and ids are escaped inside notes (no raw newlines or
brackets); a line of user, assistant or tool text that starts with
``[quiesce`` is rendered as ``\\[quiesce`` so no text can pass for a note.

Malformed input raises :class:`~quiesce.InvalidArgument` or
:class:`~quiesce.InvalidType` naming the message index and field; nothing is
appended and the head version is unchanged.

Built on the one adapter skeleton (:mod:`quiesce.adapters._skeleton`): this
module is only the Chat Completions part of it — :func:`_read_messages` (a
message into entries), :func:`_render` (a window into messages, each call's
results right after it) and :func:`validate` — and its public functions hand
the rest to the skeleton.
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
from ._keys import Keys
from ._notes import NOTE_LIMIT, NOTE_NAMES, annotated, escape_blocks, escape_text
from ._skeleton import Adapter
from ._stream import Sink
from ._stream_chat import ChatStream
from ._window import Window, arguments_json, groups, plain, tool_name

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

API = "openai"

#: The roles this adapter reads.
ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})

Message = dict[str, Any]


def _parts_text(index: int, content: object, what: str, *, text_only: bool = False) -> str:
    """The text of a message's content (str, list of parts, or None): the
    text parts joined by newlines, other parts as ``[type]``."""
    if content is None:
        return ""
    fields = {"text": "text"} if text_only else {"text": "text", "refusal": "refusal"}
    return parts_text(
        index, content, what, noun="content parts", fields=fields, only_text=text_only
    )


def _body(index: int, m: Mapping[str, Any]) -> str:
    """What the policy classifies: content text, refusal, reasoning."""
    parts = [_parts_text(index, m.get("content"), "content")]
    for extra in ("refusal", "reasoning_content"):
        value = m.get(extra)
        if value is not None:
            parts.append(check_str(index, value, extra))
    return "\n".join(p for p in parts if p)


def _call(index: int, n: int, raw: object, seen: set[str]) -> tuple[str, str, str]:
    what = f"tool_calls[{n}]"
    if not isinstance(raw, Mapping):
        raise fail(index, f"{what} must be a dict, not {type(raw).__name__}", type_error=True)
    call_id = foreign_id(index, raw.get("id"), f"{what}.id")
    if call_id in seen:
        raise fail(index, f"tool call id {call_id!r} is used twice")
    seen.add(call_id)
    kind = raw.get("type", "function")
    if kind not in ("function", "custom"):
        raise fail(index, f"{what}.type must be 'function' or 'custom', not {kind!r}")
    fn = raw.get(kind)
    if not isinstance(fn, Mapping):
        raise fail(index, f"{what}.{kind} must be a dict", type_error=True)
    name = check_nonempty(index, fn.get("name"), f"{what}.{kind}.name")
    field = "arguments" if kind == "function" else "input"
    arguments = check_str(index, fn.get(field), f"{what}.{kind}.{field}")
    return call_id, name, arguments


def _read_messages(
    messages: object,
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
    """One :class:`Read` per message (see the module docstring for the
    entries); the kinds are checked by :meth:`Adapter.read`."""
    out: list[Read] = []
    open_calls: set[str] = set(calls)
    answered: set[str] = set()
    seen_calls: set[str] = set()
    for index, m in enumerate(check_messages(messages, start=start), start):
        role = m.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise fail(index, f"role must be one of {sorted(ROLES)}, not {role!r}")
        frozen = json_value(index, m, "message")
        content = m.get("content")
        tool_calls = m.get("tool_calls")
        if role == "tool":
            call_id = foreign_id(index, m.get("tool_call_id"), "tool_call_id")
            text = _parts_text(index, content, "content", text_only=True)
            if content is None:
                raise fail(index, "content must be a str or a list of text parts", type_error=True)
            if call_id in answered:
                raise fail(index, f"tool call {call_id!r} already has a result")
            if call_id not in open_calls and not is_call(head, call_id):
                raise fail(index, f"tool_call_id {call_id!r} answers no earlier tool call")
            answered.add(call_id)
            key = result_id(call_id)
            meta: dict[str, Any] = {"api": API, "role": role, "msg": key, "after": prev}
            r = Read(index, key)
            r.entries.append(
                entry(index, key, Kind.TOOL_OUTPUT, text, (call_id,), turn, None, meta, frozen)
            )
        elif tool_calls is not None:
            if role != "assistant":
                raise fail(index, f"tool_calls: only assistant messages carry them, not {role!r}")
            if not isinstance(tool_calls, list | tuple) or not tool_calls:
                raise fail(index, "tool_calls must be a non-empty list", type_error=True)
            body = _body(index, m)
            parsed = [_call(index, n, c, seen_calls) for n, c in enumerate(tool_calls)]
            key = parsed[0][0]
            r = Read(index, key)
            env = {k: v for k, v in m.items() if k != "tool_calls"}
            meta = {"api": API, "role": role, "msg": key, "after": prev}
            if body or content not in (None, ""):
                r.entries.append(
                    entry(index, f"{key}#msg", assistant_kind, body, (), turn, None, meta, env)
                )
            for (call_id, name, arguments), raw in zip(parsed, tool_calls, strict=True):
                call_meta = {**meta, "tool": name, "arguments": arguments, "env": env}
                call_key = f"{name} {arguments}"
                r.entries.append(
                    entry(
                        index,
                        call_id,
                        Kind.TOOL_CALL,
                        call_key,
                        (),
                        turn,
                        call_key,
                        call_meta,
                        raw,
                    )
                )
                open_calls.add(call_id)
        else:
            if content is None and role != "assistant":
                raise fail(index, "content must be a str or a list of parts", type_error=True)
            body = _body(index, m)
            if role in ("system", "developer"):
                kind = Kind.INSTRUCTION
            else:
                kind = user_kind if role == "user" else assistant_kind
            key = keys(frozen)
            meta = {"api": API, "role": role, "msg": key, "after": prev}
            speaker = m.get("name")
            if speaker is not None:
                meta["name"] = check_nonempty(index, speaker, "name")
            r = Read(index, key)
            r.entries.append(entry(index, key, kind, body, (), turn, None, meta, frozen))
        out.append(r)
        prev = r.key
    return out


def to_entries(
    messages: Sequence[Mapping[str, Any]],
    *,
    turn: int | None = None,
    user_kind: Kind = Kind.INSTRUCTION,
    assistant_kind: Kind = Kind.REASONING,
    calls: Collection[str] = (),
) -> list[Entry]:
    """Entries for ``messages``, in order; ``calls`` are ids of tool calls
    made earlier (results in ``messages`` may answer them). Ids are
    deterministic: the same list always gives the same entries. Raises
    ``InvalidArgument``/``InvalidType`` naming the first bad message and field.
    O(total size)."""
    return _ADAPTER.to_entries(messages, turn, user_kind, assistant_kind, calls)


def append_messages(
    buf: Buffer,
    messages: Sequence[Mapping[str, Any]],
    *,
    readmit: ReadmitPolicy = "record",
    turn: int | None = None,
    actor: str | None = None,
    user_kind: Kind = Kind.INSTRUCTION,
    assistant_kind: Kind = Kind.REASONING,
) -> int:
    """Append ``messages`` (all new) to ``buf``; returns the head version.

    Everything is validated first (shape, results answering earlier calls,
    unused ids, each re-admission decided by ``readmit``), so an error names
    its message index and field and leaves the buffer unchanged.

    ``readmit`` says what to do with content (or a tool call's name and
    arguments) that matches a tombstone — a model re-running a pruned call:
    ``"record"`` (default) appends it with an automatic, logged ``Override``
    naming this adapter — or ``actor``, the full name of the code calling it
    (an integration passes its module's) — and escalates ``OSCILLATION`` on the second
    prune/re-admit cycle within the window; ``"refuse"`` raises
    :class:`~quiesce.ReadmissionRefused`; a callable is given a
    :class:`~quiesce.adapters.Readmission` and returns one of those words or
    an ``Override``. O(n) to index the head, plus O(size of messages).
    """
    report = _ADAPTER.admit(
        buf, messages, readmit, turn, actor, user_kind, assistant_kind, sync=False
    )
    return report.version


def sync_messages(
    buf: Buffer,
    messages: Sequence[Mapping[str, Any]],
    *,
    readmit: ReadmitPolicy = "record",
    turn: int | None = None,
    actor: str | None = None,
    user_kind: Kind = Kind.INSTRUCTION,
    assistant_kind: Kind = Kind.REASONING,
) -> SyncReport:
    """Bring ``buf`` up to date with a framework's whole history ``messages``.

    Idempotent: messages are matched by tool-call ids, else by a fingerprint
    of their content and how many identical messages come before them. Those
    the buffer holds are reported ``held``; those it pruned on purpose are
    reported ``tombstoned`` and *not* re-appended; the rest are appended as
    :func:`append_messages` would (``readmit`` decides re-runs of pruned
    content). Calling it twice with the same list changes nothing the second
    time. Validation comes first: an error names the message index and field
    and leaves the buffer unchanged. Returns a frozen
    :class:`~quiesce.adapters.SyncReport`.
    """
    return _ADAPTER.admit(buf, messages, readmit, turn, actor, user_kind, assistant_kind, sync=True)


async def append_stream(
    buf: Buffer | AsyncBuffer,
    chunks: object,
    *,
    readmit: ReadmitPolicy = "record",
    turn: int | None = None,
    actor: str | None = None,
    assistant_kind: Kind = Kind.REASONING,
) -> Message:
    """Stream a Chat Completions response into ``buf`` as it arrives; return
    the final message.

    ``chunks`` is the SDK's raw stream — an async or sync iterable of
    ``ChatCompletionChunk`` objects or their dicts (``client.chat.completions.
    create(..., stream=True)``). Text, refusal and ``reasoning_content``
    deltas are written into one open entry (``buf.open_stream``: readers see
    the text grow, a whole prefix per snapshot); each tool call is appended
    when its arguments are complete (a delta for the next call, or the end),
    never before; the entry is closed with the message at the end. Returns
    what the SDK's ``ChatCompletionStreamState().get_final_completion().
    choices[0].message`` dumps to with its ``None`` fields left out (a tool
    call's ``index`` included), which ``messages.append`` can take as is.

    The entries are ``append_messages``'s of that message (kinds, refs,
    bodies, content, meta; tool-call ids verbatim), except that the text
    entry's id and message key are a stream key ``#stream.<chunk id>.<n>``
    (the content key ``append_messages`` uses is not known until the end):
    ``render`` equals a whole append's, and ``sync_messages`` of a history
    ending with the returned message recognises it (nothing appended), in
    this process and in a later one that reopens the buffer's log.

    While it runs every snapshot renders a valid request. Cancellation, an
    exception from the iterator or a malformed chunk (``InvalidArgument``/
    ``InvalidType`` naming it: ``"event 7: ..."``; a second choice, a delta
    for a complete call, a non-str text) aborts the open entry — it stays
    with the text that arrived, marked stale ``stream interrupted: ...`` —
    appends no incomplete call, and propagates. ``readmit``, ``turn``,
    ``actor`` and ``assistant_kind`` are ``append_messages``'s. ``buf``: a
    :class:`~quiesce.Buffer` or an :class:`~quiesce.AsyncBuffer` with
    ``open_stream``. Per chunk: O(1) amortized plus one ``write``; a
    checkpoint at the start and the end (a sync iterable is read without
    yielding in between).
    """
    return await _ADAPTER.stream(buf, chunks, readmit, turn, actor, assistant_kind)


# -- render -------------------------------------------------------------------


def _content(value: Any, note: str | None) -> Any:
    """A message's content with a stale note in front (a line, or a first
    text part) and its text escaped."""
    value = escape_blocks(value)
    if note is None:
        return value
    if isinstance(value, str):
        return f"{note}\n{value}"
    if isinstance(value, list):
        return [{"type": "text", "text": note}, *value]
    return note


def _message(e: Entry, note: str | None) -> Message:
    m: Message = plain(e.content)
    if "content" in m or note is not None:
        m["content"] = _content(m.get("content"), note)
    return m


def _tool_call(e: Entry) -> dict[str, Any]:
    if e.meta.get("api") == API and e.content is not None:
        return plain(e.content)  # type: ignore[no-any-return]
    return {
        "id": e.id,
        "type": "function",
        "function": {"name": tool_name(e), "arguments": arguments_json(e)},
    }


def render(
    source: Snapshot | Buffer,
    *,
    annotate_stale: bool = True,
    tombstone_notes: bool = True,
    note_names: int = NOTE_NAMES,
    note_limit: int = NOTE_LIMIT,
) -> list[Message]:
    """Chat Completions messages for a snapshot's window (a buffer is
    snapshotted for the call).

    Entries this adapter read come back as they were given (see the module
    docstring), marks as note lines in front of their text. Every assistant
    message with ``tool_calls`` is followed at once by one ``tool`` message
    per call: the live result (in window order), else the result's tombstone
    note, else a note that no result was recorded. Removals are listed in one
    system message after the leading system/developer messages. Entries from
    elsewhere (another adapter, summaries, rewrites) are rendered from their
    bodies. O(n + tombstones).
    """
    return _ADAPTER.render(source, annotate_stale, tombstone_notes, note_names, note_limit)


def _render(w: Window) -> list[Message]:
    """The window's messages: each group of entries one message, every
    call's results right after it, removals in a system message at the end."""
    marks, results, order = w.marks, w.results, w.order()
    note_of = w.note_of
    out: list[Message] = []
    for group in groups(w.entries):
        calls = [e for e in group.entries if e.kind is Kind.TOOL_CALL]
        texts = [e for e in group.entries if e.kind not in (Kind.TOOL_CALL, Kind.TOOL_OUTPUT)]
        if not calls and not texts:
            continue  # tool results: rendered right after their call
        own_texts = [e for e in texts if e.meta.get("api") == API and e.content is not None]
        if len(texts) == 1 and own_texts:
            message = _message(texts[0], note_of(texts[0]))
        elif texts:
            role = group.role if group.role in ROLES - {"tool"} else "assistant"
            message = {
                "role": role,
                "content": "\n\n".join(annotated(e.body, marks.get(e.id)) for e in texts),
            }
        else:
            env = calls[0].meta.get("env") if calls[0].meta.get("api") == API else None
            message = plain(env) if env is not None else {"role": "assistant", "content": None}
        if not calls:
            out.append(message)
            continue
        message["role"] = "assistant"
        message["tool_calls"] = [_tool_call(c) for c in calls]
        out.append(message)
        live = _as_read([results[c.id] for c in calls if c.id in results], group.key, order)
        for r in live:
            call_id = r.refs[0]
            note = w.result_note(r, call_id)
            if r.meta.get("api") == API and r.content is not None:
                out.append(_message(r, note))
            else:
                text = escape_text(r.body)
                content = text if note is None else f"{note}\n{text}"
                out.append({"role": "tool", "tool_call_id": call_id, "content": content})
        for c in calls:
            if c.id not in results:
                out.append({"role": "tool", "tool_call_id": c.id, "content": w.missing(c.id)})
    return w.end_with_removals(out)


def _as_read(live: list[Entry], start: object, order: Mapping[str, int]) -> list[Entry]:
    """Results in the order they were read (each names the message before it
    in ``meta["after"]``), whatever moves did to the window; results that
    lost their chain follow in window order."""
    rest = sorted(live, key=lambda r: order[r.id])
    out: list[Entry] = []
    at = start
    while rest:
        nxt = next((r for r in rest if r.meta.get("after") == at), None)
        if nxt is None:
            break
        out.append(nxt)
        rest.remove(nxt)
        at = nxt.meta.get("msg")
    return out + rest


def _stream(sink: Sink, kind: Kind) -> ChatStream:
    """The stream reader ``append_stream`` runs: chunks read with this
    module's tool-call and message readers."""
    return ChatStream(sink, kind, _call, _read)


#: This API's adapter: the skeleton bound to the reader, renderer and
#: stream reader above.
_ADAPTER: Adapter[list[Message], Message] = Adapter(API, _read_messages, _render, _stream)

#: The checked reader (kinds, the noun in errors): what the streams and the
#: integrations read this API's messages with.
_read = _ADAPTER.read


# -- validate -----------------------------------------------------------------


def validate(messages: Sequence[Mapping[str, Any]]) -> None:
    """Check what a Chat Completions API checks: known roles, contents of the
    right type, and every assistant message with ``tool_calls`` followed at
    once by exactly one ``tool`` message per call, in any order (and no other
    ``tool`` message). Raises ``InvalidArgument``/``InvalidType`` naming the
    first bad message and field. O(size)."""
    msgs = check_messages(messages)
    pending: list[str] = []
    for index, m in enumerate(msgs):
        role = m.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise fail(index, f"role must be one of {sorted(ROLES)}, not {role!r}")
        content = m.get("content")
        if role == "tool":
            call_id = check_nonempty(index, m.get("tool_call_id"), "tool_call_id")
            if content is None:
                raise fail(index, "content must be a str or a list of text parts", type_error=True)
            _parts_text(index, content, "content", text_only=True)
            if call_id not in pending:
                raise fail(index, f"tool result for {call_id!r} does not follow its call")
            pending.remove(call_id)
            continue
        if pending:
            raise fail(index, f"tool call {pending[0]!r} has no result right after it")
        _body(index, m)
        tool_calls = m.get("tool_calls")
        if tool_calls is not None:
            if role != "assistant":
                raise fail(index, f"tool_calls: only assistant messages carry them, not {role!r}")
            if not isinstance(tool_calls, list | tuple) or not tool_calls:
                raise fail(index, "tool_calls must be a non-empty list", type_error=True)
            seen: set[str] = set()
            pending = [_call(index, n, c, seen)[0] for n, c in enumerate(tool_calls)]
        elif content is None and role != "assistant":
            raise fail(index, "content must be a str or a list of parts", type_error=True)
    if pending:
        raise fail(len(msgs), f"tool call {pending[0]!r} has no result")
