"""The one adapter skeleton: what ``to_entries``, ``append_messages``,
``sync_messages``, ``render`` and ``append_stream`` do for every API, given
that API's reader, renderer and stream reader.

An API module (:mod:`~quiesce.adapters.openai`,
:mod:`~quiesce.adapters.responses`, :mod:`~quiesce.adapters.anthropic`)
holds only what is its API's: how a message (or item) splits into entries
(its *reader*), how a window's entries become its messages again (its
*renderer*), its validation rules, and its word for what it reads. It binds
an :class:`Adapter` to them; its public functions keep their own signatures
and docstrings and hand the work to the adapter.

What it keeps true, for every API alike:

* **Validation before anything is written.** A reader validates the whole
  list (errors name the ``message``/``item`` index and field) before
  :func:`~quiesce.adapters._admit.admit` decides every re-admission and
  appends the batch as one version; an error leaves the head unchanged.
* **The same reading everywhere.** ``to_entries`` (no buffer: counting
  content keys), ``append_messages`` (keys no entry of the head used),
  ``sync_messages`` (keys matching the buffer's, live ones first) and the
  streams (:meth:`Adapter.read`) read through one checked reader, so one
  message gets the same entries on every path.
* **One stream driver.** ``append_stream`` runs the API's stream reader
  through :func:`~quiesce.adapters._stream.run_stream` (checks, the sink,
  aborting on any exception); the reader returns the API's final form.
* **Render options checked, windows cached.** ``render`` checks the note
  options, and a window rendered again for the same version is the cached
  JSON text (:func:`~quiesce.adapters._window.render_with`); a renderer is
  handed a :class:`~quiesce.adapters._window.Window` and never reads a
  buffer.

The skeleton adds one call per public call and no per-message or per-event
work: the per-turn cost (a no-op sync and a render) is the shared helpers',
a stream's per-event cost its reader's. Nothing here touches a disk; only
:meth:`Adapter.stream` awaits (the driver's checkpoints and the events).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from functools import partial
from typing import Any, Generic, TypeVar

from .._core.buffer import Buffer, Snapshot
from .._core.entry import Entry, Kind
from ._admit import Read, SyncReport, read_and_admit, read_entries
from ._checks import NOUN, check_kind
from ._stream import ReaderFactory, renderable, run_stream
from ._sync import sync_history
from ._window import Window, render_options

__all__ = ["Adapter"]

_W = TypeVar("_W")
_F = TypeVar("_F")

#: An API's reader: ``reader(messages, *, head, keys, calls, turn,
#: user_kind, assistant_kind, start=0, prev=None, rewritable=(), first=True)``
#: (and ``system=`` for an API with a system prompt), returning one
#: :class:`~quiesce.adapters._admit.Read` per message.
ApiReader = Callable[..., list[Read]]


class Adapter(Generic[_W, _F]):
    """An API's adapter: its ``name`` (``meta["api"]`` of what it reads, and
    the default actor ``quiesce.adapters.<name>``), its ``noun`` in errors,
    its reader, its renderer (a :class:`~quiesce.adapters._window.Window`
    to what ``render`` returns, ``_W``) and its stream reader (what
    ``append_stream`` runs over a :class:`~quiesce.adapters._stream.Sink`,
    returning ``_F``). ``system``: the API takes a system prompt beside its
    messages (Anthropic), passed to the reader as ``system=``. Immutable
    once made; one per API module."""

    __slots__ = ("_read", "_render", "_stream", "name", "noun", "system")

    def __init__(
        self,
        name: str,
        read: ApiReader,
        render: Callable[[Window], _W],
        stream: ReaderFactory[_F],
        *,
        noun: str = "message",
        system: bool = False,
    ) -> None:
        self.name = name
        self.noun = noun
        self.system = system
        self._read = read
        self._render = render
        self._stream = stream

    def read(
        self, messages: object, *, user_kind: Kind, assistant_kind: Kind, **options: Any
    ) -> list[Read]:
        """The API's reader with the kinds checked and errors worded with
        :attr:`noun`: what every path reads through (the streams too).
        O(size of ``messages``)."""
        check_kind(user_kind, "user_kind")
        check_kind(assistant_kind, "assistant_kind")
        token = NOUN.set(self.noun)
        try:
            return self._read(
                messages, user_kind=user_kind, assistant_kind=assistant_kind, **options
            )
        finally:
            NOUN.reset(token)

    def _options(
        self, turn: int | None, user_kind: Kind, assistant_kind: Kind, system: object
    ) -> dict[str, Any]:
        options: dict[str, Any] = {
            "turn": turn,
            "user_kind": user_kind,
            "assistant_kind": assistant_kind,
        }
        if self.system:
            options["system"] = system
        return options

    def to_entries(
        self,
        messages: object,
        turn: int | None,
        user_kind: Kind,
        assistant_kind: Kind,
        calls: Collection[str],
        system: object = None,
    ) -> list[Entry]:
        """``to_entries``: read without a buffer, deterministic ids."""
        options = self._options(turn, user_kind, assistant_kind, system)
        return read_entries(partial(self.read, messages, **options), calls)

    def admit(
        self,
        buf: Buffer,
        messages: object,
        readmit: object,
        turn: int | None,
        actor: str | None,
        user_kind: Kind,
        assistant_kind: Kind,
        system: object = None,
        *,
        sync: bool,
    ) -> SyncReport:
        """``append_messages`` (``sync=False``: read against the head with
        keys no entry used, then admitted; its report's ``version`` is what
        it returns) or ``sync_messages`` (``sync=True``:
        :func:`~quiesce.adapters._sync.sync_history` with this API's
        reader)."""
        options = self._options(turn, user_kind, assistant_kind, system)
        if not sync:
            read = partial(self.read, messages, **options)
            return read_and_admit(
                buf, read, api=self.name, readmit=readmit, turn=turn, sync=False, actor=actor
            )
        return sync_history(
            buf,
            messages,
            partial(self.read, **options),
            api=self.name,
            readmit=readmit,
            turn=turn,
            actor=actor,
            noun=self.noun,
            system=system,
        )

    async def stream(
        self,
        buf: object,
        events: object,
        readmit: object,
        turn: int | None,
        actor: str | None,
        assistant_kind: Kind,
    ) -> _F:
        """``append_stream``: the API's stream reader run over ``events``
        (:func:`~quiesce.adapters._stream.run_stream`: every open entry
        aborted on any exception, cancellation included). Per event: the
        reader's ``handle``, nothing added here."""
        return await run_stream(
            buf,
            events,
            self._stream,
            api=self.name,
            readmit=readmit,
            turn=turn,
            actor=actor,
            assistant_kind=assistant_kind,
        )

    def render(
        self,
        source: Snapshot | Buffer,
        annotate_stale: bool,
        tombstone_notes: bool,
        note_names: int,
        note_limit: int,
    ) -> _W:
        """``render``: the note options checked, then the renderer of the
        snapshot's window (cached per version and options)."""
        return render_options(
            source,
            self._window,
            self.name,
            annotate_stale=annotate_stale,
            tombstone_notes=tombstone_notes,
            note_names=note_names,
            note_limit=note_limit,
        )

    def _window(
        self,
        snap: Snapshot,
        *,
        annotate_stale: bool,
        tombstone_notes: bool,
        note_names: int,
        note_limit: int,
    ) -> _W:
        window = Window.of(
            snap,
            renderable(snap.entries()),
            annotate_stale=annotate_stale,
            tombstone_notes=tombstone_notes,
            note_names=note_names,
            note_limit=note_limit,
        )
        return self._render(window)
