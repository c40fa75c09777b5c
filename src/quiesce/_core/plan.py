"""Edit plans (seed 002): what a model-driven editor asks the buffer to do.

A plan is validated for shape when it is built (types, empty ids, an id
targeted by two conflicting ops); whether it is *allowed* is decided by the
buffer against its head, all or nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Required, TypedDict

from .entry import Entry, check_body, check_id, check_int, check_refs, check_text, check_turn
from .errors import InvalidArgument, InvalidType

__all__ = ["EditPlan", "Move", "Op", "Override", "Prune", "PruneOptions", "Rewrite", "Summarize"]


def _ids(values: object, what: str) -> tuple[str, ...]:
    if isinstance(values, str | bytes) or not hasattr(values, "__iter__"):
        raise InvalidType(f"{what} must be a collection of str ids, not {type(values).__name__}")
    out = tuple(values)
    for v in out:
        check_id(v, f"each id in {what}")
    if len(set(out)) != len(out):
        raise InvalidArgument(f"{what} lists an id twice")
    return out


@dataclass(frozen=True, slots=True)
class Override:
    """An explicit, logged permission: to re-admit content that matches a
    tombstone, and — in an :class:`EditPlan` whose actor is ``"host"`` — to
    create protected summaries and retract entries of any kind."""

    reason: str
    turn: int

    def __post_init__(self) -> None:
        check_text(self.reason, "override reason")
        check_int(self.turn, "override turn")


@dataclass(frozen=True, slots=True)
class Prune:
    """Remove ``id`` (at its grace point), leaving a tombstone."""

    id: str

    def __post_init__(self) -> None:
        check_id(self.id)

    def to_dict(self) -> dict[str, Any]:
        return {"op": "prune", "id": self.id}


@dataclass(frozen=True, slots=True)
class Rewrite:
    """Replace ``id``'s body (and refs, unless ``refs`` is ``None``)."""

    id: str
    body: str
    refs: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        check_id(self.id)
        check_body(self.body, "rewrite body")
        if self.refs is not None:
            object.__setattr__(self, "refs", check_refs(self.refs, self.id))

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": "rewrite",
            "id": self.id,
            "body": self.body,
            "refs": None if self.refs is None else list(self.refs),
        }


@dataclass(frozen=True, slots=True)
class Summarize:
    """Replace ``ids`` by the entry ``into``, which takes the place of the
    first covered entry in window order; the covered entries are removed at
    their grace point."""

    ids: tuple[str, ...]
    into: Entry

    def __post_init__(self) -> None:
        ids = _ids(self.ids, "summarize ids")
        if not ids:
            raise InvalidArgument("summarize needs at least one id")
        if not isinstance(self.into, Entry):
            raise InvalidType(f"summarize into must be an Entry, not {type(self.into).__name__}")
        if self.into.id in ids:
            raise InvalidArgument(f"summary id {self.into.id!r} is also a covered id")
        object.__setattr__(self, "ids", ids)

    def to_dict(self) -> dict[str, Any]:
        return {"op": "summarize", "ids": list(self.ids), "into": self.into.to_dict()}


@dataclass(frozen=True, slots=True)
class Move:
    """Move ``id`` before ``before`` (``None``: to the end). Allowed for every
    kind, immutable ones included (seed 002: constraints may be moved)."""

    id: str
    before: str | None = None

    def __post_init__(self) -> None:
        check_id(self.id)
        if self.before is not None:
            check_id(self.before, "before")
            if self.before == self.id:
                raise InvalidArgument(f"cannot move {self.id!r} before itself")

    def to_dict(self) -> dict[str, Any]:
        return {"op": "move", "id": self.id, "before": self.before}


Op = Prune | Rewrite | Summarize | Move


@dataclass(frozen=True, slots=True)
class EditPlan:
    """A model-authored plan, applied all or nothing by :meth:`Buffer.edit`.

    ``rationale`` are the ids of the reasoning that produced the plan: no op
    may touch them, and the log keeps their content. ``base`` is the version
    the planner read; an entry the plan touches that changed after it makes
    the plan a ``CONFLICT``.
    """

    ops: tuple[Op, ...]
    reason: str
    rationale: tuple[str, ...] = ()
    actor: str | None = None
    turn: int | None = None
    base: int | None = None
    override: Override | None = None

    def __init__(
        self,
        ops: Iterable[Op],
        *,
        reason: str,
        rationale: Iterable[str] = (),
        actor: str | None = None,
        turn: int | None = None,
        base: int | None = None,
        override: Override | None = None,
    ) -> None:
        if isinstance(ops, str | bytes) or not hasattr(ops, "__iter__"):
            raise InvalidType(f"ops must be a collection of ops, not {type(ops).__name__}")
        op_tuple = tuple(ops)
        if not op_tuple:
            raise InvalidArgument("an edit plan needs at least one op")
        for op in op_tuple:
            if not isinstance(op, Prune | Rewrite | Summarize | Move):
                raise InvalidType(f"not an edit op: {op!r}")
        check_text(reason, "reason")
        rationale_ids = _ids(rationale, "rationale")
        if actor is not None:
            check_id(actor, "actor")
        check_turn(turn)
        check_turn(base, "base")
        if override is not None and not isinstance(override, Override):
            raise InvalidType(f"override must be an Override, not {type(override).__name__}")
        _check_targets(op_tuple)
        object.__setattr__(self, "ops", op_tuple)
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "rationale", rationale_ids)
        object.__setattr__(self, "actor", actor)
        object.__setattr__(self, "turn", turn)
        object.__setattr__(self, "base", base)
        object.__setattr__(self, "override", override)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ops": [op.to_dict() for op in self.ops],
            "reason": self.reason,
            "rationale": list(self.rationale),
            "actor": self.actor,
            "turn": self.turn,
            "base": self.base,
            "override": None
            if self.override is None
            else {"reason": self.override.reason, "turn": self.override.turn},
        }


def _check_targets(ops: tuple[Op, ...]) -> None:
    """An id is removed by at most one op, and a removed id is not also
    rewritten or moved; an id is rewritten at most once, and moved at most once."""
    removed: set[str] = set()
    rewritten: set[str] = set()
    moved: set[str] = set()
    created: set[str] = set()
    for op in ops:
        if isinstance(op, Prune | Summarize):
            ids = (op.id,) if isinstance(op, Prune) else op.ids
            for i in ids:
                if i in removed:
                    raise InvalidArgument(f"id {i!r} is removed by two ops")
                removed.add(i)
            if isinstance(op, Summarize):
                if op.into.id in created:
                    raise InvalidArgument(f"summary id {op.into.id!r} is created twice")
                created.add(op.into.id)
        elif isinstance(op, Rewrite):
            if op.id in rewritten:
                raise InvalidArgument(f"id {op.id!r} is rewritten twice")
            rewritten.add(op.id)
        else:
            if op.id in moved:
                raise InvalidArgument(f"id {op.id!r} is moved twice")
            moved.add(op.id)
    both = removed & (rewritten | moved)
    if both:
        raise InvalidArgument(f"id {sorted(both)[0]!r} is removed and also rewritten or moved")
    if created & (removed | rewritten | moved):
        raise InvalidArgument("a summary id is also the target of another op")


class PruneOptions(TypedDict, total=False):
    """The keyword arguments of :meth:`Buffer.prune` after ``ids``: the one
    definition. The async faces' ``aprune`` (``AsyncBuffer``,
    ``RuntimeBuffer``, ``SharedBuffer``) and the recorder take them as
    ``**options`` and hand them on unchanged, so the checks and defaults are
    the buffer's."""

    reason: Required[str]  #: why (logged, and each tombstone's reason)
    actor: str | None  #: who asks (the log's actor; ``"host"`` may retract)
    turn: int | None  #: the conversation turn
