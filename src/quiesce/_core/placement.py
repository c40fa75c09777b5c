"""Placement: where an edit plan's summaries and moves go in the window
order, and which orders a move would break.

What it keeps true: order keys stay unique and strictly ordered —
:func:`place` takes midpoints found by bisection (O(log n + ops) per op)
and renumbers every key, O(n), in the rare case float precision runs out
between two neighbours; a move is refused (:func:`placement_refusals`,
:func:`move_refusals`) if it would put a tool result before its call, or
split a reasoning turn from its items (the APIs refuse both). Nothing here
publishes or locks: the editor (:mod:`.edit`) calls it under the write
lock, on a :class:`~.draft.Draft` of the next version.

Cancellation: nothing here awaits.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Callable, Container, Mapping, Sequence

from .draft import Draft
from .entry import Entry, Kind
from .plan import Move, Summarize
from .records import Refusal
from .version import Slot, Version

__all__ = ["anchors_turn", "move_refusals", "place", "placement_refusals"]


def _key_between(lo: float | None, hi: float | None) -> float | None:
    """An order key strictly between ``lo`` and ``hi`` (``None``: unbounded),
    or ``None`` when float precision leaves no room (the caller renumbers)."""
    if lo is None and hi is None:
        return 0.0
    if lo is None:
        assert hi is not None
        return hi - 1.0
    if hi is None:
        return lo + 1.0
    mid = (lo + hi) / 2.0
    return mid if lo < mid < hi else None


def anchors_turn(e: Entry) -> bool:
    """Whether ``e`` is reasoning that must stay in front of the items of its
    turn: a signed block (:attr:`Entry.sealed`) or a reasoning item / thinking
    block of a chat API (the adapters keep it in ``content``, and make every
    other item of its turn cite it). O(1)."""
    if e.sealed:
        return True
    c = e.content
    return isinstance(c, Mapping) and c.get("type") in _REASONING_TYPES


_REASONING_TYPES = frozenset({"reasoning", "thinking", "redacted_thinking"})


def move_refusals(head: Version, e: Entry) -> list[tuple[Refusal, str]]:
    """Why ``e`` itself may not be moved (before any placement is worked
    out), all ``IMMUTABLE`` (a reasoning turn's order is fixed): a signed
    block (its signature covers the turn as the provider sent it), unsigned
    reasoning, and an item of a reasoning turn (it cites the reasoning) — the
    APIs refuse reasoning that is not followed by the items of its turn.
    O(len(e.refs))."""
    if e.sealed:
        return [(Refusal.IMMUTABLE, f"{e.id!r} is signed by its provider: it cannot be moved")]
    if anchors_turn(e):
        return [(Refusal.IMMUTABLE, f"reasoning {e.id!r} must stay before the items of its turn")]
    live = head.live
    for ref in e.refs:
        slot = live.get(ref)
        if slot is not None and anchors_turn(slot.entry):
            return [
                (
                    Refusal.IMMUTABLE,
                    f"{e.id!r} belongs to the turn of reasoning {ref!r}: it cannot be moved "
                    "away from it",
                )
            ]
    return []


def placement_refusals(
    head: Version,
    summaries: Sequence[tuple[Summarize, tuple[str, ...]]],
    moves: Sequence[Move],
    removed: Container[str] = (),
) -> list[tuple[Refusal, str]]:
    """The orders a plan's moves would break, worked out on the window order
    the plan would publish (the head's, with the summaries inserted and the
    moves applied; removals do not change the order of what survives, and
    what the plan itself removes — ``removed`` — breaks no order):

    * ``REFERENCED``: a ``TOOL_OUTPUT`` before a ``TOOL_CALL`` it cites (a
      tool result before its call), or a moved call after one of its outputs;
    * ``IMMUTABLE``: a moved entry landing inside a reasoning turn — just
      before an item that cites the turn's reasoning (it would split
      reasoning from the items it precedes).

    One move and no summary (the common plan): O(refs + citers), from the
    order keys — the moved entry lands right before its target, so any
    other entry precedes it exactly when its key is below the target's.
    Otherwise O(n + moves · n) for the window order."""
    live = head.live
    if not summaries and len(moves) == 1 and moves[0].before != moves[0].id:
        mv = moves[0]
        target = None if mv.before is None else live[mv.before].key

        def before_moved(i: str) -> bool:  # i (not the moved one) precedes it
            return target is None or live[i].key < target

        return _order_refusals(head, mv, before_moved, mv.before, removed)
    order = head.ordered_ids()
    for op, covered in summaries:
        cover = set(covered)
        at = next(idx for idx, i in enumerate(order) if i in cover)
        order.insert(at, op.into.id)
    for mv in moves:
        order.remove(mv.id)
        order.insert(len(order) if mv.before is None else order.index(mv.before), mv.id)
    pos = {i: n for n, i in enumerate(order)}
    out: list[tuple[Refusal, str]] = []
    for mv in moves:
        at = pos[mv.id]

        def precedes(i: str, at: int = at) -> bool:
            return pos.get(i, at + 1) < at

        nxt = order[at + 1] if at + 1 < len(order) else None
        out.extend(_order_refusals(head, mv, precedes, nxt, removed))
    return out


def _order_refusals(
    head: Version,
    mv: Move,
    precedes: Callable[[str], bool],
    following: str | None,
    removed: Container[str] = (),
) -> list[tuple[Refusal, str]]:
    """:func:`placement_refusals` for one move, given whether an entry
    precedes the moved one in the new order and the id right after it; an
    entry in ``removed`` (the plan removes it) breaks no order.
    O(refs + citers)."""
    live = head.live
    out: list[tuple[Refusal, str]] = []
    if mv.id in removed:
        return out
    e = live[mv.id].entry
    if e.kind is Kind.TOOL_OUTPUT:
        for ref in e.refs:
            slot = live.get(ref)
            if slot is not None and slot.entry.kind is Kind.TOOL_CALL and not precedes(ref):
                why = f"moving {mv.id!r} would put it before its call {ref!r}"
                out.append((Refusal.REFERENCED, why))
    elif e.kind is Kind.TOOL_CALL:
        for c in head.cited_by(mv.id):
            if c not in removed and live[c].entry.kind is Kind.TOOL_OUTPUT and precedes(c):
                why = f"moving {mv.id!r} would put it after its result {c!r}"
                out.append((Refusal.REFERENCED, why))
    if following is not None:
        nxt = live.get(following)
        if nxt is not None and any(
            (s := live.get(r)) is not None and anchors_turn(s.entry) for r in nxt.entry.refs
        ):
            out.append(
                (
                    Refusal.IMMUTABLE,
                    f"moving {mv.id!r} before {nxt.entry.id!r} would split the reasoning "
                    "of that turn from its items",
                )
            )
    return out


def place(
    head: Version,
    draft: Draft,
    summaries: Sequence[tuple[Summarize, tuple[str, ...]]],
    moves: Sequence[Move],
    keys: dict[str, float],
    n: int,
) -> set[str] | None:
    """Insert summaries and apply moves in window order, filling ``keys`` with
    every new order key. Returns ``None``, or the ids the plan placed when the
    float gap was exhausted and every key was renumbered.

    Each placement takes the midpoint between the new neighbours' keys,
    found by bisecting the head's chunked view (``Version.key_before``) and the
    keys placed earlier in the plan: O(log n + ops) per op, no other key
    changes. Only when a gap has no float left between its ends (about 50
    placements into one gap) does it fall back to :func:`_place_renumbering`,
    O(n)."""
    live = head.live
    key_of: dict[str, float] = {}
    placed_keys: list[float] = []  # sorted keys given by this plan so far
    gone: set[str] = set()  # ids whose slot in the head's view is not their place

    def current(i: str) -> float:
        got = key_of.get(i)
        return got if got is not None else live[i].key

    def key_before(hi: float) -> float | None:
        """The greatest current key below ``hi``."""
        a = head.key_before(hi, gone)
        j = bisect_left(placed_keys, hi) - 1
        b = placed_keys[j] if j >= 0 else None
        return b if a is None else a if b is None else max(a, b)

    def put(i: str, hi: float | None) -> bool:
        key = _key_between(key_before(math.inf if hi is None else hi), hi)
        if key is None:
            return False
        key_of[i] = key
        insort(placed_keys, key)
        return True

    for op, covered in summaries:
        if not put(op.into.id, min(current(i) for i in covered)):
            return _place_renumbering(head, draft, summaries, moves, keys, n)
    for mv in moves:
        old = key_of.pop(mv.id, None)
        if old is not None:
            placed_keys.remove(old)
        gone.add(mv.id)
        if not put(mv.id, None if mv.before is None else current(mv.before)):
            return _place_renumbering(head, draft, summaries, moves, keys, n)
    for op, _covered in summaries:
        draft.add(op.into, key_of[op.into.id], n)
    for i, key in key_of.items():
        draft.set_key(i, key, n)
        keys[i] = key
    return None


def _place_renumbering(
    head: Version,
    draft: Draft,
    summaries: Sequence[tuple[Summarize, tuple[str, ...]]],
    moves: Sequence[Move],
    keys: dict[str, float],
    n: int,
) -> set[str] | None:
    """:func:`place` on a list of the whole window order, renumbering every
    key when a gap is exhausted. O(n)."""
    order = head.ordered_ids()
    key_of: dict[str, float] = {}
    placed: set[str] = set()
    ok = True

    def k(i: str) -> float:
        got = key_of.get(i)
        return got if got is not None else head.live[i].key

    def put(i: str, index: int) -> None:
        nonlocal ok
        order.insert(index, i)
        placed.add(i)
        if not ok:
            return  # every key is renumbered below; only the order matters now
        lo = k(order[index - 1]) if index > 0 else None
        hi = k(order[index + 1]) if index + 1 < len(order) else None
        key = _key_between(lo, hi)
        if key is None:
            ok = False
        else:
            key_of[i] = key

    for op, covered in summaries:
        cover = set(covered)
        first = next(idx for idx, i in enumerate(order) if i in cover)
        put(op.into.id, first)
        draft.add(op.into, key_of.get(op.into.id, 0.0), n)
    for mv in moves:
        order.remove(mv.id)
        index = len(order) if mv.before is None else order.index(mv.before)
        put(mv.id, index)
    if ok:
        for i, key in key_of.items():
            draft.set_key(i, key, n)
            keys[i] = key
        return None
    # Renumber every key in the new order (rare: ~50 halvings of one gap).
    draft.reordered = True  # slots written directly: the new view sorts
    for idx, i in enumerate(order):
        slot: Slot = draft.live[i]
        draft.live[i] = Slot(slot.entry, float(idx), n if i in placed else slot.changed)
        keys[i] = float(idx)
    draft.next_key = float(len(order))
    return placed
