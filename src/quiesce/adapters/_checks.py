"""Validating what an adapter reads: errors that name the message and field.

What it keeps true: every check raises :class:`~quiesce.InvalidArgument`
(a bad value) or :class:`~quiesce.InvalidType` (a value of the wrong type)
worded ``"<noun> <index>: <field> ..."`` — the noun is ``message``, or
what the adapter reading says (:data:`NOUN`: the Responses adapter says
``item``) — and nothing here changes a buffer: an adapter validates a whole
list before it appends, so an error leaves the head unchanged. Each check
is O(size of what it looks at).
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping, Sequence
from typing import Any

from .._core.entry import MAX_DEPTH, Entry, Kind, freeze
from .._core.errors import InvalidArgument, InvalidType, QuiesceError
from .._core.version import Version
from ._keys import RESERVED
from ._sdk import to_plain

__all__ = [
    "NOUN",
    "check_kind",
    "check_messages",
    "check_nonempty",
    "check_str",
    "entry",
    "fail",
    "foreign_id",
    "is_call",
    "json_value",
    "parts_text",
]

#: What errors call the thing read (the Responses adapter sets ``item``).
NOUN: contextvars.ContextVar[str] = contextvars.ContextVar(
    "quiesce_adapter_noun", default="message"
)


def fail(
    index: int, message: str, *, type_error: bool = False, noun: str | None = None
) -> QuiesceError:
    """A :class:`~quiesce.InvalidArgument` (or ``InvalidType``) naming the
    message (or the ``noun`` an adapter reads, by default :data:`NOUN`'s:
    the Responses adapter says ``item``)."""
    text = f"{noun or NOUN.get()} {index}: {message}"
    return InvalidType(text) if type_error else InvalidArgument(text)



def check_messages(
    messages: object, noun: str | None = None, start: int = 0
) -> Sequence[Mapping[str, Any]]:
    """``messages`` must be a list or tuple of dicts or SDK objects; returned
    with every SDK object in it dumped as the SDK would send it
    (:func:`to_plain`). O(size)."""
    noun = noun or NOUN.get()
    if not isinstance(messages, list | tuple):
        raise InvalidType(
            f"{noun}s must be a list of dicts or SDK objects, not {type(messages).__name__}"
        )
    out: list[Mapping[str, Any]] = []
    for i, raw in enumerate(messages, start):
        m = to_plain(raw)
        if not isinstance(m, Mapping):
            raise fail(
                i,
                f"must be a dict or an SDK object, not {type(m).__name__}",
                type_error=True,
                noun=noun,
            )
        out.append(m)
    return out


def check_str(index: int, value: object, what: str) -> str:
    if not isinstance(value, str):
        raise fail(index, f"{what} must be a str, not {type(value).__name__}", type_error=True)
    return value


def check_nonempty(index: int, value: object, what: str) -> str:
    text = check_str(index, value, what)
    if not text:
        raise fail(index, f"{what} must be a non-empty str")
    return text


def foreign_id(index: int, value: object, what: str) -> str:
    """A framework's own id: a non-empty str without :data:`RESERVED`."""
    text = check_nonempty(index, value, what)
    if RESERVED in text:
        raise fail(index, f"{what} {text!r} contains {RESERVED!r}, which quiesce reserves")
    return text


def is_call(head: Version | None, call_id: str) -> bool:
    """``call_id`` is a tool call of ``head``, live or tombstoned (a result in
    a synced list may answer a call pruned meanwhile)."""
    if head is None:
        return False
    slot = head.live.get(call_id)
    if slot is not None:
        return slot.entry.kind is Kind.TOOL_CALL
    tomb = head.tombs.by_id.get(call_id)
    return tomb is not None and tomb.kind is Kind.TOOL_CALL


def check_kind(value: object, what: str) -> Kind:
    if not isinstance(value, Kind):
        raise InvalidType(f"{what} must be a Kind, not {type(value).__name__}")
    return value


def json_value(index: int, value: object, what: str) -> Any:
    """``value`` frozen as a JSON value, or an error naming the message."""
    try:
        return freeze(value, what)
    except InvalidType as exc:
        found = _not_json(value, "")
        if found is not None:
            path, bad = found
            raise fail(
                index,
                f"{path or what} must be a JSON value or an SDK object, not {type(bad).__name__}",
                type_error=True,
            ) from None
        raise fail(index, str(exc), type_error=True) from None
    except InvalidArgument as exc:
        raise fail(index, str(exc)) from None


def _not_json(value: object, path: str, depth: int = 0) -> tuple[str, object] | None:
    """The path (``content[1].input``) and value of the first non-JSON value
    in ``value``, or ``None``. Only called to word an error."""
    if value is None or isinstance(value, str | int | float | bool) or depth > MAX_DEPTH:
        return None
    if isinstance(value, Mapping):
        for k, v in value.items():
            found = _not_json(v, f"{path}.{k}" if path else str(k), depth + 1)
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        for n, v in enumerate(value):
            found = _not_json(v, f"{path}[{n}]", depth + 1)
            if found is not None:
                return found
        return None
    return path, value


def entry(index: int, *args: Any, **kwargs: Any) -> Entry:
    """An :class:`Entry`, with a construction error naming the message."""
    try:
        return Entry(*args, **kwargs)
    except InvalidType as exc:
        raise fail(index, str(exc), type_error=True) from None
    except InvalidArgument as exc:
        raise fail(index, str(exc)) from None


def parts_text(
    index: int,
    content: object,
    what: str,
    *,
    noun: str,
    fields: Mapping[str, str],
    only_text: bool = False,
) -> str:
    """The text of a content value: a str as is, or a list of parts/blocks
    whose text fields (``fields``: type → field) are joined by newlines, any
    other part as ``[type]`` (or an error when ``only_text``)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list | tuple):
        raise fail(
            index,
            f"{what} must be a str or a list of {noun}, not {type(content).__name__}",
            type_error=True,
        )
    texts: list[str] = []
    for n, part in enumerate(content):
        if not isinstance(part, Mapping):
            raise fail(index, f"{what}[{n}] must be a dict", type_error=True)
        kind = check_nonempty(index, part.get("type"), f"{what}[{n}].type")
        field_name = fields.get(kind)
        if field_name is not None:
            texts.append(check_str(index, part.get(field_name), f"{what}[{n}].{field_name}"))
        elif only_text:
            raise fail(index, f"{what}[{n}] must be a text part, not {kind!r}")
        else:
            texts.append(f"[{kind}]")
    return "\n".join(texts)

