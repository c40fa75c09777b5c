"""The OpenAI Agents SDK: :class:`QuiesceSession` and :func:`quiesce_input_filter`.

What they keep true, for ``Runner.run(agent, ..., session=..., run_config=...)``:

* :class:`QuiesceSession` implements the SDK's ``Session`` protocol
  (``session_id``, ``session_settings``, ``get_items``, ``add_items``,
  ``pop_item``, ``clear_session``) over a quiesce buffer. Items are the SDK's
  Responses input items, held verbatim as each entry's structured content
  (``reasoning`` with ``encrypted_content`` and ids included). Each
  ``add_items`` is one synchronous step, so two runs sharing a session
  interleave whole batches and lose nothing. ``get_items`` returns the live
  window (entries a prune has staged for removal are already left out), with
  every ``function_call`` answered — a pruned output is replaced by a
  stand-in output carrying the note — and no ``reasoning`` item left without
  the output item that must follow it (the API refuses that). ``limit`` keeps
  the newest items, then drops a leading output whose call was cut off.
* ``pop_item`` is the host's undo: it removes the newest item whatever its
  kind — subject to the buffer's policy, which never removes a protected
  entry (a user or system message is ``INSTRUCTION``): that raises
  :class:`~quiesce.ProtectedEntry` and removes nothing. The removal leaves a
  tombstone and a log record naming ``host:openai-agents`` as actor.
* :func:`quiesce_input_filter` is the value for
  ``RunConfig(call_model_input_filter=...)``: before each model call inside a
  run it syncs the input items into the buffer (by content: input items have
  no stable ids; each held entry matches one item, a stale copy of a pruned
  item is not re-appended), runs the pruner once, and returns the pruned
  window, the note appended to the instructions.

The SDK runs on asyncio only (its runner and sessions use asyncio tasks).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any, cast

import anyio

from .._core.buffer import Buffer, Snapshot
from .._core.entry import Kind
from .._core.errors import InvalidArgument, ProtectedEntry
from .._core.records import Status
from .._runtime import RuntimeBuffer
from ..pruner import Pruner
from . import _store
from ._glue import check_setup, missing_extra, prune_round

try:
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import SessionSettings, resolve_session_limit
    from agents.run_config import CallModelData, ModelInputData
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise missing_extra("the OpenAI Agents SDK", "openai-agents") from exc

__all__ = ["QuiesceSession", "quiesce_input_filter", "render_items", "to_units"]

FRAMEWORK = "openai-agents"
ACTOR = "host:openai-agents"
STAND_IN = "[quiesce removed] this tool output was pruned; see the quiesce note"

#: (call item type, output item type) pairs tied by ``call_id``.
_PAIRS = {"function_call": "function_call_output", "custom_tool_call": "custom_tool_call_output"}
_OUTPUTS = {v: k for k, v in _PAIRS.items()}
#: Item types that are model output (they may follow a reasoning item).
_INPUT_TYPES = frozenset({*_OUTPUTS, "reasoning"})
_ROLE_KINDS = {
    "system": Kind.INSTRUCTION,
    "developer": Kind.INSTRUCTION,
    "user": Kind.INSTRUCTION,
    "assistant": Kind.REASONING,
}


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", p.get("refusal", "")))
            for p in content
            if isinstance(p, Mapping) and isinstance(p.get("text", p.get("refusal")), str)
        )
    return ""


def _item_type(index: int, item: Mapping[str, Any]) -> str:
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    if not isinstance(kind, str) or not kind:
        raise InvalidArgument(
            f"openai-agents: item {index}: needs a 'type' string or a 'role' (got {kind!r})"
        )
    return kind


def _is_output(item: Mapping[str, Any], kind: str) -> bool:
    """Whether the item is model output that may follow a reasoning item."""
    if kind == "message":
        return item.get("role") == "assistant"
    return kind not in _INPUT_TYPES


def to_units(items: Sequence[object]) -> list[_store.Unit]:
    """Responses input items read into units, all checked before any is used.

    Raises :class:`InvalidArgument` naming the item index and field (an item
    with neither ``type`` nor ``role``, a call without ``call_id``, an unknown
    role). Unknown item types are kept whole as opaque entries."""
    units: list[_store.Unit] = []
    lead: int | None = None
    for index, raw in enumerate(items):
        if not isinstance(raw, Mapping):
            raise InvalidArgument(
                f"openai-agents: item {index}: expected a dict, not {type(raw).__name__}"
            )
        item = cast(Mapping[str, Any], raw)
        kind = _item_type(index, item)
        native = dict(item)
        follows = lead if _is_output(item, kind) else None
        if kind in _PAIRS or kind in _OUTPUTS:
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                raise InvalidArgument(f"openai-agents: item {index}: {kind}.call_id is empty")
            if kind in _PAIRS:
                name = item.get("name")
                if not isinstance(name, str) or not name:
                    raise InvalidArgument(f"openai-agents: item {index}: {kind}.name is empty")
                args = item.get("arguments", item.get("input", ""))
                call = _store.Call(
                    call_id, name, args if isinstance(args, str) else json.dumps(args)
                )
                units.append(
                    _store.Unit(
                        None, Kind.TOOL_CALL, "", native, calls=(call,), bare=True, lead=follows
                    )
                )
            else:
                output = item.get("output")
                text = output if isinstance(output, str) else _text_of(output)
                result = _store.Result(call_id, text)
                units.append(
                    _store.Unit(None, Kind.TOOL_OUTPUT, text, native, results=(result,), bare=True)
                )
        elif kind == "message":
            role = item.get("role")
            k = _ROLE_KINDS.get(role) if isinstance(role, str) else None
            if k is None:
                raise InvalidArgument(f"openai-agents: item {index}: unknown message.role {role!r}")
            units.append(_store.Unit(None, k, _text_of(item.get("content")), native, lead=follows))
        elif kind == "reasoning":
            summary = _text_of(item.get("summary"))
            units.append(_store.Unit(None, Kind.REASONING, summary, native))
        else:  # hosted tools and future item types: kept whole, opaque
            units.append(_store.Unit(None, Kind.REASONING, "", native, lead=follows))
        if kind == "reasoning":
            lead = len(units) - 1
        elif not _is_output(item, kind):
            lead = None
    return units


def _item(slot: _store.Slot) -> dict[str, Any]:
    """The item a slot shows: its own dump, or for a text slot (a summary, a
    rewritten item) a plain item of its kind."""
    if slot.native is not None:
        return cast(dict[str, Any], slot.native)
    if slot.calls:
        c = slot.calls[0]
        return {
            "type": "function_call",
            "call_id": c.call_id,
            "name": c.name,
            "arguments": c.arguments,
        }
    if slot.results:
        return {"type": "function_call_output", "call_id": slot.results[0], "output": slot.text}
    role = "assistant" if slot.kind in (Kind.REASONING, Kind.RATIONALE, Kind.SUMMARY) else "user"
    return {"role": role, "content": slot.text}


def _kind(item: Mapping[str, Any]) -> str:
    return str(item.get("type", "message"))


def _paired(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every call answered (a stand-in output after its run of calls and
    outputs), no output without its call, and no reasoning item without the
    output item that must follow it. O(n)."""
    out: list[dict[str, Any]] = []
    open_calls: dict[str, str] = {}  # call id -> output type, calls not answered yet
    shown: set[str] = set()

    def close() -> None:
        for call_id, output_type in open_calls.items():
            out.append({"type": output_type, "call_id": call_id, "output": STAND_IN})
        open_calls.clear()

    for item in items:
        kind, call_id = _kind(item), item.get("call_id")
        if kind in _OUTPUTS:
            if open_calls.pop(str(call_id), None) is None:
                continue  # its call is not shown, or it is already answered
        elif kind in _PAIRS:
            if call_id in shown:
                continue
            shown.add(str(call_id))
            open_calls[str(call_id)] = _PAIRS[kind]
        else:
            close()
        out.append(item)
    close()
    return [
        item
        for i, item in enumerate(out)
        if _kind(item) != "reasoning"
        or (i + 1 < len(out) and _is_output(out[i + 1], _kind(out[i + 1])))
    ]


def render_items(snap: Snapshot, *, exclude: Collection[str] = ()) -> list[dict[str, Any]]:
    """The window of ``snap`` as Responses input items, paired (see
    :func:`_paired`), leaving out the entries in ``exclude``. O(n)."""
    return _paired([_item(s) for s in _store.window(snap) if s.unit not in exclude])


class QuiesceSession:
    """An Agents SDK ``Session`` held in a quiesce buffer (see the module docstring).

    ``session_id`` names the session; ``buffer`` holds it (one buffer per
    session); ``pruner`` runs once before each ``get_items`` (the SDK reads
    the history before each run). All methods are checkpoints.
    """

    session_settings: SessionSettings | None = None

    def __init__(self, session_id: str, buffer: Buffer, *, pruner: Pruner | None = None) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise InvalidArgument("QuiesceSession: session_id must be a non-empty str")
        check_setup(buffer, pruner, "QuiesceSession")
        self.session_id = session_id
        self.buffer = buffer
        self.pruner = pruner

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The live history, oldest first; the newest ``limit`` items if given
        (a leading output whose call was cut off is dropped too)."""
        await prune_round(self.buffer, self.pruner)
        await anyio.lowlevel.checkpoint()
        n = resolve_session_limit(limit, self.session_settings)
        with self.buffer.snapshot() as snap:
            items = render_items(snap, exclude=set(self.buffer.staged()))
        if n is not None:
            items = _paired(items[-n:] if n > 0 else [])
        return cast(list[TResponseInputItem], items)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` as one synchronous step (atomic with respect to
        other coroutines on the loop). Bad items raise :class:`InvalidArgument`
        and nothing is appended."""
        await anyio.lowlevel.checkpoint()
        units = to_units(items)
        # Every item added is new: give each its own id, no content matching.
        base = f"{self.session_id}:{self.buffer.version}."
        fresh = [
            _store.Unit(f"{base}{i}", u.kind, u.body, u.native, u.calls, u.results, u.bare, u.lead)
            for i, u in enumerate(units)
        ]
        _store.sync_units(self.buffer, fresh, framework=FRAMEWORK)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item, or ``None`` if there is none.

        The removal is a prune by ``host:openai-agents``: tombstoned at once,
        or staged (and already left out of :meth:`get_items`) while a reader
        still pins it. A protected item (a user or system message, or one the
        policy's classifier protects) raises :class:`ProtectedEntry`.
        Cancellation: the prune is applied or not as a whole."""
        with self.buffer.snapshot() as snap:
            staged = set(self.buffer.staged())
            slots = [s for s in _store.window(snap) if s.unit not in staged]
        if not slots:
            await anyio.lowlevel.checkpoint()
            return None
        newest = slots[-1]
        report = await _prune(self.buffer, [newest.unit], reason="pop_item")
        outcome = report[newest.unit]
        if outcome.status not in (Status.PRUNED, Status.DEFERRED):
            raise ProtectedEntry(
                f"pop_item: the newest item {newest.unit!r} is protected by the buffer's "
                f"policy ({outcome.refusal.name if outcome.refusal else outcome.status.name})"
            )
        return cast(TResponseInputItem, _item(newest))

    async def clear_session(self) -> None:
        """Prune every item, as ``host:openai-agents``. Protected items (user
        and system messages) stay: the buffer never removes them."""
        with self.buffer.snapshot() as snap:
            ids = [e.id for e in snap]
        if ids:
            await _prune(self.buffer, ids, reason="clear_session")
        else:
            await anyio.lowlevel.checkpoint()


async def _prune(buf: Buffer, ids: list[str], *, reason: str) -> Any:
    if isinstance(buf, RuntimeBuffer):
        return await buf.aprune(ids, reason=reason, actor=ACTOR)
    return await anyio.to_thread.run_sync(
        lambda: buf.prune(ids, reason=reason, actor=ACTOR), abandon_on_cancel=False
    )


def quiesce_input_filter(
    buffer: Buffer, *, pruner: Pruner | None = None
) -> Callable[[CallModelData[Any]], Awaitable[ModelInputData]]:
    """The value for ``RunConfig(call_model_input_filter=...)``.

    Before each model call: sync the input items into ``buffer`` (by content,
    see the module docstring), run ``pruner`` once, and return the pinned
    window's items with the quiesce note appended to the instructions.
    """
    check_setup(buffer, pruner, "quiesce_input_filter")

    async def call_model_input_filter(data: CallModelData[Any]) -> ModelInputData:
        _store.sync_units(
            buffer, to_units(data.model_data.input), framework=FRAMEWORK, new_ids="oa:"
        )
        await prune_round(buffer, pruner)
        with buffer.snapshot() as snap:
            items = render_items(snap)
            note = _store.notes(snap, framework=FRAMEWORK)
        instructions = data.model_data.instructions
        if note is not None:
            instructions = note if not instructions else f"{instructions}\n\n{note}"
        return ModelInputData(
            input=cast(list[TResponseInputItem], items), instructions=instructions
        )

    return call_model_input_filter
