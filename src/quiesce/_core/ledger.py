"""The protected-entry ledger: which record wrote each protected entry (issue 21).

What it keeps true: ``buf._protected_at`` maps the id of every live entry of
a protected kind (``PROTECTED_KINDS``) or with sealed content to the seq of
the log record that wrote its bytes (an append, or an edit's rewrite or
insertion), live and on replay. A checkpoint carries it (``"protected"``)
so that recovery reads those few records back and checks the entries byte
for byte (:mod:`.claims`). Entries leave it when removed; an entry
rewritten into an unguarded one leaves it too. O(1) per entry written.
"""

from __future__ import annotations

from collections.abc import Iterable

from .entry import Entry
from .policy import PROTECTED_KINDS

__all__ = ["guarded", "note_written"]


def guarded(entry: Entry) -> bool:
    """Whether recovery checks ``entry`` against the record that wrote it:
    a protected kind, or sealed (provider-signed) content. O(1)."""
    return entry.kind in PROTECTED_KINDS or entry.sealed


def note_written(at: dict[str, int], seq: int, entries: Iterable[Entry]) -> None:
    """Record that the log record ``seq`` wrote ``entries`` (an append, or an
    edit's rewrites and insertions): a guarded one is noted with ``seq``, an
    entry rewritten into an unguarded one is forgotten. O(len(entries))."""
    for e in entries:
        if guarded(e):
            at[e.id] = seq
        else:
            at.pop(e.id, None)
