"""The policy: which requests are allowed, as data (h11 style: rules at the top).

Seed 000, condition 4: negative results and prohibitions are never prunable,
because they are load-bearing precisely when nothing cites them. Seed 002,
condition 3: constraints and instructions are never rewritten, summarized or
re-scored; they may be moved. The classifier that recognises a negative result
in a non-protected kind is pluggable.

Signed reasoning (an entry whose content is a provider-signed block, see
:attr:`Entry.sealed`) is never rewritten or summarized — the edit is refused as
``IMMUTABLE`` and escalated, like a paraphrased constraint — and is removed
only with its turn: :func:`sealed_conflicts` is the rule, shared by ``prune``
and ``edit``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .entry import Entry, Kind, check_int
from .errors import InvalidType

__all__ = [
    "IMMUTABLE_KINDS",
    "PROTECTED_KINDS",
    "Policy",
    "default_negative_classifier",
    "preclassify",
]

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
#: its lowercase form (the regex runs only if one is there). The longest
#: such cores: a scan costs less per byte the longer its needle (an ASCII
#: body cannot hold the typographic apostrophe of "don’t").
_NEGATIVE_HINTS = ("not", "don't", "failed", "avoid", "unsafe", "timed", "never")

#: Bodies at least this long have their verdict cached (below it a scan
#: costs about what a cache lookup does).
_CACHE_FROM = 512
#: Most verdicts the cache keeps (oldest dropped first): under 2 MB.
_CACHE_SIZE = 8192
#: (content hash, body length) -> verdict of :func:`_scan`, oldest first
_verdicts: dict[tuple[str, int], bool] = {}


def _scan(body: str) -> bool:
    """Whether ``body`` matches ``_NEGATIVE``: an ASCII body is searched for
    the words' cores with ``str.find`` first (every match of the
    case-insensitive regex contains one of them in the lowercased body), and
    the regex runs only when one is found. A non-ASCII body always goes to
    the regex (Unicode case folding matches more than ``str.lower`` shows,
    e.g. the long s). O(len(body)), about 2-4 ns per byte when no core is
    there."""
    if body.isascii():
        low = body.lower()
        if not any(h in low for h in _NEGATIVE_HINTS):
            return False
    return _NEGATIVE.search(body) is not None


def default_negative_classifier(entry: Entry) -> bool:
    """Seed 000's test: the body says "do not", "don't", "failed", "avoid",
    "unsafe", "timed out" or "never", or the entry records a verifier rejection
    (``meta["verdict"] == "rejected"``).

    Classified once per content: the verdict on a body of at least
    ``_CACHE_FROM`` characters is cached by the entry's content hash and the
    body's length (the identity the re-admission guard uses too), in a
    bounded cache shared by every buffer (``_CACHE_SIZE`` verdicts, oldest
    dropped first). So a body seen again (the same output under another id,
    a refused prune asked again, an edit after a prune) costs O(1); the
    first sight is :func:`_scan`, O(len(body)). Thread-safe: each cache step
    is one dict operation under the GIL, and a race at worst scans twice."""
    if entry.meta.get("verdict") == "rejected":
        return True
    body = entry.body
    n = len(body)
    if n < _CACHE_FROM:
        return _scan(body)
    key = (entry.content_hash, n)
    verdict = _verdicts.get(key)
    if verdict is None:
        verdict = _scan(body)
        cache = _verdicts
        while len(cache) >= _CACHE_SIZE:
            try:
                cache.pop(next(iter(cache)), None)
            except (StopIteration, RuntimeError):  # emptied or changed meanwhile
                break
        cache[key] = verdict
    return verdict


def preclassify(entry: Entry) -> None:
    """Cache the default classifier's verdict on ``entry`` when it enters a
    buffer whose policy is the library's own (``Buffer.append`` calls it for
    bodies of at least ``_CACHE_FROM`` characters, before taking the write
    lock). The body's scan, O(len(body)), happens here once per content, not
    under the write lock of a later ``prune`` or ``edit``: removing a big
    entry then costs what removing a small one does, unless its verdict was
    dropped from the bounded cache meanwhile (then it is scanned again).
    Protected kinds are skipped: the classifier is never asked about them."""
    if entry.kind not in PROTECTED_KINDS and entry.meta.get("verdict") != "rejected":
        default_negative_classifier(entry)


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
        check_int(self.max_backlog, "max_backlog")

    def is_immutable(self, entry: Entry) -> bool:
        return entry.kind in IMMUTABLE_KINDS

    def protection(self, entry: Entry) -> str | None:
        """``"protected"`` for a protected kind, ``"negative"`` when the
        classifier flags it, else ``None``. O(len(body)) for the default
        classifier (a few ns per byte). With the library's own policy, a staged
        removal is not classified again at its grace point if the entry is
        unchanged (``Group.checked``); a user's policy is asked again there."""
        if entry.kind in PROTECTED_KINDS:
            return "protected"
        if self.negative(entry):
            return "negative"
        return None
