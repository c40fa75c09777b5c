"""Anthropic Messages: a window's entries back into a request.

What it keeps true (the shapes are :mod:`quiesce.adapters.anthropic`'s):
blocks that adapter read come back as given, marks as notes (signed blocks
carry none); every assistant turn with ``tool_use`` blocks is followed by a
user turn that starts with one ``tool_result`` per call (the live result,
else its tombstone note, else a note that none was recorded); turns of one
role that pruning left next to each other are merged, as the API would,
``tool_result`` blocks first, and remembered so ``sync_messages`` knows a
merged turn fed back; the removal note goes at the end of the last user
turn, so the system prompt and every earlier turn stay as the provider's
prompt cache holds them. Reads one snapshot's :class:`Window`; O(n +
tombstones).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, cast

from .._core.entry import Entry, Kind, canonical_json
from ._notes import escape_blocks, escape_text, remember_rendered
from ._window import Window, groups, plain, tool_name

__all__ = ["API", "SYSTEM_ROLES", "Block", "Message", "render_window"]

API = "anthropic"

#: Roles rendered into the system prompt (``developer`` comes from OpenAI-style input).
SYSTEM_ROLES = frozenset({"system", "developer"})

Message = dict[str, Any]
Block = dict[str, Any]



@dataclass(slots=True)
class _Turn:
    role: str
    key: object
    after: object
    str_form: bool
    env: Any
    results: list[Block] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)  #: the entries it shows
    merged: bool = False  #: pruning left two messages of one role together


def _text(text: str) -> Block:
    return {"type": "text", "text": text}


def _blocks(e: Entry, note: str | None) -> list[Block]:
    """The blocks an entry renders as (a note block first for a stale
    non-text block; signed blocks never carry one)."""
    if e.meta.get("api") == API and e.content is not None:
        block: Block = escape_blocks(plain(e.content))
        if note is None or e.sealed:
            return [block]
        if block.get("type") == "text":
            return [{**block, "text": f"{note}\n{block['text']}"}]
        return [_text(note), block]
    if e.kind is Kind.TOOL_CALL:
        kind = "server_tool_use" if e.meta.get("block") == "server_tool_use" else "tool_use"
        block = {"type": kind, "id": e.id, "name": tool_name(e), "input": _input(e)}
        return [block] if note is None else [_text(note), block]
    text = escape_text(e.body)
    return [_text(text if note is None else f"{note}\n{text}")]


def _input(e: Entry) -> Any:
    raw = e.meta.get("arguments")
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
    return {"input": e.body}


def _result_block(call: Entry, result: Entry, note: str | None) -> Block:
    """The ``tool_result`` block answering ``call``: the result as read, its
    stale note in front of its content, else its body as text."""
    if result.meta.get("api") == API and result.content is not None:
        block: Block = plain(result.content)
        if block.get("type") == "tool_result":
            content = escape_blocks(block.get("content"))
            if note is not None:
                if isinstance(content, list):
                    content = [_text(note), *content]
                else:
                    content = f"{note}\n{content or ''}"
            if content is not None:
                block["content"] = content
            return block
    text = escape_text(result.body)
    return {
        "type": "tool_result",
        "tool_use_id": call.id,
        "content": text if note is None else f"{note}\n{text}",
    }


def render_window(w: Window) -> dict[str, Any]:
    """The window as ``{"system": ..., "messages": [...]}``: each group of
    entries one turn, a results turn after each turn with tool uses, turns
    of one role merged, the removal note at the end of the last user turn
    (or of the system prompt)."""
    results, order = w.results, w.order()
    note_of = w.note_of
    system: list[tuple[Entry, str | None]] = []
    turns: list[_Turn] = []
    for group in groups(w.entries):
        if group.role in SYSTEM_ROLES:
            system.extend((e, note_of(e)) for e in group.entries)
            continue
        first = group.entries[0]
        own = first.meta.get("api") == API
        turn = _Turn(
            "assistant" if group.role == "assistant" else "user",
            group.key,
            first.meta.get("after"),
            own and first.meta.get("form") == "str",
            first.meta.get("env") if own else None,
        )
        turn.ids = [e.id for e in group.entries if e.kind is not Kind.TOOL_OUTPUT]
        calls: list[Entry] = []
        for e in group.entries:
            server = e.meta.get("api") == API and e.meta.get("block") not in (None, "tool_result")
            if e.kind is Kind.TOOL_OUTPUT and not server:
                continue  # placed after its call
            if e.kind is Kind.TOOL_CALL and e.meta.get("block") == "server_tool_use":
                reply = results.get(e.id)
                if reply is not None and reply.meta.get("api") == API and reply.content:
                    turn.blocks.extend(_blocks(e, note_of(e)))
                elif reply is not None:
                    # The result was rewritten: it renders as text, which
                    # cannot answer a server_tool_use; the call does too.
                    shown = escape_text(f"[{tool_name(e)} {canonical_json(_input(e))}]")
                    stale = note_of(e)
                    turn.blocks.append(_text(shown if stale is None else f"{stale}\n{shown}"))
                else:  # a server call is answered in its own turn, or not shown
                    turn.blocks.append(_text(w.missing(e.id)))
                continue
            if e.kind is Kind.TOOL_CALL:
                calls.append(e)
            turn.blocks.extend(_blocks(e, note_of(e)))
        turns.append(turn)
        if calls:
            answer = _Turn("user", None, group.key, False, None)
            live = sorted(
                (results[c.id] for c in calls if c.id in results), key=lambda r: order[r.id]
            )
            by_call = {r.refs[0]: r for r in live}
            answer.ids = [r.id for r in live]
            for r in live:
                call = next(c for c in calls if c.id == r.refs[0])
                answer.results.append(_result_block(call, r, w.result_note(r, call.id)))
            for c in calls:
                if c.id not in by_call:
                    missing = w.missing(c.id)
                    answer.results.append(
                        {"type": "tool_result", "tool_use_id": c.id, "content": missing}
                    )
            turns.append(answer)
    messages = _merge(turns)
    out: dict[str, Any] = {}
    note = w.removal_note()
    if note is not None and _note_last_user(messages, note):
        note = None
    prompt = _system_prompt(system, note)
    if prompt is not None:
        out["system"] = prompt
    out["messages"] = messages
    return out


def _note_last_user(messages: list[Message], note: str) -> bool:
    """Put the removal note at the end of the last user turn (a text block
    after its blocks, or a paragraph after its text): a removal changes no
    byte before the place it was made, and the system prompt and every
    earlier turn stay as the provider's prompt cache holds them. ``False``
    if there is no user turn (the note then ends the system prompt)."""
    for m in reversed(messages):
        if m.get("role") != "user":
            continue
        content = m.get("content")
        if isinstance(content, str):
            m["content"] = f"{content}\n\n{note}"
        else:
            m["content"] = [*cast(list[Block], content), _text(note)]
        return True
    return False


def _merge(turns: list[_Turn]) -> list[Message]:
    """Fold the results turn made after a call into the user turn that
    follows it when that turn held them originally (or pruning left the two
    next to each other), then merge neighbours of one role."""
    merged: list[_Turn] = []
    for t in turns:
        if merged and merged[-1].role == t.role:
            last = merged[-1]
            made = last.key is None  # a results turn made by render
            if made or t.after != last.key:
                if made and t.role == "user":
                    t.merged = t.merged or last.merged or t.after != last.after
                    t.results[:0] = last.results
                    t.blocks[:0] = last.blocks
                    t.ids[:0] = last.ids
                    t.after = last.after
                    merged[-1] = t
                    continue
                last.results.extend(t.results)
                last.blocks.extend(t.blocks)
                last.ids.extend(t.ids)
                last.merged = True
                last.str_form = False
                last.key = t.key
                continue
        merged.append(t)
    out: list[Message] = []
    for t in merged:
        blocks = t.results + t.blocks
        if not blocks:
            continue
        m: Message = plain(t.env) if t.env is not None else {}
        m["role"] = t.role
        if t.str_form and not t.results and len(blocks) == 1 and blocks[0].get("type") == "text":
            m["content"] = blocks[0]["text"]
        else:
            m["content"] = blocks
        if t.merged:
            remember_rendered(API, m, t.ids)  # sync recognises it when fed back
        out.append(m)
    return out


def _system_prompt(parts: list[tuple[Entry, str | None]], note: str | None) -> Any:
    if not parts:
        return note
    blocks: list[Block] = []
    str_form = True
    for e, stale in parts:
        if e.meta.get("api") == API and e.meta.get("form") == "blocks" and e.content is not None:
            str_form = False
        blocks.extend(_blocks(e, stale))
    if note is not None:
        blocks.append(_text(note))
    if str_form:
        return "\n\n".join(b["text"] for b in blocks)
    return blocks
