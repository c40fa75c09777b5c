"""Entries: the immutable units of a context buffer.

An :class:`Entry` is frozen and validated on construction, so every entry that
exists is well formed and can be written to a durable log; the buffer never
re-validates fields on its hot paths, and a flush never fails on a value that
construction accepted. Its :attr:`Entry.content_hash` is computed once, at
construction (sha256 of the UTF-8 body, first 16 hex digits, as in seed 002;
with structured ``content``, sha256 of the body, a NUL byte and the content's
canonical JSON), because re-admission checks, tombstones and the log all need it.

One rule for text (every id, ref, key, body, reason, actor, and every string
inside ``meta`` and ``content``, keys included): it must be encodable as UTF-8,
so a lone surrogate such as ``"\ud83d"`` (half of an emoji cut out of JSON) is
refused with :class:`InvalidArgument` at construction. Nothing is stored that
could not be hashed, logged and read back byte for byte.

``meta`` and ``content`` are JSON values (``dict`` with ``str`` keys,
``list``/``tuple``, ``str``, ``int``, finite ``float``, ``bool``, ``None``),
nested at most :data:`MAX_DEPTH` levels deep. They are deep-frozen on
construction (dicts become read-only mappings, lists become tuples), so an
entry never shares a mutable object with its caller; :func:`thaw` gives back
plain JSON types. Anything else — a tuple key, ``NaN``/``inf``, a ``set``,
nesting deeper than :data:`MAX_DEPTH` — raises :class:`InvalidType` or
:class:`InvalidArgument` at construction.
"""

from __future__ import annotations

import hashlib
import json
import math
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidArgument, InvalidType
from .kinds import Kind

__all__ = [
    "MAX_DEPTH",
    "MAX_STORED_INT",
    "SEALED_TYPES",
    "Entry",
    "Kind",
    "content_hash",
    "freeze",
    "result_id",
    "thaw",
]

#: How deeply ``meta`` and ``content`` may nest (a scalar is depth 0, ``{"a": 1}``
#: depth 1). Deeper values are refused at construction, so recovery, the
#: adapters and JSON decoders never recurse further than this.
MAX_DEPTH = 64

#: The largest integer quiesce stores (issue 21, bounds at the door). Every
#: integer the public API keeps — turns, versions, counts, limits, and the
#: integers inside ``meta`` and ``content`` — ends up in a record, a
#: tombstone column or a database column, and all of them are signed 64-bit
#: (the tombstone store's arrays, SQLite ``INTEGER``, PostgreSQL ``BIGINT``).
#: :func:`check_int` refuses anything outside, at the call, so no value that
#: passed the door can overflow half-way through a change.
MAX_STORED_INT = 2**63 - 1
_MIN_STORED_INT = -(2**63)

#: Content block types that carry a provider's signature over their bytes
#: (Anthropic ``thinking`` and ``redacted_thinking``; an OpenAI Responses
#: ``reasoning`` item counts only when it has ``encrypted_content``). An entry
#: whose ``content`` is such a block is :attr:`Entry.sealed`.
SEALED_TYPES = frozenset({"thinking", "redacted_thinking"})


def result_id(call_id: str) -> str:
    """The id of the entry holding the result of tool call ``call_id``
    (``"<call id>#result"``): the adapters name results so, and the policy
    reads a tombstone of that id as "this call was answered"."""
    return f"{call_id}#result"


def content_hash(body: str, content: object = None) -> str:
    """First 16 hex digits of sha256 of ``body`` encoded as UTF-8 (seed 002);
    with structured ``content``, of the body, a NUL byte and the content's
    canonical JSON (sorted keys, no spaces). O(len(body) + size of content)."""
    data = body.encode("utf-8")
    if content is not None:
        data += b"\x00" + canonical_json(content).encode("utf-8")
    return hashlib.sha256(data).hexdigest()[:16]


def _plain_mapping(value: object) -> dict[Any, Any]:
    """The encoder's hook for what it cannot encode itself: a mapping that is
    not a ``dict`` (a frozen value's read-only mapping) as a shallow ``dict``
    of its items (the encoder recurses into it); anything else is refused as
    ``json.dumps`` refuses it."""
    if type(value) is types.MappingProxyType or isinstance(value, Mapping):
        return dict(value.items())
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


#: The options of canonical JSON, fixed: content keys and hashes in logs
#: depend on these exact bytes (``tests/core/test_canonical_json.py``
#: compares :func:`canonical_json` with ``json.dumps`` under them).
_CANONICAL: dict[str, Any] = {
    "sort_keys": True,
    "separators": (",", ":"),
    "ensure_ascii": False,
    "allow_nan": False,
}
_ENCODER = json.JSONEncoder(**_CANONICAL, default=_plain_mapping)


def _c_encoder() -> Any:
    """The C encoder of ``json`` built once with the canonical options and no
    circular-reference markers (a markers dict is per call state: shared, two
    threads encoding one value would see each other's marks), or ``None``
    where it is missing. Only used if it encodes a probe value exactly as
    ``json.dumps`` does."""
    make = getattr(json.encoder, "c_make_encoder", None)
    quote = getattr(json.encoder, "c_encode_basestring", None)
    if make is None or quote is None:
        return None
    try:
        encode = make(None, _plain_mapping, quote, None, ":", ",", True, False, False)
        probe = {"b": [1, 2.5, None, True, 'é\n"x'], "a": {"z": -0.0, "y": 10**18}}
        frozen = types.MappingProxyType({"b": tuple(probe["b"]), "a": probe["a"]})
        want = json.dumps(probe, **_CANONICAL)
        if "".join(encode(probe, 0)) != want or "".join(encode(frozen, 0)) != want:
            return None
    except Exception:
        return None
    return encode


_C_ENCODE: Any = _c_encoder()


def canonical_json(value: object) -> str:
    """``value`` (frozen or plain JSON) as canonical JSON: sorted keys, no
    spaces, non-ASCII kept, no ``NaN``/``inf``. Two equal JSON values give
    equal strings, the very bytes of ``json.dumps(thaw(value),
    sort_keys=True, separators=(",", ":"), ensure_ascii=False,
    allow_nan=False)``.

    Encoded in one pass by an encoder built once (``json``'s C encoder when
    present): a frozen mapping is copied shallowly as the encoder reaches it,
    tuples are encoded as lists, nothing is thawed first. O(size). A value
    that is not JSON raises ``TypeError`` or ``ValueError`` as ``json.dumps``
    does; a cyclic plain value (frozen ones are trees) raises
    ``RecursionError`` rather than ``json``'s circular-reference
    ``ValueError``. Thread-safe: the encoder keeps no state between calls.
    """
    encode = _C_ENCODE
    if encode is None:
        return _ENCODER.encode(value)
    return "".join(encode(value, 0))


def check_utf8(value: str, what: str) -> str:
    """Refuse a ``str`` that cannot be encoded as UTF-8 (a lone surrogate).
    O(len(value)); ASCII strings take a fast path."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            bad = value[exc.start : exc.end]
            raise InvalidArgument(
                f"{what} contains a lone surrogate {bad!r} at index {exc.start} "
                "(text must be encodable as UTF-8)"
            ) from None
    return value


def freeze(value: object, what: str = "value", depth: int = 0) -> Any:
    """Validate a JSON value and return a deep-frozen copy: dicts become
    read-only mappings (``str`` keys only), lists and tuples become tuples.

    Raises :class:`InvalidType` for a non-JSON type or a non-``str`` key,
    :class:`InvalidArgument` for ``NaN``/``inf``, a lone surrogate, or nesting
    deeper than :data:`MAX_DEPTH`. O(size); recursion is bounded by
    :data:`MAX_DEPTH`.
    """
    if value is None or value is True or value is False:
        return value
    t = type(value)
    if t is str:
        if value.isascii():  # type: ignore[attr-defined]
            return value
        return check_utf8(value, what)  # type: ignore[arg-type]
    if t is int:
        if not _MIN_STORED_INT <= value <= MAX_STORED_INT:  # type: ignore[operator]
            raise InvalidArgument(
                f"{what} must hold integers that fit in signed 64 bits, not one of "
                f"{value.bit_length()} bits"  # type: ignore[attr-defined]
            )
        return value
    if t is float:
        if not math.isfinite(value):  # type: ignore[arg-type]
            raise InvalidArgument(f"{what} must be finite JSON numbers, not {value!r}")
        return value
    if depth >= MAX_DEPTH:
        raise InvalidArgument(f"{what} nests deeper than {MAX_DEPTH} levels")
    if t is dict or isinstance(value, Mapping):
        # the common values are ASCII strings: taken as they are, without a
        # call (what freeze of one returns); every other value recurses
        out: dict[str, Any] = {}
        for k, v in value.items():  # type: ignore[attr-defined]
            if type(k) is not str:
                raise InvalidType(f"{what} keys must be str, not {type(k).__name__} ({k!r})")
            if not k.isascii():
                check_utf8(k, f"a key in {what}")
            out[k] = v if type(v) is str and v.isascii() else freeze(v, what, depth + 1)
        return types.MappingProxyType(out)
    if t is list or t is tuple:
        return tuple([freeze(v, what, depth + 1) for v in value])  # type: ignore[attr-defined]
    raise InvalidType(f"{what} must hold only JSON values, not {t.__name__}")


def thaw(value: object) -> Any:
    """Plain JSON types (``dict``, ``list``) for a value made by :func:`freeze`
    (plain values pass through). O(size)."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [thaw(v) for v in value]
    return value


_EMPTY_META: Mapping[str, Any] = types.MappingProxyType({})


def check_id(value: object, what: str = "id") -> str:
    """Validate an entry id: a non-empty ``str``. Returns it unchanged."""
    if type(value) is not str:
        raise InvalidType(f"{what} must be a str, not {type(value).__name__}")
    if not value:
        raise InvalidArgument(f"{what} must be a non-empty str")
    return check_utf8(value, what)


def check_int(value: object, what: str, *, low: int = 0) -> int:
    """The one checker of every integer the public API stores: an ``int``
    (not ``bool``, not ``float``) from ``low`` to :data:`MAX_STORED_INT`.
    :class:`InvalidType` or :class:`InvalidArgument` otherwise, naming
    ``what``. O(1)."""
    if type(value) is not int:
        raise InvalidType(f"{what} must be an int, not {type(value).__name__}")
    if value < low:
        raise InvalidArgument(f"{what} must be >= {low}, got {value}")
    if value > MAX_STORED_INT:
        shown = value if value.bit_length() <= 128 else f"an int of {value.bit_length()} bits"
        raise InvalidArgument(
            f"{what} must be <= 2**63 - 1 (the log stores signed 64-bit integers), got {shown}"
        )
    return value


def check_turn(value: object, what: str = "turn") -> int | None:
    """Validate an optional turn number: ``None`` or an ``int`` from 0 to
    :data:`MAX_STORED_INT` (not bool); :func:`check_int` otherwise."""
    if value is None:
        return None
    if type(value) is not int:
        raise InvalidType(f"{what} must be an int or None, not {type(value).__name__}")
    return check_int(value, what)


def check_text(value: object, what: str) -> str:
    """Validate a required non-empty ``str`` (reasons, bodies of overrides)."""
    if type(value) is not str:
        raise InvalidType(f"{what} must be a str, not {type(value).__name__}")
    if not value:
        raise InvalidArgument(f"{what} must be a non-empty str")
    return check_utf8(value, what)


def check_body(value: object, what: str = "body") -> str:
    """Validate a body: a ``str`` (may be empty) encodable as UTF-8."""
    if type(value) is not str:
        raise InvalidType(f"{what} must be a str, not {type(value).__name__}")
    return check_utf8(value, what)


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


_KEEP: Any = object()


@dataclass(frozen=True, slots=True)
class Entry:
    """One unit of context: a reasoning step, a tool call or output, a constraint...

    ``refs`` are the ids this entry cites (a ``TOOL_OUTPUT`` refs its
    ``TOOL_CALL``); ``key`` is an optional identity for re-admission checks (a
    tool name plus its arguments); ``meta`` is free-form JSON, deep-frozen.
    ``content`` is the entry's original structured form when it has one (a
    chat adapter keeps the message part, content block or API item here): a
    JSON value, deep-frozen, part of :attr:`content_hash`, and given back by
    :func:`thaw` unchanged. ``body`` stays the text the policy classifies.

    Raises :class:`InvalidType` / :class:`InvalidArgument` (both
    :class:`QuiesceError`) for an empty id, a non-str body, a ref to itself, a
    negative turn, a lone surrogate in any text, a ``meta``/``content`` value
    that is not JSON or nests deeper than :data:`MAX_DEPTH`, and so on.
    Construction is O(len(body) + len(refs) + size of meta and content).
    """

    id: str
    kind: Kind
    body: str
    refs: tuple[str, ...] = ()
    turn: int | None = None
    key: str | None = None
    meta: Mapping[str, Any] = field(default_factory=lambda: _EMPTY_META, hash=False)
    content: Any = field(default=None, hash=False)
    content_hash: str = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        check_id(self.id)
        if not isinstance(self.kind, Kind):
            raise InvalidType(f"kind must be a Kind, not {type(self.kind).__name__}")
        check_body(self.body)
        refs = self.refs
        if type(refs) is not tuple or refs:  # the empty tuple is valid as it is
            refs = check_refs(refs, self.id)
        check_turn(self.turn)
        if self.key is not None:
            check_id(self.key, "key")
        meta = self.meta
        if type(meta) is not dict and not isinstance(meta, Mapping):
            raise InvalidType(f"meta must be a mapping, not {type(meta).__name__}")
        if meta is not _EMPTY_META:
            meta = freeze(meta, "meta")
        given = self.content
        content = None
        if given is not None:
            content = freeze(given, "content")
            object.__setattr__(self, "content", content)
        object.__setattr__(self, "refs", refs)
        object.__setattr__(self, "meta", meta)
        # the hash of the value as given: once freeze accepted it (plain
        # JSON and mappings), its canonical JSON is the frozen copy's, and
        # the encoder reads a plain dict without copying it
        object.__setattr__(self, "content_hash", content_hash(self.body, given))

    @property
    def streaming(self) -> bool:
        """True while the entry is still being written by a stream
        (:meth:`~quiesce.Buffer.open_stream`): its body is the prefix that
        had arrived by the version it was read from. False for every entry
        that was appended whole and for a stream once closed or aborted.
        O(1)."""
        return False

    @property
    def sealed(self) -> bool:
        """True when ``content`` is a block signed by its provider (a
        ``type`` in :data:`SEALED_TYPES`, or a ``reasoning`` item with
        ``encrypted_content``). A sealed entry is never rewritten or
        summarized; it is removed only together with the entries that cite
        it (its turn), and never while a tool call of its turn awaits its
        result (``policy.sealed_conflicts``). O(1)."""
        c = self.content
        if not isinstance(c, Mapping):
            return False
        kind = c.get("type")
        if kind in SEALED_TYPES:
            return True
        return kind == "reasoning" and isinstance(c.get("encrypted_content"), str)

    def replace(
        self, *, body: str | None = None, refs: tuple[str, ...] | None = None, content: Any = _KEEP
    ) -> Entry:
        """A copy with a new body and/or refs (what ``Rewrite`` applies).

        A new body that differs from the old one drops ``content`` (the
        structured form described the old bytes) unless ``content`` is given.
        """
        if content is _KEEP:
            content = self.content if body is None or body == self.body else None
        return Entry(
            self.id,
            self.kind,
            self.body if body is None else body,
            self.refs if refs is None else refs,
            self.turn,
            self.key,
            self.meta,
            content,
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of plain types; :meth:`from_dict` inverts it.
        ``content`` is present only when the entry has one, so records of
        entries without it keep their earlier shape."""
        out = {
            "id": self.id,
            "kind": self.kind.value,
            "body": self.body,
            "refs": list(self.refs),
            "turn": self.turn,
            "key": self.key,
            "meta": thaw(self.meta),
        }
        if self.content is not None:
            out["content"] = thaw(self.content)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Entry:
        """Rebuild an entry written by :meth:`to_dict` (validates every field;
        a dict without ``content`` gives an entry without it)."""
        return cls(
            data["id"],
            Kind(data["kind"]),
            data["body"],
            tuple(data.get("refs", ())),
            data.get("turn"),
            data.get("key"),
            data.get("meta") or {},
            data.get("content"),
        )
