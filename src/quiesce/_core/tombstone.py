"""Tombstones: what remains of a removed entry.

What it keeps true: a :class:`Tombstone` is a frozen value with its log form
(:meth:`Tombstone.to_dict`, :meth:`Tombstone.from_dict`) that depends only on
:mod:`.kinds`, :mod:`.notes` and :mod:`.base_errors`, so :mod:`.errors` (whose
errors carry one) and :mod:`.records` (which re-exports it) import it without a
circle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from .base_errors import LogFormatError
from .kinds import Kind
from .notes import escape_field

__all__ = ["Tombstone"]


class Tombstone(NamedTuple):
    """What remains of a removed entry, in the window and in the log (seed 002)."""

    id: str
    content_hash: str
    reason: str
    turn: int | None
    actor: str | None
    version: int  #: the version that removed the entry
    kind: Kind | None = None
    key: str | None = None

    def note(self) -> str:
        """A one-line, human-readable tombstone note for rendering into a prompt
        (id and reason escaped: one line, no bracket a reason could forge)."""
        when = f"turn {self.turn}" if self.turn is not None else f"version {self.version}"
        return f"[{escape_field(self.id)} pruned at {when}: {escape_field(self.reason)}]"

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form the log, checkpoints and the shared buffer's
        wire hold (its eight fields; ``kind`` as its value). O(1)."""
        return {
            "id": self.id,
            "content_hash": self.content_hash,
            "reason": self.reason,
            "turn": self.turn,
            "actor": self.actor,
            "version": self.version,
            "kind": None if self.kind is None else self.kind.value,
            "key": self.key,
        }

    @classmethod
    def from_dict(cls, d: object) -> Tombstone:
        """Invert :meth:`to_dict`, every field's type checked (``version``
        may be ``None``: a removal intent's); :class:`LogFormatError` for a
        malformed one, never ``KeyError``/``ValueError``. O(1)."""
        if not isinstance(d, Mapping):
            raise LogFormatError("a tombstone is not an object")
        try:
            i, h, r, turn, actor = d["id"], d["content_hash"], d["reason"], d["turn"], d["actor"]
            version = d["version"]
        except KeyError as exc:
            raise LogFormatError(f"tombstone {d.get('id')!r} lacks field {exc}") from None
        kind, key = d.get("kind"), d.get("key")
        if not (
            type(i) is str
            and type(h) is str
            and type(r) is str
            and (turn is None or (type(turn) is int and turn >= 0))
            and (actor is None or type(actor) is str)
            and (version is None or type(version) is int)
            and (key is None or type(key) is str)
            and (kind is None or type(kind) is str)
            and kind in _KINDS
        ):
            raise LogFormatError(f"tombstone {i!r} has a field of the wrong type")
        # tuple.__new__: a checkpoint restores many at once (no NamedTuple __new__)
        return tuple.__new__(cls, (i, h, r, turn, actor, version, _KINDS[kind], key))


#: a tombstone's stored kind (its value, or None) -> Kind
_KINDS: dict[object, Kind | None] = {k.value: k for k in Kind} | {None: None}
