"""The records of a checkpoint: the ``anchor`` that announces its SHA-256
and the ``checkpoint`` that carries the whole state.

What this module keeps true: the parsers only read the digest and the
state; whether they agree is :func:`..checkpoint.verify_checkpoint`'s
check. O(1) besides the state itself.
"""

from __future__ import annotations

from typing import Any

from ..errors import LogFormatError
from ..records import LogRecord
from .fields import APPLIED, Op

__all__ = ["anchor_record", "checkpoint_record", "parse_anchor", "parse_checkpoint"]


def anchor_record(seq: int, at: float, digest: str) -> LogRecord:
    """The anchor before a checkpoint: its SHA-256 ``digest``."""
    return LogRecord(
        seq, at, Op.ANCHOR.value, None, (), None, None, None, APPLIED, {"sha256": digest}
    )


def parse_anchor(rec: LogRecord) -> str | None:
    """The SHA-256 an ``anchor`` record announces (``None``: it has none)."""
    digest = rec.detail.get("sha256")
    return digest if type(digest) is str else None


def checkpoint_record(seq: int, at: float, digest: str, state: dict[str, Any]) -> LogRecord:
    """The checkpoint record of ``state`` with its SHA-256 ``digest``."""
    ids = ()
    detail = {"sha256": digest, "state": state}
    return LogRecord(seq, at, Op.CHECKPOINT.value, None, ids, None, None, None, APPLIED, detail)


def parse_checkpoint(rec: LogRecord) -> tuple[dict[str, Any], str]:
    """The state and SHA-256 of a ``checkpoint`` record (unchecked against
    each other: :func:`.checkpoint.verify_checkpoint` does that), or
    :class:`LogFormatError` if either is missing."""
    if rec.op != Op.CHECKPOINT.value:
        raise LogFormatError(f"log record {rec.seq} is a {rec.op!r} record, not a checkpoint")
    state = rec.detail.get("state")
    want = rec.detail.get("sha256")
    if not isinstance(state, dict) or not isinstance(want, str):
        raise LogFormatError(f"checkpoint {rec.seq} has no state or checksum")
    return state, want
