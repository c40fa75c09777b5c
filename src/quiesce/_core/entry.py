"""Entries: the immutable units of a context buffer.

An :class:`Entry` is frozen and validated on construction, so every entry that
exists is well formed; the buffer never re-validates fields on its hot paths.
Its :attr:`Entry.content_hash` is computed once, at construction (sha256 of the
UTF-8 body, first 16 hex digits, as in seed 002), because re-admission checks,
tombstones and the log all need it.
"""

from __future__ import annotations

import enum
import hashlib
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidArgument, InvalidType

__all__ = ["Entry", "Kind", "content_hash"]


class Kind(enum.Enum):
    """What an entry is. The policy's rule table (``policy.py``) says which
    kinds are protected (never removed or paraphrased) and immutable (never
    marked, rewritten or summarized; they may be moved)."""

    REASONING = "reasoning"
    NEGATIVE = "negative"
    PROHIBITION = "prohibition"
    CONSTRAINT = "constraint"
    INSTRUCTION = "instruction"
    TOOL_CALL = "tool_call"
    TOOL_OUTPUT = "tool_output"
    RATIONALE = "rationale"
    SUMMARY = "summary"


def content_hash(body: str) -> str:
    """First 16 hex digits of sha256 of ``body`` encoded as UTF-8. O(len(body))."""
    return hashlib.sha256(body.encode("utf-8")).hexdigest()[:16]


_EMPTY_META: Mapping[str, Any] = types.MappingProxyType({})


def check_id(value: object, what: str = "id") -> str:
    """Validate an entry id: a non-empty ``str``. Returns it unchanged."""
    if type(value) is not str:
        raise InvalidType(f"{what} must be a str, not {type(value).__name__}")
    if not value:
        raise InvalidArgument(f"{what} must be a non-empty str")
    return value


def check_turn(value: object, what: str = "turn") -> int | None:
    """Validate an optional turn number: ``None`` or an ``int`` >= 0 (not bool)."""
    if value is None:
        return None
    if type(value) is not int:
        raise InvalidType(f"{what} must be an int or None, not {type(value).__name__}")
    if value < 0:
        raise InvalidArgument(f"{what} must be >= 0, got {value}")
    return value


def check_text(value: object, what: str) -> str:
    """Validate a required non-empty ``str`` (reasons, bodies of overrides)."""
    if type(value) is not str:
        raise InvalidType(f"{what} must be a str, not {type(value).__name__}")
    if not value:
        raise InvalidArgument(f"{what} must be a non-empty str")
    return value


def check_refs(refs: object, own_id: str | None) -> tuple[str, ...]:
    """Validate refs: a collection (not a bare ``str``) of distinct non-empty ids,
    none equal to ``own_id``. Returns them as a tuple, order kept."""
    if isinstance(refs, str | bytes) or not hasattr(refs, "__iter__"):
        raise InvalidType(f"refs must be a collection of str ids, not {type(refs).__name__}")
    out = tuple(refs)
    seen: set[str] = set()
    for ref in out:
        check_id(ref, "each ref")
        if ref == own_id:
            raise InvalidArgument(f"entry {own_id!r} must not reference itself")
        if ref in seen:
            raise InvalidArgument(f"ref {ref!r} is listed twice")
        seen.add(ref)
    return out


@dataclass(frozen=True, slots=True)
class Entry:
    """One unit of context: a reasoning step, a tool call or output, a constraint...

    ``refs`` are the ids this entry cites (a ``TOOL_OUTPUT`` refs its
    ``TOOL_CALL``); ``key`` is an optional identity for re-admission checks (a
    tool name plus its arguments); ``meta`` is free-form and copied read-only.

    Raises :class:`InvalidType` / :class:`InvalidArgument` (both
    :class:`QuiesceError`) for an empty id, a non-str body, a ref to itself, a
    negative turn, and so on. Construction is O(len(body) + len(refs)).
    """

    id: str
    kind: Kind
    body: str
    refs: tuple[str, ...] = ()
    turn: int | None = None
    key: str | None = None
    meta: Mapping[str, Any] = field(default_factory=lambda: _EMPTY_META, hash=False)
    content_hash: str = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        check_id(self.id)
        if not isinstance(self.kind, Kind):
            raise InvalidType(f"kind must be a Kind, not {type(self.kind).__name__}")
        if type(self.body) is not str:
            raise InvalidType(f"body must be a str, not {type(self.body).__name__}")
        refs = check_refs(self.refs, self.id)
        check_turn(self.turn)
        if self.key is not None:
            check_id(self.key, "key")
        if not isinstance(self.meta, Mapping):
            raise InvalidType(f"meta must be a mapping, not {type(self.meta).__name__}")
        meta = self.meta if self.meta is _EMPTY_META else types.MappingProxyType(dict(self.meta))
        object.__setattr__(self, "refs", refs)
        object.__setattr__(self, "meta", meta)
        object.__setattr__(self, "content_hash", content_hash(self.body))

    def replace(self, *, body: str | None = None, refs: tuple[str, ...] | None = None) -> Entry:
        """A copy with a new body and/or refs (what ``Rewrite`` applies)."""
        return Entry(
            self.id,
            self.kind,
            self.body if body is None else body,
            self.refs if refs is None else refs,
            self.turn,
            self.key,
            self.meta,
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; :meth:`from_dict` inverts it."""
        return {
            "id": self.id,
            "kind": self.kind.value,
            "body": self.body,
            "refs": list(self.refs),
            "turn": self.turn,
            "key": self.key,
            "meta": dict(self.meta),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Entry:
        """Rebuild an entry written by :meth:`to_dict` (validates every field)."""
        return cls(
            data["id"],
            Kind(data["kind"]),
            data["body"],
            tuple(data.get("refs", ())),
            data.get("turn"),
            data.get("key"),
            data.get("meta") or {},
        )
