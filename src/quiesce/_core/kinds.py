"""Entry kinds: what an entry is, in a module of its own.

What it keeps true: :class:`Kind` depends on nothing else in the core, so the
records built from it (a :class:`~.tombstone.Tombstone` names the kind of what
it replaced) and the errors that carry those records import no module that
imports them back (the core's import graph has no circle).
"""

from __future__ import annotations

import enum

__all__ = ["Kind"]


class Kind(enum.Enum):
    """What an entry is. The policy's rule table (``policy.py``) says which
    kinds are protected (never removed or paraphrased) and immutable (never
    marked, rewritten or summarized; they may be moved)."""

    REASONING = "reasoning"
    NEGATIVE = "negative"
    PROHIBITION = "prohibition"
    CONSTRAINT = "constraint"
    INSTRUCTION = "instruction"
    TOOL_CALL = "tool_call"
    TOOL_OUTPUT = "tool_output"
    RATIONALE = "rationale"
    SUMMARY = "summary"
