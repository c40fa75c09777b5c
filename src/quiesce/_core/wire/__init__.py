"""The edit log's record schema: every op, its builder and its parser.

This package is the import point (``from quiesce._core.wire import ...``);
its modules are the record families, one job each:

- :mod:`.fields`: :class:`Op` and the field checks every parser shares;
- :mod:`.entries`: ``append`` and ``mark``, the fast paths' records;
- :mod:`.changes`: ``prune`` and ``edit``, which mark, stage and change;
- :mod:`.removals`: the ``tombstone`` intent and the ``remove``;
- :mod:`.verdicts`: ``refuse`` and ``escalate``, what was not done;
- :mod:`.streams`: an open entry's ``stream_*`` records;
- :mod:`.checkpoints`: ``anchor`` and ``checkpoint``.

What the package keeps true:

- **One home per record kind.** :class:`Op` names every operation a
  format-1 record may carry. For each kind there is one builder (the only
  code that writes its ``detail`` keys) and one parser (the only code that
  reads them back, checking their types): the engine, recovery
  (:mod:`..replay`), checkpoints, the shared buffer, ``quiesce.testing`` and
  ``quiesce inspect`` go through these. ``quiesce._log`` only turns records
  into bytes and back.
- **The bytes do not change.** A builder makes exactly the record the
  engine wrote before this module existed (same keys, same order), so old
  logs open and new logs read the same (the log-format tests and the
  committed fixtures hold it).
- **A parser refuses, never crashes.** A detail field of the wrong type or
  shape raises :class:`LogFormatError` naming the record (``log record
  <seq> (<op>): ...``), never ``KeyError``/``TypeError``. A parser checks
  shapes only; whether the history is possible (an id is live, a version
  follows) is :mod:`..replay`'s job.
- **The fast paths stay compact.** ``mark_stale`` and ``append`` store a
  plain tuple (see :mod:`..log`); :func:`mark_record` and
  :func:`append_record` are the functions that expand it, at most once,
  when the record is first read.

The detail keys of each op are listed in ``docs/design.md`` (the record
schema); each family's builders write them, in that order.

Every builder takes the record's ``seq`` and wall-clock time ``at`` first
and is O(size of the detail); every parser is O(size of the detail). No
function here takes a lock, does I/O or keeps state, so cancellation
cannot leave anything half done.
"""

from __future__ import annotations

from .changes import (
    Change,
    edit_record,
    edit_refused_record,
    parse_change,
    prune_record,
    staged_rows,
)
from .checkpoints import anchor_record, checkpoint_record, parse_anchor, parse_checkpoint
from .entries import Append, append_record, mark_record, parse_append, parse_mark
from .fields import KEY_LIMIT, OPS, Op, order_key
from .removals import Remove, intent_record, parse_intent, parse_remove, remove_record
from .streams import (
    StreamFinish,
    StreamText,
    parse_stream_finish,
    parse_stream_open,
    parse_stream_text,
    stream_finish_record,
    stream_open_record,
    stream_text_record,
)
from .verdicts import Escalate, Refuse, escalate_record, parse_escalate, parse_refuse, refuse_record

__all__ = [
    "KEY_LIMIT",
    "OPS",
    "Append",
    "Change",
    "Escalate",
    "Op",
    "Refuse",
    "Remove",
    "StreamFinish",
    "StreamText",
    "anchor_record",
    "append_record",
    "checkpoint_record",
    "edit_record",
    "edit_refused_record",
    "escalate_record",
    "intent_record",
    "mark_record",
    "order_key",
    "parse_anchor",
    "parse_append",
    "parse_change",
    "parse_checkpoint",
    "parse_escalate",
    "parse_intent",
    "parse_mark",
    "parse_refuse",
    "parse_remove",
    "parse_stream_finish",
    "parse_stream_open",
    "parse_stream_text",
    "prune_record",
    "refuse_record",
    "remove_record",
    "staged_rows",
    "stream_finish_record",
    "stream_open_record",
    "stream_text_record",
]
