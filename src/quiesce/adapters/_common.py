"""What the chat adapters share: ids, notes, admission, sync, re-admission.

Every adapter reads a list of messages (or API items) into *messages*: each a
list of entries made from one message, validated as a whole before anything
is appended, so an error names its message index and leaves the head
unchanged. Entries carry the message's original JSON in ``content`` (the part,
block, tool call or item they were read from) and tags in ``meta``:

* ``api`` — the adapter that read it (``openai``, ``responses``, ``anthropic``);
  a renderer uses ``content`` only for entries of its own API and falls back to
  the body for the others (cross-rendering, summaries, rewrites);
* ``role`` — the message's role; ``msg`` — the message key, shared by all the
  entries of one message, so rendering can put the message back together;
* ``after`` — the key of the message that came before it when it was read,
  so rendering can tell a pruning-made neighbour from an original one.

Ids. Foreign ids (tool-call ids, Responses item ids) are kept verbatim and stay
addressable, but may not contain :data:`RESERVED` (``#``): every id the
adapters generate contains it, so no foreign id can take a generated one. A
tool result is ``"<call id>#result"``; a message without a foreign id is keyed
by its content, ``"#<16 hex digits of sha256 of its canonical JSON>.<n>"``
(``cache_control`` hints left out), ``n`` counting the identical messages
before it; the blocks of a message without an id of their own are
``"<message key>#<index>"``, the key being the content key or the message's
first foreign id (its first tool use, or the result id of its first tool
result). The same message read again gets the same ids: that is what makes
``sync_messages`` idempotent.

Notes. Everything quiesce writes into a rendered window is a *note*: one line
that starts with ``[quiesce:`` and ends with ``]``:

* ``[quiesce: stale at turn 3: <reason>]`` — in front of a stale entry's text;
* ``[quiesce: <id> pruned at turn 41 by <actor>: <reason>]`` — one per removal;
* ``[quiesce: no result recorded for <call id>]`` — a call still in flight;
* ``[quiesce: removed from this context]`` — the heading of the removal list.

Inside a note, reasons, actors and ids are escaped: a backslash, ``[``, ``]``
and every control or line-separator character become ``\\\\``, ``\\[``,
``\\]``, ``\\n``, ``\\xNN``…, so a note is always exactly one line and a
reason cannot close it early or forge another. Text that is *not* a note
(user, assistant, system and tool text) cannot imitate one: a line of it that
starts (after spaces) with ``[quiesce`` in any letter case is rendered with a
backslash before the ``[``. That is the one place a round trip is not exact.
Signed blocks are never touched.


Where each part lives (this module re-exports them, for the integrations and
anything else built on the adapters): :mod:`._sdk` (SDK objects in),
:mod:`._checks` (validation errors naming the message), :mod:`._keys` (ids
and content keys), :mod:`._notes` (notes, and recognising a rendered
message), :mod:`._window` (rendering helpers), :mod:`._admit` (appending,
re-admission), :mod:`._sync` (the faithful diff), :mod:`._skeleton` (what
every API module is built on).
"""

from __future__ import annotations

from .._core.entry import result_id as result_id
from ._admit import OSCILLATION_WINDOW as OSCILLATION_WINDOW
from ._admit import Read as Read
from ._admit import Reader as Reader
from ._admit import Readmission as Readmission
from ._admit import ReadmitPolicy as ReadmitPolicy
from ._admit import SyncReport as SyncReport
from ._admit import aadmit as aadmit
from ._admit import admit as admit
from ._admit import aread_and_admit as aread_and_admit
from ._admit import check_readmit as check_readmit
from ._admit import read_and_admit as read_and_admit
from ._admit import read_entries as read_entries
from ._checks import NOUN as NOUN
from ._checks import check_kind as check_kind
from ._checks import check_messages as check_messages
from ._checks import check_nonempty as check_nonempty
from ._checks import check_str as check_str
from ._checks import entry as entry
from ._checks import fail as fail
from ._checks import foreign_id as foreign_id
from ._checks import is_call as is_call
from ._checks import json_value as json_value
from ._checks import parts_text as parts_text
from ._keys import HINTS as HINTS
from ._keys import PLACEHOLDER_IDS as PLACEHOLDER_IDS
from ._keys import RESERVED as RESERVED
from ._keys import Keys as Keys
from ._keys import fingerprint as fingerprint
from ._notes import NOTE_LIMIT as NOTE_LIMIT
from ._notes import NOTE_NAMES as NOTE_NAMES
from ._notes import NOTE_PREFIX as NOTE_PREFIX
from ._notes import RENDERED_CACHE as RENDERED_CACHE
from ._notes import TEXT_TYPES as TEXT_TYPES
from ._notes import annotated as annotated
from ._notes import check_note_options as check_note_options
from ._notes import escape_blocks as escape_blocks
from ._notes import escape_text as escape_text
from ._notes import is_note as is_note
from ._notes import missing_result_note as missing_result_note
from ._notes import recognise as recognise
from ._notes import remember_rendered as remember_rendered
from ._notes import removal_note as removal_note
from ._notes import rendered_ids as rendered_ids
from ._notes import stale_note as stale_note
from ._notes import tomb_note as tomb_note
from ._sdk import sdk_dump as sdk_dump
from ._sdk import to_plain as to_plain
from ._sync import TailReader as TailReader
from ._sync import sync_history as sync_history
from ._window import PLAIN_CACHE as PLAIN_CACHE
from ._window import RENDER_CACHE as RENDER_CACHE
from ._window import Group as Group
from ._window import adjacent as adjacent
from ._window import arguments_json as arguments_json
from ._window import default_role as default_role
from ._window import groups as groups
from ._window import outputs_by_call as outputs_by_call
from ._window import own as own
from ._window import plain as plain
from ._window import render_options as render_options
from ._window import render_with as render_with
from ._window import snapshot_of as snapshot_of
from ._window import tool_name as tool_name
