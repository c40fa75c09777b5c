"""The root of the error family, in a module that imports nothing.

What it keeps true: :class:`QuiesceError` and :class:`LogFormatError` (both
re-exported by :mod:`.errors`, where every other error lives) depend on no
other module, so a record's own parser (:meth:`.tombstone.Tombstone.from_dict`)
raises :class:`LogFormatError` without an import circle: :mod:`.errors`
names :class:`~.tombstone.Tombstone` in its signatures, and the tombstone
module imports only this one, :mod:`.kinds` and :mod:`.notes`.
"""

from __future__ import annotations

__all__ = ["LogFormatError", "QuiesceError"]


class QuiesceError(Exception):
    """Base class of every error raised by quiesce."""

    def __str__(self) -> str:
        # KeyError's str() repr-quotes its argument; every quiesce error reads as
        # the plain message instead.
        return str(self.args[0]) if self.args else ""


class LogFormatError(QuiesceError, ValueError):
    """A log file is not a quiesce log, is corrupt beyond a torn tail, or was
    written by a newer format. Nothing is written to it."""
