"""The policy: which requests are allowed, as data (h11 style: rules at the top).

Seed 000, condition 4: negative results and prohibitions are never prunable,
because they are load-bearing precisely when nothing cites them. Seed 002,
condition 3: constraints and instructions are never rewritten, summarized or
re-scored; they may be moved. The classifier that recognises a negative result
in a non-protected kind is pluggable.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .entry import Entry, Kind
from .errors import InvalidArgument, InvalidType

__all__ = ["IMMUTABLE_KINDS", "PROTECTED_KINDS", "Policy", "default_negative_classifier"]

#: kind → (protected, immutable). Protected: never removed or paraphrased.
#: Immutable: additionally never marked or rewritten (may be moved).
RULES: dict[Kind, tuple[bool, bool]] = {
    Kind.REASONING: (False, False),
    Kind.NEGATIVE: (True, False),
    Kind.PROHIBITION: (True, False),
    Kind.CONSTRAINT: (True, True),
    Kind.INSTRUCTION: (True, True),
    Kind.TOOL_CALL: (False, False),
    Kind.TOOL_OUTPUT: (False, False),
    Kind.RATIONALE: (False, False),
    Kind.SUMMARY: (False, False),
}

PROTECTED_KINDS = frozenset(k for k, (p, _) in RULES.items() if p)
IMMUTABLE_KINDS = frozenset(k for k, (_, i) in RULES.items() if i)

_NEGATIVE = re.compile(
    r"\b(?:do\s+not|don['’]t|failed|avoid\w*|unsafe|timed\s+out|never)\b", re.IGNORECASE
)


#: Every match of ``_NEGATIVE`` in an ASCII text contains one of these in
#: its lowercase form (the regex runs only if one is there).
_NEGATIVE_HINTS = ("not", "don", "fail", "avoid", "unsafe", "timed", "never")


def default_negative_classifier(entry: Entry) -> bool:
    """Seed 000's test: the body says "do not", "don't", "failed", "avoid",
    "unsafe", "timed out" or "never", or the entry records a verifier rejection
    (``meta["verdict"] == "rejected"``). O(len(body)), a few ns per byte: an
    ASCII body is searched for the words' cores with ``str.find`` first
    (every match of the case-insensitive regex contains one of them in the
    lowercased body), and the regex runs only when one is found. A
    non-ASCII body always goes to the regex (Unicode case folding matches
    more than ``str.lower`` shows, e.g. the long s)."""
    if entry.meta.get("verdict") == "rejected":
        return True
    body = entry.body
    if body.isascii():
        low = body.lower()
        if not any(h in low for h in _NEGATIVE_HINTS):
            return False
    return _NEGATIVE.search(body) is not None


@dataclass(frozen=True, slots=True)
class Policy:
    """Decides what may be removed or paraphrased.

    ``negative`` classifies entries of non-protected kinds as negative results
    (protected in effect). ``max_backlog`` bounds the staged-removal backlog
    before a ``BACKLOG`` escalation (seed 000: the residual failure must be
    visible).
    """

    negative: Callable[[Entry], bool] = default_negative_classifier
    max_backlog: int = 1000

    def __post_init__(self) -> None:
        if not callable(self.negative):
            raise InvalidType(
                f"negative must be a callable classifier, not {type(self.negative).__name__}"
            )
        if type(self.max_backlog) is not int:
            raise InvalidType(f"max_backlog must be an int, not {type(self.max_backlog).__name__}")
        if self.max_backlog < 0:
            raise InvalidArgument(f"max_backlog must be >= 0, got {self.max_backlog}")

    def is_immutable(self, entry: Entry) -> bool:
        return entry.kind in IMMUTABLE_KINDS

    def protection(self, entry: Entry) -> str | None:
        """``"protected"`` for a protected kind, ``"negative"`` when the
        classifier flags it, else ``None``. O(len(body)) for the default
        classifier (a few ns per byte). A staged removal is not classified
        again at its grace point if the entry is unchanged (``Group.checked``)."""
        if entry.kind in PROTECTED_KINDS:
            return "protected"
        if self.negative(entry):
            return "negative"
        return None
