"""Graph helpers: how the removal of some entries bears on the entries around them.

What it keeps true: these are pure functions of one immutable
:class:`~.version.Version` and the ids asked about; they change nothing and
read no disk (a tombstone they look up must have been read back before the
write lock, :func:`sealed_lookups`). The prune, edit and removal paths ask
them under the write lock, replay asks them too, so one answer holds for a
live buffer and for its recovered copy.

* :func:`components` — the transactions: ids that cite each other are
  removed together;
* :func:`cascade` — a refused id survives, so whatever it cites is refused
  too (``REFERENCED``);
* :func:`sealed_conflicts` (with :func:`sealed_lookups`) — signed reasoning
  and the turn that carries it leave together.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from .entry import Kind, result_id
from .records import Refusal
from .version import Version

__all__ = ["cascade", "components", "sealed_conflicts", "sealed_lookups"]


def components(head: Version, ids: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """Connected components of ``ids`` under refs (either direction), each in
    request order: ids that cite each other are removed as one transaction."""
    parent = {i: i for i in ids}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i in ids:
        for ref in head.live[i].entry.refs:
            if ref in parent:
                a, b = find(i), find(ref)
                if a != b:
                    parent[a] = b
    comps: dict[str, list[str]] = {}
    for i in ids:
        comps.setdefault(find(i), []).append(i)
    return [tuple(c) for c in comps.values()]


def cascade(head: Version, removal: Mapping[str, Any], refused: dict[str, Refusal]) -> list[str]:
    """Refuse (``REFERENCED``) every id in ``removal`` cited by an entry that
    survives; a refused id survives, so what it cites is rechecked (the
    cascade). Fills ``refused``; returns the ids to drop from ``removal``.
    O(removal + their referrers)."""
    keep: set[str] = set(removal)
    stack = list(removal)
    dropped: list[str] = []
    while stack:
        i = stack.pop()
        if i not in keep:
            continue
        for r in head.cited_by(i):
            if r not in keep:
                keep.discard(i)
                refused[i] = Refusal.REFERENCED
                dropped.append(i)
                stack.extend(ref for ref in head.live[i].entry.refs if ref in keep)
                break
    return dropped


def sealed_lookups(head: Version, removing: Iterable[str]) -> list[str]:
    """The tombstone ids :func:`sealed_conflicts` may look up for removing
    ``removing``: the results (``result_id``) of the tool calls citing a
    live sealed entry among them — for a caller to read back before the
    write lock (issue 21). From memory, O(removing · citers); empty when
    nothing in ``removing`` is sealed."""
    live = head.live
    out: list[str] = []
    for i in removing:
        slot = live.get(i)
        if slot is None or not slot.entry.sealed:
            continue
        for c in head.cited_by(i):
            call = live.get(c)
            if call is not None and call.entry.kind is Kind.TOOL_CALL:
                out.append(result_id(c))
    return out


def sealed_conflicts(head: Version, removing: Collection[str]) -> dict[str, str]:
    """The ids in ``removing`` that must stay because of signed reasoning,
    each with why. A sealed entry and the live entries citing it (its turn:
    the adapters make every other block of an assistant turn cite the turn's
    signed blocks) leave together:

    * a sealed entry stays while a ``TOOL_CALL`` citing it has no result —
      no live ``TOOL_OUTPUT`` citing it and no tombstone of
      ``result_id(call)`` (the call still awaits its result: the API rejects
      a tool loop whose signed block went missing);
    * an entry stays if removing it would leave a surviving sealed entry it
      cites with no live entry citing it (a signed block alone, without its
      turn).

    O(removing · refs · citers). Returns an empty dict when nothing in
    ``removing`` touches sealed content (the common case: one ``refs`` scan).
    """
    out: dict[str, str] = {}
    remaining = dict.fromkeys(removing)
    while True:  # to a fixpoint: an id kept may make another one stay
        found = _sealed_pass(head, remaining)
        if not found:
            return out
        for i, why in found.items():
            out[i] = why
            del remaining[i]


def _sealed_pass(head: Version, removing: Collection[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    live = head.live
    for i in removing:
        slot = live.get(i)
        if slot is None:
            continue
        e = slot.entry
        if e.sealed:
            for c in head.cited_by(i):
                call = live[c].entry
                if (
                    call.kind is Kind.TOOL_CALL
                    and result_id(c) not in head.tombs.by_id
                    and not any(live[r].entry.kind is Kind.TOOL_OUTPUT for r in head.cited_by(c))
                ):
                    out[i] = f"{i!r} is signed reasoning whose tool call {c!r} awaits its result"
                    break
        for ref in e.refs:
            target = live.get(ref)
            if target is None or ref in removing or not target.entry.sealed:
                continue
            if all(c in removing for c in head.cited_by(ref)):
                out[i] = f"removing {i!r} would leave the signed reasoning {ref!r} without its turn"
    return out
