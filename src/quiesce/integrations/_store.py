"""Framework messages ⇄ entries, by identity: what every integration keeps true.

Each framework message is read into a :class:`Unit`. A unit becomes entries:

* its **container** entry (id ``unit.id``): the message's text (for the
  policy's classifier) as body, its kind, and as structured ``content`` the
  framework's *own* JSON dump of the whole message, so rendering gives back the
  framework's object unchanged — signed thinking blocks, images, ids, provider
  fields included (nothing is re-encoded through another API's shapes). The
  dump is part of the content hash, so two messages with the same text are
  not mistaken for a re-admission; a re-run *call* is, by its key;
* one ``TOOL_CALL`` entry per tool call (id ``<unit>/<call id>``, ``key`` the
  tool name plus its arguments, so running the same call again after it was
  pruned is a re-admission), citing its container: a call goes with its turn;
* one ``TOOL_OUTPUT`` entry per tool result, citing the call it answers (and
  its container): the pair is pruned together or not at all.

A unit that *is* one result (a LangChain ``ToolMessage``) is ``bare``: that
one entry carries the dump. (The Agents SDK's Responses items go through
:mod:`quiesce.adapters.responses` instead.)

:func:`sync_units` is idempotent: a unit whose id the buffer holds, live or
tombstoned, is not appended again (a framework handing its stale copy of a
pruned message back does not resurrect it). New units are checked whole before
anything is appended; a re-run of a pruned call (its key or content matches a
tombstone) is *recorded* with an automatic ``Override`` by default
(``readmit="record"``, the adapters' policy): the call already happened.

:func:`window` reads a snapshot back into slots (native dump, live calls, live
results) in window order, and :func:`notes` the note of removals and stale
marks, in the adapters' escaped note format (no reason, id or actor can forge
a note line). Framework messages are given back byte for byte, so text in them
that imitates a note is *not* escaped: the note is a system message or
system part of its own, which no message text can reach.

Every integration renders with *pairing*: a result whose call is
gone is dropped, a call whose result was pruned gets a stand-in result carrying
the note — every request keeps every tool call answered.

**Sync is a faithful diff** (:func:`sync_history`). Besides appending what is
new, it compares the framework's history with what the buffer holds of that
framework and turns each difference into an edit *through the policy*, never
into silent agreement:

* a message quiesce rendered (a note, a stand-in result, a message it
  rendered with pruned calls left out) is recognised by the exact text or
  fingerprint this buffer rendered and never becomes an entry;
* a message whose content changed under the same id is a ``Rewrite`` (applied
  and logged for ordinary entries; refused and escalated for immutable ones,
  and the window keeps the original);
* a message that disappeared is a ``Prune`` request: a plan over every
  dropped message first, and if the policy refuses it (one escalation), the
  same plan without the protected entries; what stays is rendered as before;
* a framework summary (``Unit.summary``: LangChain's summarization message)
  is a ``Summarize`` of what it replaced, refused for protected entries the
  same way (they stay, the summary takes the place of the rest).

A difference is acted on once: the per-buffer :class:`SyncState` remembers
what each message looked like when last synced, so a refused drop or rewrite
is escalated once, not on every turn, and a no-op sync of a history whose
message objects are the ones synced last time is one pass of identity checks.

The code is split by job, and this module is its one surface (the
integrations import it as ``_store``): :mod:`._units` reads messages into
units and units into entries (:func:`sync_units`, :class:`SyncState`),
:mod:`._history` is the faithful diff and its settling through the policy
(:func:`sync_history`, :func:`apply_changes`), :mod:`._window` reads a
snapshot back into framework messages (:func:`window`, :func:`rendered`,
:func:`paired`, :func:`notes`).
"""

from __future__ import annotations

from ..adapters._common import SyncReport as SyncReport
from ._history import SYNC_STEP as SYNC_STEP
from ._history import Changes as Changes
from ._history import _protected as _protected
from ._history import aapply_changes as aapply_changes
from ._history import apply_changes as apply_changes
from ._history import async_sync_history as async_sync_history
from ._history import sync_history as sync_history
from ._units import Call as Call
from ._units import Result as Result
from ._units import Seen as Seen
from ._units import Slot as Slot
from ._units import SyncState as SyncState
from ._units import Unit as Unit
from ._units import async_append_unit as async_append_unit
from ._units import async_sync_units as async_sync_units
from ._units import digest as digest
from ._units import equal as equal
from ._units import local_buffer_of as local_buffer_of
from ._units import same_objects as same_objects
from ._units import state_of as state_of
from ._units import sync_units as sync_units
from ._window import notes as notes
from ._window import paired as paired
from ._window import rendered as rendered
from ._window import stand_in as stand_in
from ._window import window as window
from ._window import window_of as window_of

__all__ = [
    "Call",
    "Changes",
    "Result",
    "Slot",
    "SyncReport",
    "SyncState",
    "Unit",
    "aapply_changes",
    "apply_changes",
    "async_append_unit",
    "async_sync_history",
    "async_sync_units",
    "equal",
    "notes",
    "paired",
    "rendered",
    "same_objects",
    "state_of",
    "sync_history",
    "sync_units",
    "window",
]
