"""What the four integrations share besides the store: the missing-extra
error and the one pruning round before each model call."""

from __future__ import annotations

from .._core.buffer import Buffer
from .._core.errors import InvalidType
from .._core.records import EditReport
from ..pruner import Pruner, run_pruner

__all__ = ["check_setup", "missing_extra", "prune_round"]


def missing_extra(framework: str, extra: str) -> ImportError:
    """The error raised when an integration's framework is not installed."""
    return ImportError(
        f"quiesce.integrations.{extra.replace('-', '_')} needs {framework}: "
        f'pip install "quiesce[{extra}]"'
    )


def check_setup(buffer: object, pruner: object, owner: str) -> None:
    """``buffer`` must be a :class:`Buffer`; ``pruner`` ``None`` or a :class:`Pruner`."""
    if not isinstance(buffer, Buffer):
        raise InvalidType(f"{owner} needs a Buffer, not {type(buffer).__name__}")
    if pruner is not None and not isinstance(pruner, Pruner):
        raise InvalidType(f"{owner}: pruner must be a Pruner or None, not {type(pruner).__name__}")


async def prune_round(buffer: Buffer, pruner: Pruner | None) -> EditReport | None:
    """One :func:`~quiesce.run_pruner` round if a pruner is configured.

    Always a checkpoint only when a pruner runs. A refused plan is not an
    error here: the buffer has logged and escalated it, and the model call
    goes ahead on the unpruned window."""
    if pruner is None:
        return None
    return await run_pruner(buffer, pruner)
