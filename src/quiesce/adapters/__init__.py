"""Chat-message adapters: three APIs' messages ⇄ entries, losslessly.

Plain dicts in, plain dicts out; no SDK is imported. Each adapter module —
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
  the framework's whole history in, only what the buffer lacks appended;
  idempotent; pruned messages sent back are reported, not re-appended;
* ``render(snapshot_or_buffer, ...)`` — what the API accepts, equal to the
  input when nothing was pruned or marked (Anthropic: a dict with ``system``
  and ``messages``; the others: a list of dicts);
* ``validate(messages)`` — check that shape.

``readmit=`` decides what happens when a loop sends content again that the
buffer pruned (a re-run of a pruned tool call): ``"record"`` (default)
appends it with a logged ``Override`` naming the adapter and escalates
``EscalationKind.OSCILLATION`` on the second cycle within
``OSCILLATION_WINDOW`` versions; ``"refuse"`` raises ``ReadmissionRefused``;
a callable gets a :class:`Readmission` and answers ``"refuse"``,
``"record"`` or an ``Override``. The core's ``Buffer.append`` keeps refusing
without an ``Override``.

Ids and the note format are described in :mod:`quiesce.adapters._common`
(generated ids contain ``#``, which foreign ids may not; every note is one
line starting with ``[quiesce:``, its fields escaped, and text imitating a
note is escaped on render). The adapters import the core; the core imports
nothing from here.
"""

from . import anthropic as anthropic
from . import openai as openai
from . import responses as responses
from ._common import NOTE_PREFIX as NOTE_PREFIX
from ._common import OSCILLATION_WINDOW as OSCILLATION_WINDOW
from ._common import RESERVED as RESERVED
from ._common import Readmission as Readmission
from ._common import SyncReport as SyncReport

__all__ = [
    "NOTE_PREFIX",
    "OSCILLATION_WINDOW",
    "RESERVED",
    "Readmission",
    "SyncReport",
    "anthropic",
    "openai",
    "responses",
]
