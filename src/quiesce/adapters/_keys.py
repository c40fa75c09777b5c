"""Ids: content keys for messages without a foreign id, and the reserved ``#``.

What it keeps true (the rules are in :mod:`quiesce.adapters._common`): no
foreign id contains :data:`RESERVED` and every generated id does, so the
two never collide; the same message read again gets the same key
(:func:`fingerprint` ignores :data:`HINTS` and the empty fields an SDK's
dump adds); :class:`Keys` numbers identical messages without gaps and
never reuses a number the buffer used, so finding the keys of one content
is a probe of ``n = 0, 1, ...``, never a pass over the buffer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping

from .._core.entry import canonical_json
from .._core.version import Version

__all__ = ["HINTS", "PLACEHOLDER_IDS", "RESERVED", "Keys", "fingerprint"]

#: The character no foreign id may contain; every generated id contains it.
RESERVED = "#"

#: Ids a framework puts on items that are not really theirs: never an
#: identity (the OpenAI Agents SDK's ``FAKE_RESPONSES_ID`` on every item it
#: converts from Chat Completions). Such an item is stored under a generated
#: id and its own ``id`` field is kept verbatim.
PLACEHOLDER_IDS = frozenset({"__fake_id__"})

#: Keys that are hints to the API, not content: a framework may move them
#: between turns (Anthropic prompt caching marks the latest block), so they do
#: not count in a message's fingerprint. The entry keeps them all the same.
HINTS = frozenset({"cache_control"})


def fingerprint(value: object) -> str:
    """16 hex digits of sha256 of ``value``'s canonical JSON, :data:`HINTS`
    left out at every depth, and so is every field whose value is ``None``,
    ``[]`` or ``{}`` (what an SDK's ``model_dump()`` adds: ``refusal: None``,
    ``annotations: []``…): a message sent back with its dump's defaults is
    the message it was."""
    return hashlib.sha256(canonical_json(_without_noise(value)).encode("utf-8")).hexdigest()[:16]


def _empty(value: object) -> bool:
    return value is None or (isinstance(value, Mapping | list | tuple) and not value)


def _without_noise(value: object) -> object:
    if isinstance(value, Mapping):
        return {k: _without_noise(v) for k, v in value.items() if k not in HINTS and not _empty(v)}
    if isinstance(value, list | tuple):
        return [_without_noise(v) for v in value]
    return value


class Keys:
    """Keys for messages without a foreign id: ``#<fingerprint>.<n>``.

    Three modes. No buffer (a list read as a whole, as ``to_entries`` does):
    ``n`` counts identical messages earlier in the list. ``append`` (a
    ``head``): ``n`` is the first number no entry of ``head`` uses, new
    messages are always new. ``sync`` (a ``head`` and ``sync=True``): the
    identical messages of a history are the buffer's entries of that
    content, *live ones first* (in the order they were made), then pruned
    ones, then new keys — so identical messages never shift keys when an
    earlier copy disappears from the history (a framework that follows the
    rendered window drops the pruned copy); ``used`` (the keys of a
    history's prefix already matched) are skipped, and with ``gone`` (the
    keys the last history held past that prefix) only those pruned keys are
    candidates: a pruned copy the framework already dropped cannot come
    back as a new identical message.

    The numbers of one content are allocated without gaps (the first unused
    one, and ids are never reused), so the keys of a content are found by
    probing ``n = 0, 1, ...`` until one is unused: O(k log n) for k
    identical messages, never a pass over the buffer.
    """

    __slots__ = ("_counts", "_found", "_gone", "_head", "_sync", "_used")

    def __init__(
        self,
        head: Version | None = None,
        *,
        sync: bool = False,
        used: Collection[str] = (),
        gone: Collection[str] | None = None,
    ) -> None:
        self._counts: dict[str, int] = {}
        self._head = head
        self._sync = sync and head is not None
        self._used = used
        self._gone = gone
        #: per fingerprint: (live keys, pruned keys, next unused number)
        self._found: dict[str, tuple[list[str], list[str], int]] = {}

    def _state(self, key: str) -> bool | None:
        """``True``: an entry of message ``key`` is live; ``False``: only
        pruned ones; ``None``: no entry ever had it."""
        head = self._head
        assert head is not None
        live, tombs = head.live, head.tombs.by_id
        first = f"{key}{RESERVED}0"
        if key in live or first in live:
            return True
        if key in tombs or first in tombs:
            return False
        return None

    def _probe(self, fp: str) -> tuple[list[str], list[str], int]:
        found = self._found.get(fp)
        if found is None:
            live: list[str] = []
            dead: list[str] = []
            n = 0
            while True:
                key = f"{RESERVED}{fp}.{n}"
                state = self._state(key)
                if state is None:
                    break
                (live if state else dead).append(key)
                n += 1
            found = self._found[fp] = (live, dead, n)
        return found

    def __call__(self, message: object) -> str:
        fp = fingerprint(message)
        n = self._counts.get(fp, 0)
        self._counts[fp] = n + 1
        if self._head is None:
            return f"{RESERVED}{fp}.{n}"
        live, dead, free = self._probe(fp)
        if self._sync:
            if self._gone is not None:
                dead = [key for key in dead if key in self._gone]
            cands = [key for key in (*live, *dead) if key not in self._used]
            if n < len(cands):
                return cands[n]
        self._found[fp] = (live, dead, free + 1)
        return f"{RESERVED}{fp}.{free}"

