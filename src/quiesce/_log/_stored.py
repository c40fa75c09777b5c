"""A retried batch: how much of it a sink already stored.

What it keeps true: a batch retried after a COMMIT whose reply was lost
(or that reported failure but reached the disk) is written at most once.
Its leading records that are stored already are skipped only if they are
*the same records*, compared whole (the stored text against the batch's
own encoding, which is deterministic); a gap, or another record at the
same seq, is a divergence and raises — never silently skipped. Shared by
the SQLite and PostgreSQL sinks; no I/O of its own (the sink reads).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["already_stored"]


def already_stored(
    first: int,
    stored: int,
    texts: Sequence[str],
    read: Callable[[int, int], Sequence[str]],
    diverged: type[ValueError] = ValueError,
) -> int:
    """How many leading records of a batch starting at seq ``first`` (encoded
    as ``texts``) are stored already, in a log holding ``stored`` records.
    ``read(start, stop)`` returns the stored texts of seqs ``start`` ..
    ``stop - 1`` in order. Raises ``ValueError`` when the batch starts past
    the log's end (a gap) and ``diverged`` (a ``ValueError``) when a stored
    record differs from the batch's. O(skipped records)."""
    if first > stored:
        raise ValueError(f"batch starts at seq {first} but the log holds {stored} records")
    skip = min(stored - first, len(texts))
    if skip and list(read(first, first + skip)) != list(texts[:skip]):
        raise diverged(
            f"records {first}..{first + skip - 1} are stored with different contents: "
            f"the log and the buffer diverged"
        )
    return skip
