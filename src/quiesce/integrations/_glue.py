"""What the four integrations share besides the store: the missing-extra
error, the setup check, and the one pruning round before each model call.

The integrations depend on :class:`~quiesce.AsyncBuffer` only: every write
they make on the event loop goes through its async paths (``aappend`` via
:func:`~quiesce.adapters._common.aadmit`, ``aprune``, ``aedit``), so no
SQLite or PostgreSQL I/O runs on the loop, and a
:class:`~quiesce.SharedBuffer` holds a conversation as well as the buffer of
``open_buffer()``. A plain :class:`~quiesce.Buffer` is given the same face
(:func:`~quiesce._protocol.async_buffer`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .._core.buffer import Buffer
from .._core.errors import InvalidType
from .._core.records import EditReport
from .._protocol import AsyncBuffer, async_buffer, local_buffer
from ..pruner import Pruner, run_pruner

__all__ = [
    "check_setup",
    "framework_imports",
    "missing_extra",
    "prune_round",
    "sync_buffer",
]


def missing_extra(framework: str, extra: str) -> ImportError:
    """The error raised when an integration's framework is not installed."""
    return ImportError(
        f"quiesce.integrations.{extra.replace('-', '_')} needs {framework}: "
        f'pip install "quiesce[{extra}]"'
    )


@contextlib.contextmanager
def framework_imports(framework: str, extra: str) -> Iterator[None]:
    """The block that imports an integration's framework: an ``ImportError``
    in it (the framework, or a part of it, is not installed) becomes the
    :func:`missing_extra` error naming the extra to install, chained to the
    original. Used at module level::

        with framework_imports("LangChain", "langchain"):
            from langchain_core.messages import AIMessage
    """
    try:
        yield
    except ImportError as exc:  # pragma: no cover - exercised without the extra
        raise missing_extra(framework, extra) from exc


def check_setup(buffer: object, pruner: object, owner: str) -> AsyncBuffer:
    """``buffer`` must be a :class:`Buffer` or an :class:`AsyncBuffer`
    (returned as one); ``pruner`` ``None`` or a :class:`Pruner`. Else
    :class:`InvalidType` naming ``owner``."""
    face = async_buffer(buffer, owner)
    if pruner is not None and not isinstance(pruner, Pruner):
        raise InvalidType(f"{owner}: pruner must be a Pruner or None, not {type(pruner).__name__}")
    return face


def sync_buffer(buffer: Buffer | AsyncBuffer, owner: str) -> Buffer:
    """The in-process :class:`Buffer` a framework's *synchronous* hook writes
    to (it runs in a thread with no event loop of ours). A shared buffer has
    no sync write path: :class:`InvalidType` says to use the framework's
    async entry point."""
    local = buffer if isinstance(buffer, Buffer) else local_buffer(buffer)
    if local is None:
        raise InvalidType(
            f"{owner}: a {type(buffer).__name__} is written asynchronously; "
            "run the agent with its async entry point (ainvoke, astream)"
        )
    return local


async def prune_round(buffer: Buffer | AsyncBuffer, pruner: Pruner | None) -> EditReport | None:
    """One :func:`~quiesce.run_pruner` round if a pruner is configured.

    Always a checkpoint only when a pruner runs. A refused plan is not an
    error here: the buffer has logged and escalated it, and the model call
    goes ahead on the unpruned window. The plan goes in with ``aedit``
    (never a flush on the loop)."""
    if pruner is None:
        return None
    return await run_pruner(buffer, pruner)
