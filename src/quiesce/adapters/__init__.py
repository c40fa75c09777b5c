"""Chat-message adapters: three APIs' messages ⇄ entries, losslessly.

Plain dicts or the SDKs' own pydantic objects in (``messages.append(
response.choices[0].message)``, Anthropic's ``response.content`` blocks,
``items += response.output``: stored as the SDK sends them, ``model_dump(
exclude_unset=True, mode="json", by_alias=True, exclude=__api_exclude__)``),
plain dicts out; no SDK is imported (the test is duck-typed: ``model_dump``).
Each adapter module —
:mod:`~quiesce.adapters.openai` (Chat Completions messages),
:mod:`~quiesce.adapters.responses` (OpenAI Responses API input items) and
:mod:`~quiesce.adapters.anthropic` (Anthropic Messages) — has the same five
functions:

* ``to_entries(messages, ...) -> list[Entry]`` — entries for a list of
  messages (deterministic ids: the same list gives the same entries);
* ``append_messages(buf, messages, *, readmit="record", ...) -> int`` —
  validate everything, decide every re-admission, then append (a malformed
  message raises naming its index and field, and nothing is appended);
* ``sync_messages(buf, messages, *, readmit="record", ...) -> SyncReport`` —
  the framework's whole history in, diffed against the last one synced:
  only what the buffer lacks appended; idempotent; pruned messages sent back
  are reported, not re-appended; quiesce's own notes, stand-ins and escapes
  fed back (``render(buf) + [next]``) are recognised; a message that
  disappeared is a removal request, a changed one a ``Rewrite``, a summary
  in place of messages a ``Summarize`` — all through the policy, so a
  framework's trimmer cannot drop a constraint (:func:`~quiesce.adapters.
  _common.sync_history`); a no-op sync is one pass of C-level compares;
* ``render(snapshot_or_buffer, ...)`` — what the API accepts, equal to the
  input when nothing was pruned or marked (Anthropic: a dict with ``system``
  and ``messages``; the others: a list of dicts); the removal note names the
  :data:`NOTE_NAMES` newest removals and counts the rest within
  :data:`NOTE_LIMIT` characters (``note_names=``, ``note_limit=``), at the
  end of the window, so a removal leaves the prefix before it unchanged
  (prompt caches keep it); a version rendered again is one ``json.loads``;
* ``validate(messages)`` — check that shape;
* ``await append_stream(buf, events, ...)`` — the SDK's raw stream (an
  async or sync iterable of its event objects or their dicts) into open
  entries as it arrives: text, refusal, reasoning and thinking deltas
  written into open entries, each tool call appended when complete,
  thinking and reasoning rendered only in their final, signed form; returns
  the final message the SDK's own accumulator builds. An interrupted stream
  keeps the text that arrived, marked stale; an error event is
  :class:`StreamFailed` (:mod:`quiesce.adapters._stream`).

``readmit=`` decides what happens when a loop sends content again that the
buffer pruned (a re-run of a pruned tool call): ``"record"`` (default)
appends it with a logged ``Override`` naming the adapter and escalates
``EscalationKind.OSCILLATION`` on the second cycle within
``OSCILLATION_WINDOW`` versions; ``"refuse"`` raises ``ReadmissionRefused``;
a callable gets a :class:`Readmission` and answers ``"refuse"``,
``"record"`` or an ``Override``. The core's ``Buffer.append`` keeps refusing
without an ``Override``.

Ids a framework reuses never crash: :data:`PLACEHOLDER_IDS` (the Agents
SDK's ``FAKE_RESPONSES_ID``), an id used twice in a list, or an id the
buffer holds for another item: the item is stored under a generated id and
its own ``id`` round-trips verbatim.

Ids and the note format are described in :mod:`quiesce.adapters._common`
(generated ids contain ``#``, which foreign ids may not; every note is one
line starting with ``[quiesce:``, its fields escaped, and text imitating a
note is escaped on render). The adapters import the core; the core imports
nothing from here.
"""

from . import anthropic as anthropic
from . import openai as openai
from . import responses as responses
from ._common import NOTE_LIMIT as NOTE_LIMIT
from ._common import NOTE_NAMES as NOTE_NAMES
from ._common import NOTE_PREFIX as NOTE_PREFIX
from ._common import OSCILLATION_WINDOW as OSCILLATION_WINDOW
from ._common import PLACEHOLDER_IDS as PLACEHOLDER_IDS
from ._common import RESERVED as RESERVED
from ._common import Readmission as Readmission
from ._common import SyncReport as SyncReport
from ._stream import StreamFailed as StreamFailed

__all__ = [
    "NOTE_LIMIT",
    "NOTE_NAMES",
    "NOTE_PREFIX",
    "OSCILLATION_WINDOW",
    "PLACEHOLDER_IDS",
    "RESERVED",
    "Readmission",
    "StreamFailed",
    "SyncReport",
    "anthropic",
    "openai",
    "responses",
]
