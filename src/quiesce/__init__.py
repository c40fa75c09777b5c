"""quiesce: concurrency control for an AI agent's mutable context buffer.

Readers pin versions; marking never blocks; pruning waits for each entry's
grace point; every removal leaves a tombstone and an append-only log record;
unsafe edits are refused and escalated. The README states the contract,
docs/design.md the design.
"""

import importlib
from typing import TYPE_CHECKING, Any

from ._core.buffer import Buffer as Buffer
from ._core.buffer import Snapshot as Snapshot
from ._core.entry import Entry as Entry
from ._core.entry import Kind as Kind
from ._core.errors import BufferClosed as BufferClosed
from ._core.errors import DanglingReference as DanglingReference
from ._core.errors import DuplicateEntry as DuplicateEntry
from ._core.errors import EntryPruned as EntryPruned
from ._core.errors import InvalidArgument as InvalidArgument
from ._core.errors import InvalidType as InvalidType
from ._core.errors import LogFormatError as LogFormatError
from ._core.errors import LogLocked as LogLocked
from ._core.errors import LogRecordDropped as LogRecordDropped
from ._core.errors import LogWriteError as LogWriteError
from ._core.errors import ProtectedEntry as ProtectedEntry
from ._core.errors import QuiesceError as QuiesceError
from ._core.errors import ReadmissionRefused as ReadmissionRefused
from ._core.errors import ReentrantWrite as ReentrantWrite
from ._core.errors import SnapshotReleased as SnapshotReleased
from ._core.errors import StreamClosed as StreamClosed
from ._core.errors import UnknownEntry as UnknownEntry
from ._core.log import EditLog as EditLog
from ._core.log import LogSink as LogSink
from ._core.plan import EditPlan as EditPlan
from ._core.plan import Move as Move
from ._core.plan import Prune as Prune
from ._core.plan import Rewrite as Rewrite
from ._core.plan import Summarize as Summarize
from ._core.policy import Policy as Policy
from ._core.policy import default_negative_classifier as default_negative_classifier
from ._core.records import EditReport as EditReport
from ._core.records import Escalation as Escalation
from ._core.records import EscalationKind as EscalationKind
from ._core.records import LogRecord as LogRecord
from ._core.records import Mark as Mark
from ._core.records import Outcome as Outcome
from ._core.records import Override as Override
from ._core.records import PruneReport as PruneReport
from ._core.records import ReaderInfo as ReaderInfo
from ._core.records import Refusal as Refusal
from ._core.records import Stats as Stats
from ._core.records import Status as Status
from ._core.records import Tombstone as Tombstone
from ._core.stream import StreamWriter as StreamWriter

if TYPE_CHECKING:
    from ._log.jsonl import JsonlLog as JsonlLog
    from ._log.postgres import PostgresLog as PostgresLog
    from ._log.postgres import WriterFenced as WriterFenced
    from ._log.sqlite import SQLiteLog as SQLiteLog
    from ._pool import BufferPool as BufferPool
    from ._pool import ConversationMismatch as ConversationMismatch
    from ._pool import PoolStats as PoolStats
    from ._protocol import AsyncBuffer as AsyncBuffer
    from ._runtime import RuntimeBuffer as RuntimeBuffer
    from ._runtime import open_buffer as open_buffer
    from ._shared import LeaseLost as LeaseLost
    from ._shared import SharedBuffer as SharedBuffer
    from ._shared import SharedStats as SharedStats
    from ._shared import SharedWriteTimeout as SharedWriteTimeout
    from ._shared import open_shared_buffer as open_shared_buffer
    from .pruner import HeuristicPruner as HeuristicPruner
    from .pruner import Pruner as Pruner
    from .pruner import run_pruner as run_pruner

__version__ = "0.1.0"

#: Names imported on first use (PEP 562), each with its module. ``import
#: quiesce`` loads the sync core alone: the durable logs (sqlite3, the JSONL
#: format), the async runtime and pool (anyio), the pruner, and the names that
#: need an optional extra (psycopg, ``quiesce[postgres]``) load when a program
#: first reads one of them. ``from quiesce import X`` works for every X here.
_LAZY = {
    "JsonlLog": "quiesce._log.jsonl",
    "SQLiteLog": "quiesce._log.sqlite",
    "BufferPool": "quiesce._pool",
    "ConversationMismatch": "quiesce._pool",
    "PoolStats": "quiesce._pool",
    "AsyncBuffer": "quiesce._protocol",
    "RuntimeBuffer": "quiesce._runtime",
    "open_buffer": "quiesce._runtime",
    "HeuristicPruner": "quiesce.pruner",
    "Pruner": "quiesce.pruner",
    "run_pruner": "quiesce.pruner",
    "PostgresLog": "quiesce._log.postgres",
    "WriterFenced": "quiesce._log.postgres",
    "open_shared_buffer": "quiesce._shared",
    "SharedBuffer": "quiesce._shared",
    "SharedStats": "quiesce._shared",
    "LeaseLost": "quiesce._shared",
    "SharedWriteTimeout": "quiesce._shared",
}


def __getattr__(name: str) -> Any:
    """The lazy names of :data:`_LAZY`: the first read imports the module and
    caches the value in this module's globals (later reads never come here).
    Thread-safe through the import lock; O(1) after the first read."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'quiesce' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
