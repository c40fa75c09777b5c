"""Observation: a buffer's internal moments, reported to an observer without patching it.

Benchmarks and test tools want to see what the core does inside (when a
staged removal first became due, when a batch was applied), and reading or
replacing the buffer's private methods to find out ties them to today's
code. :meth:`Buffer.observe <quiesce.Buffer.observe>` installs one
:class:`Observer` instead.

What it keeps true: observing changes nothing. The hooks are called
synchronously on the thread where the moment happened, some under the
buffer's write lock, so an observer must be O(1), never block, never write
to the buffer; an exception it raises is swallowed (and counted in
``stats().callback_errors``), never propagated into the write that called
it. With no observer installed a hook costs one attribute read, on slow
paths only (a due signal, an applied batch): the fast paths (``append``,
``mark_stale``, pin, unpin) never call one.

Cancellation: nothing here awaits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .state import HasState, state_of, tap_head

if TYPE_CHECKING:
    from .version import Version

__all__ = ["Observer", "tap_publications"]


def tap_publications(buffer: HasState, tap: Callable[[Version], None]) -> Callable[[], None]:
    """Call ``tap(version)`` right after every publication of ``buffer``
    (every store of its head, by any writer, on the writer's thread, under
    its write lock), until the returned undo is called; for test tools that
    record a history (``quiesce.testing.Recorder``). Costs nothing while
    untapped (see :func:`~.state.tap_head`); ``tap`` must be O(1) and must
    not write to the buffer. Raises :class:`RuntimeError` if the buffer is
    tapped already. O(1)."""
    return tap_head(state_of(buffer), tap)


class Observer:
    """The base observer: every hook does nothing; override the ones you need."""

    def due(self) -> None:
        """A staged removal became due: the first due signal since the last
        applied batch (the moment ``stats().reclamation_latency_last`` is
        measured from)."""

    def applied(self, removed: tuple[str, ...]) -> None:
        """A batch of due removals was published, removing ``removed`` (never
        empty). Called under the write lock, after the new head is stored."""
