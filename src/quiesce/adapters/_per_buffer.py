"""State an adapter keeps per buffer and API, outside the buffer.

What it keeps true: a :class:`PerBuffer` holds one value per (buffer, API),
made by its factory on first use, and holds the buffer only weakly (the
value goes with it). Lookups are thread-safe (one lock, held for the
lookup only). O(1) per lookup.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

from .._core.buffer import Buffer

__all__ = ["PerBuffer"]

T = TypeVar("T")


class PerBuffer(Generic[T]):
    """One ``factory()`` value per buffer and API name."""

    __slots__ = ("_by_buffer", "_factory", "_lock")

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._by_buffer: weakref.WeakKeyDictionary[Buffer, dict[str, T]] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    def get(self, buf: Buffer, api: str) -> T:
        """The value of ``buf`` for ``api``, made on first use."""
        with self._lock:
            per = self._by_buffer.get(buf)
            if per is None:
                per = self._by_buffer[buf] = {}
            got = per.get(api)
            if got is None:
                got = per[api] = self._factory()
            return got
