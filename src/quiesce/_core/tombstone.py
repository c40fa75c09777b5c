"""Tombstones: what remains of a removed entry.

What it keeps true: a :class:`Tombstone` is a frozen value that depends only
on :mod:`.kinds` and :mod:`.notes`, so :mod:`.errors` (whose errors carry
one) and :mod:`.records` (which re-exports it) import it without a circle.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .kinds import Kind
from .notes import escape_field

__all__ = ["Tombstone", "tomb_to_dict"]


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


def tomb_to_dict(t: Tombstone) -> dict[str, Any]:
    """The JSON form of a tombstone as the log records hold it. O(1)."""
    return {
        "id": t.id,
        "content_hash": t.content_hash,
        "reason": t.reason,
        "turn": t.turn,
        "actor": t.actor,
        "version": t.version,
        "kind": None if t.kind is None else t.kind.value,
        "key": t.key,
    }
